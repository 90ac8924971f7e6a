"""Wire-level fakes of the OpenAI Responses API and of the Codex-subscription backend.

::

    async with FakeResponsesServer(reasoning=True) as srv:
        srv.enqueue_tool_calls([("read_file", {"path": "a"})])
        client = openai.AsyncOpenAI(api_key="test", base_url=srv.base_url)

:class:`FakeCodexServer` serves ``POST /backend-api/codex/responses`` like the subscription
backend (stream only, ``instructions`` required, ``max_output_tokens`` refused, bearer token
and ``chatgpt-account-id`` checked) and ``POST /oauth/token`` like the OAuth refresh endpoint
(refresh tokens rotate and are single-use). :func:`make_jwt` builds the unsigned tokens it
issues, so a test can write an expired Codex login.

Run ``python -m geode.testing.fake_openai_responses --port 8902`` to serve a fixed answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any, Self

from aiohttp import web

from geode.testing._sse import (
    ErrorReply,
    FakeModelServer,
    RecordedRequest,
    SSEEvent,
    TextReply,
    ToolCallsReply,
    serve_main,
    split_text,
)

__all__ = ["FakeCodexServer", "FakeResponsesServer", "RecordedRequest", "make_jwt"]

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}
_CREATED = 1_750_000_000
#: vendor-native "stop reasons" of a TextReply that end the response as ``incomplete``
_INCOMPLETE = ("max_output_tokens", "content_filter")


class FakeResponsesServer(FakeModelServer):
    """Serves ``POST {prefix}/responses`` (JSON or SSE) and ``GET /v1/models``.

    Args:
        prefix: path before ``/responses``; ``base_url`` is the root URL plus it.
        reasoning: every reply starts with an encrypted reasoning item
            (``encrypted_content`` = ``"enc-N"``), as reasoning models do with ``store=false``.
    """

    tool_id_prefix = "call_fake_"
    malformed_event = "response.output_text.delta"

    def __init__(self, *, prefix: str = "/v1", reasoning: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.prefix = prefix
        self.generate_path = f"{prefix}/responses"
        self.reasoning = reasoning

    @property
    def base_url(self) -> str:
        return f"{self.root_url}{self.prefix}"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        err_type, code = _ERROR_TYPES.get(status, ("server_error", None))
        return {"error": {"message": message, "type": err_type, "param": None, "code": code}}

    def models_body(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": _CREATED, "owned_by": "geode-fake"}
                for m in self.models
            ],
        }

    # --- rendering ---------------------------------------------------------------------------

    @staticmethod
    def _model(body: Any) -> str:
        return str(body.get("model", "fake-model")) if isinstance(body, dict) else "fake-model"

    def _items(self, reply: TextReply | ToolCallsReply) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if self.reasoning:
            rid = self.next_id("rs_fake_")
            items.append(
                {"type": "reasoning", "id": rid, "summary": [],
                 "encrypted_content": f"enc-{rid}"}
            )
        if reply.text:
            items.append(
                {
                    "type": "message",
                    "id": self.next_id("msg_fake_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        if isinstance(reply, ToolCallsReply):
            for name, tool_input, cid in reply.calls:
                items.append(
                    {
                        "type": "function_call",
                        "id": self.next_id("fc_fake_"),
                        "call_id": cid,
                        "name": name,
                        "arguments": json.dumps(tool_input),
                        "status": "completed",
                    }
                )
        return items

    def _response(
        self, reply: TextReply | ToolCallsReply, body: Any, output: list[dict[str, Any]]
    ) -> dict[str, Any]:
        native = reply.stop_reason if isinstance(reply, TextReply) else None
        incomplete = native in _INCOMPLETE
        u = reply.usage
        return {
            "id": self.next_id("resp_fake_"),
            "object": "response",
            "created_at": _CREATED,
            "model": self._model(body),
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": native} if incomplete else None,
            "error": None,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": (body or {}).get("tool_choice", "auto"),
            "tools": (body or {}).get("tools", []),
            "store": False,
            "usage": {
                "input_tokens": u.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": u.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.input_tokens + u.output_tokens,
            },
        }

    def render_json(self, reply: TextReply | ToolCallsReply, body: Any) -> dict[str, Any]:
        return self._response(reply, body, self._items(reply))

    def render_sse(self, reply: TextReply | ToolCallsReply, body: Any) -> list[SSEEvent]:
        items = self._items(reply)
        seq = 0

        def ev(kind: str, **data: Any) -> SSEEvent:
            nonlocal seq
            seq += 1
            return SSEEvent(json.dumps({"type": kind, "sequence_number": seq, **data}), kind)

        shell = self._response(reply, body, [])
        events = [ev("response.created", response={**shell, "status": "in_progress"})]
        for index, item in enumerate(items):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append(ev("response.output_item.added", output_index=index,
                                 item={**item, "status": "in_progress", "content": []}))
                for piece in split_text(text):
                    events.append(ev("response.output_text.delta", output_index=index,
                                     item_id=item["id"], content_index=0, delta=piece,
                                     logprobs=[]))
                events.append(ev("response.output_text.done", output_index=index,
                                 item_id=item["id"], content_index=0, text=text, logprobs=[]))
            elif item["type"] == "function_call":
                events.append(ev("response.output_item.added", output_index=index,
                                 item={**item, "arguments": "", "status": "in_progress"}))
                raw = item["arguments"]
                half = len(raw) // 2
                for piece in (raw[:half], raw[half:]):
                    events.append(ev("response.function_call_arguments.delta",
                                     output_index=index, item_id=item["id"], delta=piece))
                events.append(ev("response.function_call_arguments.done", output_index=index,
                                 item_id=item["id"], arguments=raw, name=item["name"]))
            else:
                events.append(ev("response.output_item.added", output_index=index, item=item))
            events.append(ev("response.output_item.done", output_index=index, item=item))
        done = "response.incomplete" if shell["status"] == "incomplete" else "response.completed"
        events.append(ev(done, response={**shell, "output": items}))
        return events


def _b64(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def make_jwt(*, exp: float, account_id: str = "acct-fake", **claims: Any) -> str:
    """An unsigned JWT like the Codex login's tokens (only ``exp`` and the account matter)."""
    payload = {
        "exp": int(exp),
        "https://api.openai.com/auth": {"chatgpt_account_id": account_id},
        **claims,
    }
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(payload)}.fake-signature"


class FakeCodexServer(FakeResponsesServer):
    """The Codex-subscription backend and its OAuth token endpoint, on loopback.

    ``access_token`` / ``refresh_token`` are the currently valid pair; ``login_file()``
    content matching them is what ``codex login`` would have written. A refresh rotates both
    (the old refresh token is then dead, as in production).
    """

    def __init__(self, *, account_id: str = "acct-fake", token_ttl: float = 3600.0,
                 **kw: Any) -> None:
        kw.setdefault("reasoning", True)
        super().__init__(prefix="/backend-api/codex", **kw)
        self.account_id = account_id
        self.token_ttl = token_ttl
        self.refreshes = 0
        #: answer every generation request 401, whatever the token (a login the
        #: subscription no longer accepts)
        self.reject_all = False
        self.access_token = self._new_access()
        self.refresh_token = "rt-fake-0"

    def _new_access(self) -> str:
        return make_jwt(exp=time.time() + self.token_ttl, account_id=self.account_id,
                        jti=f"at-{self.next_id('')}")

    @property
    def token_url(self) -> str:
        return f"{self.root_url}/oauth/token"

    def login_file(self, *, access_token: str | None = None) -> dict[str, Any]:
        """The ``auth.json`` a fresh ``codex login`` leaves (optionally with another token)."""
        return {
            "OPENAI_API_KEY": None,
            "tokens": {
                "id_token": make_jwt(exp=time.time() + self.token_ttl,
                                     account_id=self.account_id),
                "access_token": access_token or self.access_token,
                "refresh_token": self.refresh_token,
                "account_id": self.account_id,
            },
            "last_refresh": "2026-01-01T00:00:00Z",
        }

    def revoke_access(self) -> None:
        """Invalidate the current access token before its expiry (the server forgot it)."""
        self.access_token = "revoked"

    def enqueue_usage_limit(self, resets_in_seconds: int) -> None:
        """Answer one request with the subscription's 429 ``usage_limit_reached``."""
        body = {
            "error": {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": "plus",
                "resets_at": int(time.time()) + resets_in_seconds,
                "resets_in_seconds": resets_in_seconds,
            }
        }
        self._script.append(ErrorReply(429, body, {}))

    async def start(self) -> Self:
        if self._runner is not None:
            return self
        # The base server's start, plus the OAuth token endpoint as a second route.
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_post(self.generate_path, self._handle_generate)
        app.router.add_post("/oauth/token", self._handle_token)
        app.router.add_get("/v1/models", self._handle_models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        if self.reject_all or auth != f"Bearer {self.access_token}":
            await self._record(request)
            body = {"error": {"message": "Your authentication token is invalid or expired.",
                              "type": "invalid_request_error", "code": "token_expired"}}
            return web.json_response(body, status=401)
        if request.headers.get("chatgpt-account-id") != self.account_id:
            await self._record(request)
            return web.json_response(self.error_body(400, "missing chatgpt-account-id"),
                                     status=400)
        raw = await request.read()
        problem = _codex_shape_problem(raw)
        if problem:
            await self._record_raw(request, raw)
            return web.json_response(self.error_body(400, problem), status=400)
        return await super()._handle_generate(request)

    async def _record_raw(self, request: web.Request, raw: bytes) -> None:
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(RecordedRequest(request.method, request.path, headers, body))

    async def _handle_token(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if (
            not isinstance(body, dict)
            or body.get("grant_type") != "refresh_token"
            or body.get("refresh_token") != self.refresh_token
        ):
            return web.json_response(
                {"error": "invalid_grant",
                 "error_description": "refresh token is invalid or was already used"},
                status=400,
            )
        self.refreshes += 1
        self.access_token = self._new_access()
        self.refresh_token = f"rt-fake-{self.refreshes}"
        return web.json_response(
            {
                "access_token": self.access_token,
                "refresh_token": self.refresh_token,
                "id_token": make_jwt(exp=time.time() + self.token_ttl,
                                     account_id=self.account_id),
                "expires_in": int(self.token_ttl),
                "token_type": "Bearer",
            }
        )


def _codex_shape_problem(raw: bytes) -> str:
    """What the subscription backend refuses, as documented by its own CLI's behaviour."""
    try:
        body = json.loads(raw)
    except ValueError:
        return "body is not JSON"
    if not isinstance(body, dict):
        return "body is not an object"
    if body.get("stream") is not True:
        return "Stream must be set to true"
    if body.get("store") is not False:
        return "Store must be set to false"
    if not isinstance(body.get("instructions"), str):
        return "Instructions are required"
    if not isinstance(body.get("input"), list):
        return "Input must be a list"
    if "max_output_tokens" in body:
        return "Unsupported parameter: max_output_tokens"
    return ""


if __name__ == "__main__":
    serve_main(FakeResponsesServer)
