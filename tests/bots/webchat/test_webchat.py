"""The web chat end to end, in one process: a real daemon hosting the web-chat connector, the
console's application on a loopback test server, browsers signed in through one-time links.

A message goes through the very same layer as a platform's (binding, allow-list, turn,
outbox), the answer is shown once (also after a crash mid-turn and a restart), an approval
is clicked in the thread, files go in and out, /commands answer, and nobody sees or posts
in another person's thread; a POST without the CSRF token is refused."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from bots.workspaces import binding_workspace
from geode.providers.scripted import ScriptedProvider, ToolCall
from tests.bots._harness import calls_tool, crash_at, quiescent
from tests.bots.webchat.conftest import ALICE, BINDINGS, BOB, Browser, ChatStack, wait_for

pytestmark = pytest.mark.timeout(60)


def bot_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["text"] for m in messages if m["kind"] == "bot" and not m["deleted"]]


async def answered(browser: Browser, url: str, text: str) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        messages = await browser.messages(url)
        return messages if text in bot_texts(messages) else None

    found: list[dict[str, Any]] = await wait_for(check)
    return found


async def read_events(browser: Browser, url: str, until: str) -> list[dict[str, Any]]:
    """The thread's event stream from the start, until a message says ``until``."""
    seen: list[dict[str, Any]] = []
    r = await browser.client.get(f"{url}/events?after=0")
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    async with asyncio.timeout(15):
        async for line in r.content:
            if line.startswith(b"data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["text"] == until:
                    break
    r.close()
    return seen


async def test_a_message_gets_its_answer_once_live_and_on_reload(
        make_chat: Any) -> None:
    stack: ChatStack = make_chat()
    await stack.start()
    alice = await stack.sign_in(ALICE)
    url = await alice.open_thread("hello there")
    assert url.startswith("/chat/ops/")
    messages = await answered(alice, url, "answer to: hello there")
    assert bot_texts(messages).count("answer to: hello there") == 1
    assert messages[0]["kind"] == "user" and messages[0]["text"] == "hello there"
    # the progress message became the answer: edited, not a second message
    assert len(bot_texts(messages)) == 1
    # live: the stream carries the progress message and its edits to the answer
    events = await read_events(alice, url, "answer to: hello there")
    assert events[0]["text"] == "hello there"
    assert {e["id"] for e in events if e["kind"] == "bot"} == {
        m["id"] for m in messages if m["kind"] == "bot"}
    # a follow-up in the thread is the same session
    status, _ = await alice.post(url, {"text": "and again", "csrf": await alice.csrf(url)})
    assert status == 200
    messages = await answered(alice, url, "answer to: and again")
    assert bot_texts(messages) == ["answer to: hello there", "answer to: and again"]
    # the page lists the thread
    status, page = await alice.json("/chat")
    assert [t["url"] for t in page["threads"]] == [url]
    assert stack.provider.calls  # the turn ran through the scripted model


async def test_an_approval_is_clicked_in_the_thread(make_chat: Any) -> None:
    provider = ScriptedProvider(
        [calls_tool("write_file", {"path": "notes.txt", "content": "hello\n"})],
        repeat_last=True)
    stack: ChatStack = make_chat(provider)
    await stack.start()
    alice = await stack.sign_in(ALICE)
    url = await alice.open_thread("please write the notes")

    async def request_shown() -> dict[str, Any] | None:
        return next((m for m in await alice.messages(url) if m["approval"]), None)

    request = await wait_for(request_shown)
    page = await (await alice.client.get(url)).text()
    assert f'action="{url}/approvals/{request["id"]}"' in page and "Approve" in page
    # without the CSRF token the click is refused, and nothing is decided
    status, _ = await alice.post(f"{url}/approvals/{request['id']}", {"decision": "approve"})
    assert status == 403
    status, body = await alice.post(f"{url}/approvals/{request['id']}",
                                    {"decision": "approve", "csrf": await alice.csrf(url)})
    assert status == 200, body
    messages = await answered(alice, url, "done")
    ws = binding_workspace(stack.home, BINDINGS[0])
    assert (ws / "notes.txt").read_text() == "hello\n"
    edited = next(m for m in messages if m["id"] == request["id"])
    assert edited["approval"] == "" and "approved" in edited["text"]
    assert bot_texts(messages).count("done") == 1


async def test_files_go_in_and_out(make_chat: Any) -> None:
    def respond(request: Any) -> object:
        last = request.messages[-1]
        if last.role == "user" and "(id " in (last.text or ""):
            return ToolCall("send_file", {"path": "report.txt", "caption": "the report"})
        return "sent"

    bindings = [BINDINGS[0].model_copy(update={"tools": ["send_file"]})]
    stack: ChatStack = make_chat(ScriptedProvider([respond], repeat_last=True),
                                 bindings=bindings, options={"max_file_mb": 1})
    await stack.start()
    ws = binding_workspace(stack.home, bindings[0])
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "report.txt").write_text("all good\n")
    alice = await stack.sign_in(ALICE)
    url = await alice.open_thread("send me the report")
    await answered(alice, url, "sent")

    async def sent_file() -> list[dict[str, Any]]:
        return [m for m in await alice.messages(url) if m["file"]]

    [out] = await wait_for(sent_file)
    assert out["file"]["name"] == "report.txt" and out["text"] == "the report"
    r = await alice.client.get(f"/chat/files/{out['file']['id']}")
    assert r.status == 200 and await r.read() == b"all good\n"
    assert r.headers["Content-Disposition"].startswith("attachment;")
    # in: a small file as a form, a larger one as the raw body (the page's script)
    form = aiohttp.FormData()
    form.add_field("csrf", await alice.csrf(url))
    form.add_field("text", "here is a log")
    form.add_field("file", b"line 1\nline 2\n", filename="app.log", content_type="text/plain")
    status, body = await alice.post(url, form)
    assert status == 200, body
    big = b"x" * (200 * 1024)
    status, body = await alice.post(
        f"{url}/upload?text=big", big, headers={
            "Accept": "application/json", "X-CSRF-Token": await alice.csrf(url),
            "Content-Type": "application/octet-stream", "X-Filename": "big.bin"})
    assert status == 200, body
    messages = await answered(alice, url, "sent")
    ins = [m for m in messages if m["kind"] == "user" and m["file"]]
    assert [(m["file"]["name"], m["file"]["size"]) for m in ins] == [
        ("app.log", 14), ("big.bin", len(big))]
    # the layer downloaded each into the thread's folder, as on any platform
    await wait_for(lambda: _downloaded(ws, "app.log"))
    # over the limit: refused before it is stored
    status, _ = await alice.post(
        f"{url}/upload", b"y" * (2 * 1024 * 1024 + 1), headers={
            "Accept": "application/json", "X-CSRF-Token": await alice.csrf(url),
            "Content-Type": "application/octet-stream", "X-Filename": "huge.bin"})
    assert status == 413


async def _downloaded(ws: Any, name: str) -> bool:
    return any(p.name.endswith(f"-0-{name}") and p.read_bytes() for p in ws.rglob(f"*{name}"))


async def test_a_command_is_answered_in_the_thread(make_chat: Any) -> None:
    stack: ChatStack = make_chat()
    await stack.start()
    alice = await stack.sign_in(ALICE)
    url = await alice.open_thread("/help")

    async def helped() -> bool:
        return any("/status" in t for t in bot_texts(await alice.messages(url)))

    await wait_for(helped)
    assert not stack.provider.calls  # a command, not a turn


async def test_nobody_sees_or_posts_in_another_s_thread_and_csrf_is_required(
        make_chat: Any) -> None:
    stack: ChatStack = make_chat()
    await stack.start()
    alice = await stack.sign_in(ALICE)
    bob = await stack.sign_in(BOB)
    url = await alice.open_thread("private to alice")
    await answered(alice, url, "answer to: private to alice")
    [request] = [m for m in await alice.messages(url) if m["kind"] == "user"]
    assert (await bob.json(url))[0] == 404
    status, page = await bob.json("/chat")
    assert status == 200 and page["threads"] == []
    assert (await bob.client.get(f"{url}/events")).status == 404
    status, _ = await bob.post(url, {"text": "hi", "csrf": await bob.csrf()})
    assert status == 404
    status, _ = await bob.post(f"{url}/approvals/{request['id']}",
                               {"decision": "approve", "csrf": await bob.csrf()})
    assert status == 404
    # bob cannot open a thread on a binding he is not on; he may on his own
    status, _ = await bob.post("/chat", {"channel": "nope", "text": "x",
                                         "csrf": await bob.csrf()})
    assert status == 400
    # CSRF: missing or another session's token is refused, nothing is posted
    status, _ = await alice.post(url, {"text": "no token"})
    assert status == 403
    status, _ = await alice.post(url, {"text": "bob's token", "csrf": await bob.csrf()})
    assert status == 403
    status, _ = await alice.post("/chat", {"channel": "ops", "text": "no token"})
    assert status == 403
    texts = [m["text"] for m in await alice.messages(url)]
    assert "no token" not in texts and "bob's token" not in texts
    # too long a message is refused
    status, _ = await alice.post(url, {"text": "x" * 8001, "csrf": await alice.csrf(url)})
    assert status == 413


@pytest.mark.parametrize("point", ["recorded", "turn_started", "final_recorded",
                                   "delivered"])
async def test_a_crash_mid_turn_then_a_restart_answers_once(make_chat: Any, point: str) -> None:
    hit, fault = crash_at(point)
    stack: ChatStack = make_chat(fault=fault)
    await stack.start()
    alice = await stack.sign_in(ALICE)
    try:
        await alice.open_thread("survive a crash")
    except aiohttp.ServerDisconnectedError:
        assert point == "recorded"  # the process died inside the POST
    await asyncio.wait_for(hit.wait(), 15)
    await stack.crash()
    stack.fault = None
    await stack.start()
    alice = await stack.sign_in(ALICE)
    _, page = await alice.json("/chat")
    [url] = [t["url"] for t in page["threads"]]
    await answered(alice, url, "answer to: survive a crash")
    await quiescent(stack)
    messages = await alice.messages(url)
    assert bot_texts(messages).count("answer to: survive a crash") == 1
    assert [m["text"] for m in messages if m["kind"] == "user"] == ["survive a crash"]
    # the stream after the restart shows each message once, as it is now
    events = await read_events(alice, url, "answer to: survive a crash")
    assert len(events) == len({e["id"] for e in events}) or events[-1]["text"] == (
        "answer to: survive a crash")
