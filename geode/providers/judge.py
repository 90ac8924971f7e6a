"""Verify judges: decide whether a final answer satisfies the request. A judge never generates.

``[verify] judge`` selects one:

- ``llm`` (the seed's default engine): the auxiliary-role model gets the request, the turn's
  evidence (the tool calls and their results) and the answer, and must reply with exactly one
  JSON object ``{"verdict": "pass" | "fail", "reason": "..."}``. Anything else is a judge error.
- ``jev``: the judge-only TypeSafe/Jev adapter (SystemOne decision API), direct
  (``jev-1.13.0``, ``TYPESAFE_API_KEY``) or via OpenRouter (``typesafe/jev-1.13``,
  ``OPENROUTER_API_KEY``). It has no text or tool generation at all: one ``noul`` question
  ("the answer satisfies the request"), answered with a probability.

A judge returns a :class:`Verdict` or raises :class:`JudgeError` (with the failure's class):
the verifier turns a failed verdict into a repair round and an error into a verify error,
never into a pass.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx

from geode.errors import ModelError, RunError
from geode.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from geode.providers.base import BaseProvider, ModelRequest
from geode.providers.retry import RetryPolicy, call_with_retry

__all__ = [
    "JEV_MODELS",
    "JevJudge",
    "Judge",
    "JudgeError",
    "LLMJudge",
    "Verdict",
    "turn_evidence",
]

JevRoute = Literal["typesafe", "openrouter"]
#: the judge-only model id per route (the seed's ids)
JEV_MODELS: dict[str, str] = {"typesafe": "jev-1.13.0", "openrouter": "typesafe/jev-1.13"}
#: evidence sent to a judge is bounded: per tool result and in total
_MAX_RESULT_CHARS = 2_000
_MAX_EVIDENCE_CHARS = 12_000
_VERIFICATION_PREFIX = "[verification]"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str


class JudgeError(RunError):
    """The judge could not decide (call failed, or no valid verdict). ``kind`` names the class:
    a :class:`ModelError` kind, ``invalid_verdict`` or ``judge_error``."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class Judge(Protocol):
    #: what the verify error and the logs call this judge
    name: str

    async def judge(self, *, request: str, answer: str, evidence: str) -> Verdict: ...

    async def aclose(self) -> None: ...


def turn_evidence(messages: Sequence[Message]) -> tuple[str, str]:
    """The turn's request and its evidence (tool calls and results, bounded) from the messages.

    The request is the last user message with text that is neither tool results nor a
    verification note; the evidence is what follows it.
    """
    start = 0
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if (
            m.role == "user"
            and not m.tool_results
            and m.text.strip()
            and not m.text.startswith(_VERIFICATION_PREFIX)
        ):
            start = i
            break
    request = messages[start].text if messages else ""
    names: dict[str, str] = {}
    lines: list[str] = []
    for m in messages[start + 1:]:
        for block in m.content:
            if isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                args = json.dumps(block.input, ensure_ascii=False, default=str)[:500]
                lines.append(f"call {block.name} {args}")
            elif isinstance(block, ToolResultBlock):
                text = block.text_content[:_MAX_RESULT_CHARS]
                status = "error" if block.is_error else "ok"
                lines.append(f"result of {names.get(block.tool_use_id, '?')} ({status}): {text}")
            elif m.role == "user" and isinstance(block, TextBlock) and block.text.startswith(
                _VERIFICATION_PREFIX
            ):
                lines.append(block.text[:500])
    evidence = "\n".join(lines)
    if len(evidence) > _MAX_EVIDENCE_CHARS:
        evidence = "[earlier evidence omitted]\n" + evidence[-_MAX_EVIDENCE_CHARS:]
    return request, evidence or "(no tools were run this turn)"


_LLM_SYSTEM = (
    "You are a strict verifier. Decide whether the assistant's final answer satisfies the "
    "user's request, given the evidence from the tools it ran this turn. Judge only; do not "
    "write, fix or extend the answer. Reply with exactly one JSON object and nothing else: "
    '{"verdict": "pass" | "fail", "reason": "<one sentence; for fail, what is missing or '
    'wrong>"}'
)


def parse_verdict(text: str) -> Verdict:
    """The strict JSON verdict; anything else raises :class:`JudgeError` (``invalid_verdict``)."""
    try:
        data = json.loads(text.strip())
    except ValueError:
        data = None
    if (
        not isinstance(data, dict)
        or set(data) != {"verdict", "reason"}
        or data["verdict"] not in ("pass", "fail")
        or not isinstance(data["reason"], str)
    ):
        raise JudgeError(
            f"the judge's reply is not a strict JSON verdict: {text.strip()[:200]!r}",
            kind="invalid_verdict",
        )
    return Verdict(passed=data["verdict"] == "pass", reason=data["reason"].strip())


class LLMJudge:
    """The ``llm`` engine: the auxiliary-role model, asked for a strict JSON verdict.

    Args:
        provider: the judge model's adapter (built for the auxiliary role).
        model: the API model name.
        retry: the bounded retry policy for the judge call (retryable kinds only).
    """

    def __init__(
        self,
        *,
        provider: BaseProvider,
        model: str,
        retry: RetryPolicy | None = None,
        max_tokens: int = 1024,
    ) -> None:
        self.name = f"llm:{model}"
        self._provider = provider
        self._model = model
        self._retry = retry or RetryPolicy()
        self._max_tokens = max_tokens

    async def aclose(self) -> None:
        await self._provider.aclose()  # a shared client (the runtime's cache) stays open

    async def judge(self, *, request: str, answer: str, evidence: str) -> Verdict:
        prompt = (
            f"<request>\n{request}\n</request>\n<evidence>\n{evidence}\n</evidence>\n"
            f"<answer>\n{answer}\n</answer>"
        )
        call = ModelRequest(
            model=self._model,
            system=_LLM_SYSTEM,
            messages=(Message.user(prompt),),
            max_tokens=self._max_tokens,
            tool_choice="none",
        )
        try:
            response = await call_with_retry(
                lambda: self._provider.complete(call), policy=self._retry
            )
        except ModelError as exc:
            raise JudgeError(f"judge call failed: {exc}", kind=exc.kind) from exc
        return parse_verdict(response.message.text)


class JevJudge:
    """The ``jev`` engine: TypeSafe/Jev's SystemOne decision API; judge only.

    Args:
        route: ``typesafe`` (direct) or ``openrouter``.
        api_key: the route's key (``TYPESAFE_API_KEY`` / ``OPENROUTER_API_KEY``).
        base_url: the route's API root (``.../v1``); ``/systemone`` is appended.
        timeout: seconds per call.
        threshold: the probability at or above which the answer passes.
    """

    QUESTION = "satisfied"

    def __init__(
        self,
        *,
        route: JevRoute,
        api_key: str,
        base_url: str,
        timeout: float = 60.0,
        threshold: float = 0.5,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.model = JEV_MODELS[route]
        self.name = f"jev:{self.model}"
        self.route = route
        self._url = base_url.rstrip("/") + "/systemone"
        self._api_key = api_key
        self._threshold = threshold
        self._retry = retry or RetryPolicy()
        self._timeout = timeout

    async def aclose(self) -> None:
        """Nothing to release: each call opens and closes its own connection (judge calls
        are rare, and a session has no close hook)."""

    async def judge(self, *, request: str, answer: str, evidence: str) -> Verdict:
        payload = {
            "model": self.model,
            "state": {"request": request, "evidence": evidence, "answer": answer},
            "questions": {
                self.QUESTION: {
                    "type": "noul",
                    "instructions": (
                        "Does the answer satisfy the request, given the evidence from the "
                        "tools run this turn? True only if it fully does."
                    ),
                }
            },
        }
        try:
            body = await call_with_retry(lambda: self._post(payload), policy=self._retry)
        except ModelError as exc:
            raise JudgeError(f"Jev call failed: {exc}", kind=exc.kind) from exc
        p = _noul(body, self.QUESTION)
        if p is None:
            raise JudgeError(
                "Jev answered without a valid decision for the question", kind="invalid_verdict"
            )
        reason = f"Jev: probability the answer satisfies the request {p:.2f}"
        if p < self._threshold:
            reason += f" (below {self._threshold:.2f})"
        return Verdict(passed=p >= self._threshold, reason=reason)

    async def _post(self, payload: dict[str, Any]) -> Any:
        from geode.providers._errors import classify_status, parse_retry_after

        try:
            async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as http:
                response = await http.post(
                    self._url, json=payload, headers={"Authorization": f"Bearer {self._api_key}"}
                )
        except httpx.HTTPError as exc:
            raise ModelError(
                f"jev: connection failed ({type(exc).__name__})", kind="transient",
                provider=self.route,
            ) from exc
        if response.status_code != 200:
            kind = classify_status(response.status_code, response.text[:300])
            if kind == "auth":
                env = "TYPESAFE_API_KEY" if self.route == "typesafe" else "OPENROUTER_API_KEY"
                message = f"jev: the key was rejected (HTTP {response.status_code}); set {env}"
            else:
                message = f"jev HTTP {response.status_code} ({kind})"
            raise ModelError(
                message, kind=kind, provider=self.route, status_code=response.status_code,
                retry_after=parse_retry_after(dict(response.headers))
                if kind in ("rate_limit", "overloaded") else None,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise ModelError("jev: malformed response", kind="transient",
                             provider=self.route) from exc


def _noul(body: Any, key: str) -> float | None:
    answers = body.get("answers") if isinstance(body, dict) else None
    answer = answers.get(key) if isinstance(answers, dict) else None
    if not isinstance(answer, dict) or answer.get("type") != "noul":
        return None
    p = answer.get("noul")
    if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p):
        return None
    return float(p) if 0.0 <= p <= 1.0 else None
