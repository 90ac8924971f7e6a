"""HookVerifier: checks, then PostVerify, then Stop hooks decide whether an answer stands."""

from __future__ import annotations

from collections.abc import Sequence

from geode.executor import HookVerifier
from geode.hooks import HookEvent, HookRegistry, HookResult
from geode.loop.protocols import TurnInfo, Verifier, VerifyOutcome
from geode.messages import Message

TURN = TurnInfo(session_id="s", turn_id="t", round=2, correlation_id="c", mode="DAEMON")


async def verify(v: HookVerifier, text: str = "The report is in out.md.") -> VerifyOutcome:
    return await v.verify(text=text, messages=[Message.user("write the report")], turn=TURN)


async def test_no_hooks_non_empty_passes_and_empty_fails() -> None:
    v = HookVerifier()
    assert isinstance(v, Verifier)
    assert (await verify(v)).passed
    empty = await verify(v, "   ")
    assert not empty.passed and "empty" in empty.reason


async def test_post_verify_revise_fails_with_the_instruction() -> None:
    hooks = HookRegistry()
    seen: list[str | None] = []

    @hooks.on("PostVerify")
    async def require_path(event: HookEvent) -> HookResult:
        seen.append(event.text)
        if "out.md" not in (event.text or ""):
            return HookResult.revise("name the output file")
        return HookResult.accept()

    v = HookVerifier(hooks=hooks)
    accepted = await verify(v)
    revised = await verify(v, "Done.")
    assert accepted == VerifyOutcome(passed=True)
    assert revised == VerifyOutcome(passed=False, reason="name the output file")
    assert seen == ["The report is in out.md.", "Done."]


async def test_stop_continue_with_fails_with_the_instruction() -> None:
    hooks = HookRegistry()
    hooks.register("Stop", lambda e: HookResult.continue_with("run the tests first"))
    out = await verify(HookVerifier(hooks=hooks))
    assert out == VerifyOutcome(passed=False, reason="run the tests first")


async def test_revise_wins_before_stop_hooks_run() -> None:
    hooks = HookRegistry()
    stops: list[str] = []
    hooks.register("PostVerify", lambda e: HookResult.revise("fix it"))
    hooks.register("Stop", lambda e: stops.append("ran"))  # type: ignore[arg-type,func-returns-value]
    out = await verify(HookVerifier(hooks=hooks))
    assert out.reason == "fix it" and stops == []


async def test_a_raising_post_verify_hook_fails_verification() -> None:
    hooks = HookRegistry()

    async def broken(event: HookEvent) -> HookResult:
        raise RuntimeError("grader crashed")

    hooks.register("PostVerify", broken)
    out = await verify(HookVerifier(hooks=hooks))
    assert not out.passed and "cannot be accepted" in out.reason


async def test_a_raising_stop_hook_finalizes() -> None:
    hooks = HookRegistry()

    async def broken(event: HookEvent) -> HookResult:
        raise RuntimeError("stop hook crashed")

    hooks.register("Stop", broken)
    assert (await verify(HookVerifier(hooks=hooks))).passed


async def test_custom_checks_run_first_and_a_raising_check_fails() -> None:
    calls: list[str] = []

    async def cites(text: str, messages: Sequence[Message]) -> VerifyOutcome:
        calls.append("cites")
        return VerifyOutcome(passed="[1]" in text, reason="cite a source")

    async def broken(text: str, messages: Sequence[Message]) -> VerifyOutcome:
        raise ValueError("bad check")

    hooks = HookRegistry()
    hooks.register("PostVerify", lambda e: calls.append("hook"))  # type: ignore[arg-type,func-returns-value]
    failed = await verify(HookVerifier(hooks=hooks, checks=[cites]))
    assert failed == VerifyOutcome(passed=False, reason="cite a source")
    assert calls == ["cites"]  # hooks do not run once a check failed
    crashed = await verify(HookVerifier(checks=[broken]))
    assert not crashed.passed and "ValueError" in crashed.reason
