"""Verify judges through the runtime: a failed verdict is repaired (up to the repair budget)
and ends `verification_failed`; a judge error is a verify error, never a pass; `none` keeps
behaviour unchanged. The llm judge runs through the real Anthropic SDK against the fake; Jev
against a loopback SystemOne fake."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.errors import ConfigError
from geode.providers.judge import JudgeError, parse_verdict, turn_evidence
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.testing.fake_anthropic import FakeAnthropicServer

FAIL = json.dumps({"verdict": "fail", "reason": "the file list is missing"})
PASS = json.dumps({"verdict": "pass", "reason": "complete"})


def _runtime(tmp_path: Path, toml: str, **env: str) -> Runtime:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(toml)
    settings, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home), **env})
    return Runtime(settings=settings, secrets=secrets)


@pytest.fixture
async def judge_server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as srv:
        yield srv


def _llm_runtime(tmp_path: Path, srv: FakeAnthropicServer, extra: str = "") -> Runtime:
    return _runtime(
        tmp_path, f'[verify]\njudge = "llm"\n{extra}',
        ANTHROPIC_API_KEY="sk-ant-judge-0123456789", ANTHROPIC_BASE_URL=srv.base_url,
    )


async def _turn(rt: Runtime, tmp_path: Path, script: list[Any], prompt: str = "list the files"
                ) -> tuple[Any, ScriptedProvider]:
    provider = ScriptedProvider(script)
    async with rt:
        session = await rt.open_session(
            SessionContext(mode="HEADLESS", workspace=tmp_path, provider=provider)
        )
        result = await session.run(prompt)
    return result, provider


async def test_failing_verdict_is_repaired_up_to_two_then_verification_failed(
    tmp_path: Path, judge_server: FakeAnthropicServer
) -> None:
    for _ in range(3):
        judge_server.enqueue_text(FAIL)
    result, main = await _turn(_llm_runtime(tmp_path, judge_server),
                               tmp_path, ["first try", "second try", "third try", "never"])

    assert result.termination == "verification_failed"
    assert "the file list is missing" in result.detail
    assert len(main.calls) == 3  # the answer and two repairs (repair_budget = 2)
    judged = judge_server.generate_requests
    assert len(judged) == 3
    # the auxiliary-role model judges; it is given no tools and never writes the answer
    assert {r.body["model"] for r in judged} == {"claude-sonnet-5"}
    assert all("tools" not in r.body for r in judged)
    assert "<answer>\nthird try\n</answer>" in judged[-1].body["messages"][0]["content"][0]["text"]
    assert result.text == "third try"
    # the repair request the model saw carries the judge's reason
    repair = main.calls[1].messages[-1].text
    assert repair.startswith("[verification]") and "the file list is missing" in repair


async def test_a_repair_that_passes_ends_naturally(
    tmp_path: Path, judge_server: FakeAnthropicServer
) -> None:
    judge_server.enqueue_text(FAIL)
    judge_server.enqueue_text(PASS)
    result, main = await _turn(_llm_runtime(tmp_path, judge_server), tmp_path,
                               ["draft", "fixed answer"])
    assert (result.termination, result.text) == ("natural", "fixed answer")
    assert len(main.calls) == 2


async def test_judge_none_is_unchanged(tmp_path: Path, judge_server: FakeAnthropicServer) -> None:
    rt = _runtime(tmp_path, '[verify]\njudge = "none"\n', ANTHROPIC_BASE_URL=judge_server.base_url)
    result, main = await _turn(rt, tmp_path, ["the answer"])
    assert (result.termination, result.text) == ("natural", "the answer")
    assert len(main.calls) == 1
    assert judge_server.requests == []  # no judge, and no key needed


async def test_the_judge_sees_the_turns_evidence(
    tmp_path: Path, judge_server: FakeAnthropicServer
) -> None:
    (tmp_path / "a.txt").write_text("x")
    judge_server.enqueue_text(PASS)
    result, _ = await _turn(_llm_runtime(tmp_path, judge_server), tmp_path,
                            [ToolCall("list_dir", {"path": "."}), "a.txt is here"])
    assert result.termination == "natural"
    prompt = judge_server.generate_requests[0].body["messages"][0]["content"][0]["text"]
    assert "<request>\nlist the files\n</request>" in prompt
    assert 'call list_dir {"path": "."}' in prompt
    assert "result of list_dir (ok):" in prompt and "a.txt" in prompt


@pytest.mark.parametrize(
    ("reply", "kind"),
    [("Looks good to me!", "invalid_verdict"),
     ('{"verdict": "pass"}', "invalid_verdict"),
     ('{"verdict": "maybe", "reason": "x"}', "invalid_verdict")],
)
async def test_an_invalid_verdict_is_a_verify_error_not_a_pass(
    tmp_path: Path, judge_server: FakeAnthropicServer, reply: str, kind: str
) -> None:
    judge_server.enqueue_text(reply)
    result, main = await _turn(_llm_runtime(tmp_path, judge_server), tmp_path,
                               ["answer", "never"])
    assert result.termination == "verification_failed"
    assert result.detail.startswith(f"verify error: judge llm:claude-sonnet-5 failed ({kind})")
    assert len(main.calls) == 1  # no repair round for an undecided verify


async def test_a_failing_judge_call_is_a_verify_error_with_its_class(
    tmp_path: Path, judge_server: FakeAnthropicServer
) -> None:
    judge_server.enqueue_error(401)
    result, _ = await _turn(_llm_runtime(tmp_path, judge_server), tmp_path, ["answer"])
    assert result.termination == "verification_failed"
    assert "failed (auth)" in result.detail and "ANTHROPIC_API_KEY" in result.detail


async def test_roles_override_picks_the_judge_model(
    tmp_path: Path, judge_server: FakeAnthropicServer
) -> None:
    judge_server.enqueue_text(PASS)
    rt = _llm_runtime(tmp_path, judge_server, '[model.roles]\nauxiliary = "claude-opus-5"\n')
    result, _ = await _turn(rt, tmp_path, ["answer"])
    assert result.termination == "natural", result.detail
    assert judge_server.generate_requests[0].body["model"] == "claude-opus-5"


# --- Jev -------------------------------------------------------------------------------------


class FakeSystemOne:
    """A loopback SystemOne endpoint: answers the `noul` question with scripted probabilities."""

    def __init__(self, probabilities: list[float | str]) -> None:
        self.probabilities = probabilities
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> FakeSystemOne:
        app = web.Application()
        app.router.add_post("/{prefix:.*}/systemone", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append((request.path, dict(request.headers), body))
        p = self.probabilities.pop(0)
        if p == "401":
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        answers = {"satisfied": {"type": "noul", "noul": p}}
        return web.json_response({"answers": answers, "model": body["model"],
                                  "provider": "typesafe", "usage": {}})


@pytest.mark.parametrize(
    ("route", "key_env", "url_env", "model", "path"),
    [("typesafe", "TYPESAFE_API_KEY", "TYPESAFE_BASE_URL", "jev-1.13.0", "/v1/systemone"),
     ("openrouter", "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL", "typesafe/jev-1.13",
      "/api/v1/systemone")],
)
async def test_jev_judge_direct_and_via_openrouter(
    tmp_path: Path, route: str, key_env: str, url_env: str, model: str, path: str
) -> None:
    async with FakeSystemOne([0.2, 0.93]) as fake:
        base = fake.url + path.removesuffix("/systemone")
        rt = _runtime(tmp_path, f'[verify]\njudge = "jev"\njev_route = "{route}"\n',
                      **{key_env: "jev-key-0123456789", url_env: base})
        result, main = await _turn(rt, tmp_path, ["draft", "better"])
    assert (result.termination, result.text) == ("natural", "better")
    assert len(main.calls) == 2  # 0.2 failed the verdict: one repair
    req_path, headers, body = fake.requests[0]
    assert req_path == path
    assert headers["Authorization"] == "Bearer jev-key-0123456789"
    assert body["model"] == model
    assert body["questions"]["satisfied"]["type"] == "noul"
    assert body["state"]["answer"] == "draft" and body["state"]["request"] == "list the files"
    assert "probability the answer satisfies the request 0.20" in main.calls[1].messages[-1].text


async def test_jev_error_is_a_verify_error(tmp_path: Path) -> None:
    async with FakeSystemOne(["401"]) as fake:
        rt = _runtime(tmp_path, '[verify]\njudge = "jev"\n', TYPESAFE_API_KEY="k-0123456789",
                      TYPESAFE_BASE_URL=fake.url + "/v1")
        result, main = await _turn(rt, tmp_path, ["answer", "never"])
    assert result.termination == "verification_failed"
    assert len(main.calls) == 1
    assert "judge jev:jev-1.13.0 failed (auth)" in result.detail
    assert "TYPESAFE_API_KEY" in result.detail


async def test_jev_without_its_key_is_a_config_error(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, '[verify]\njudge = "jev"\n')
    async with rt:
        with pytest.raises(ConfigError, match="needs TYPESAFE_API_KEY"):
            await rt.open_session(SessionContext(
                mode="HEADLESS", workspace=tmp_path, provider=ScriptedProvider(["x"])))


def test_parse_verdict_is_strict() -> None:
    assert parse_verdict(' {"verdict": "pass", "reason": "ok"}\n').passed
    for bad in ('```json\n{"verdict": "pass", "reason": "ok"}\n```',
                '{"verdict": "pass", "reason": "ok", "answer": "I would say"}', "[]", ""):
        with pytest.raises(JudgeError):
            parse_verdict(bad)


def test_turn_evidence_starts_at_the_turns_request() -> None:
    from geode.messages import Message

    msgs = [Message.user("old task"), Message.assistant("old answer"),
            Message.user("new task"), Message.assistant("draft"),
            Message.user("[verification] The answer was not accepted: x")]
    request, evidence = turn_evidence(msgs)
    assert request == "new task"
    assert evidence.startswith("[verification]")
