"""Computer-use channels share one display, one turn at a time: a turn of another thread waits
(outside the lanes) and its /status says so; the display is released however the holder's
turn ends, /stop included, and /stop takes a waiting turn out of the wait. (Telegram stack;
the daemon starts its own Xvfb for the computer-use bindings.)"""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from geode.providers.base import ModelRequest, ModelResponse
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, CHAT2, binding, echo, finals, last_user_text


@pytest.fixture(autouse=True)
def _xvfb() -> None:
    if shutil.which("Xvfb") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Xvfb is required under CI=true (.ci/apt-packages.txt)")
        pytest.skip("needs Xvfb")


class HeldModel(ScriptedProvider):
    """Echoes; a prompt with "first" waits for ``release`` (its turn holds the display)."""

    def __init__(self) -> None:
        super().__init__([echo], repeat_last=True)
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if "first" in last_user_text(request) and not self.release.is_set():
            self.holding.set()
            await self.release.wait()
        return await super().complete(request)

    def asked(self, word: str) -> bool:
        return any(word in last_user_text(r) for r in self.calls)


def _bindings() -> list:  # type: ignore[type-arg]
    return [binding(CHAT, computer_use=True), binding(CHAT2, computer_use=True)]


def _says(fake, chat: int, text: str) -> int:  # type: ignore[no-untyped-def]
    """The user's message id (a command replying to it belongs to its thread)."""
    fake.user_says(chat, text, from_user=42)
    return int(fake.messages_in(chat, from_bot=False)[-1].message_id)


async def _display_waiter(stack) -> None:  # type: ignore[no-untyped-def]
    layer = stack.connector.layer
    async with asyncio.timeout(10):
        while not any(a.display_wait for a in layer.active.values()):
            await asyncio.sleep(0.02)


async def test_a_second_threads_turn_waits_for_the_display_and_status_says_so(
    make_stack, fake
):
    model = HeldModel()
    stack = make_stack(provider=model, bindings=_bindings())
    await stack.start()
    assert stack.daemon.computer is not None and stack.daemon.computer.supervisor is not None
    _says(fake, CHAT, "@geode_bot first")
    await asyncio.wait_for(model.holding.wait(), 10)
    second = _says(fake, CHAT2, "@geode_bot second")
    await _display_waiter(stack)
    fake.user_says(CHAT2, "/status", from_user=42, reply_to=second)
    await fake.wait_until(lambda: any(
        "waiting for the computer display" in m.plain_text
        for m in fake.messages_in(CHAT2, from_bot=True)), within=10)
    assert not model.asked("second")  # nothing of it ran while the other turn had the display
    # its progress message in the thread says so too
    await fake.wait_until(lambda: any(
        "Waiting for the computer display: another thread's computer-use turn is using it"
        in m.plain_text for m in fake.messages_in(CHAT2, from_bot=True)), within=10)
    ready, why = await stack.daemon._display_ready()
    assert ready and why.startswith("Xvfb :"), why

    model.release.set()
    await fake.wait_until(lambda: finals(fake, "answer to: first")
                          and finals(fake, "answer to: second"), within=15)
    assert not stack.daemon.computer.busy


async def test_stop_frees_the_display_and_takes_a_waiting_turn_out_of_the_wait(
    make_stack, fake
):
    model = HeldModel()
    stack = make_stack(provider=model, bindings=_bindings())
    await stack.start()
    first = _says(fake, CHAT, "@geode_bot first")
    await asyncio.wait_for(model.holding.wait(), 10)
    second = _says(fake, CHAT2, "@geode_bot second")
    await _display_waiter(stack)

    fake.user_says(CHAT2, "/stop", from_user=42, reply_to=second)  # the waiting one leaves the wait
    await fake.wait_until(lambda: any("your queued message was not run" in m.plain_text
                                      for m in fake.messages_in(CHAT2, from_bot=True)),
                          within=10)
    # the holder stops: the display is free
    fake.user_says(CHAT, "/stop", from_user=42, reply_to=first)
    await fake.wait_until(lambda: any(m.plain_text.startswith("⏹ Stopped")
                                      for m in fake.messages_in(CHAT, from_bot=True)),
                          within=10)
    fake.user_says(CHAT2, "@geode_bot third", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: third"), within=10)
    assert not model.asked("second") and not stack.daemon.computer.busy


class _Uploads:
    """A PlatformClient's upload, recording calls and how many ran at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes, str | None]] = []
        self.running = 0
        self.most = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def upload(self, target, *, filename, data, caption=None, image=False):  # type: ignore[no-untyped-def]
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
            self.calls.append((filename, data, caption))
            return str(len(self.calls))
        finally:
            self.running -= 1


async def test_the_watch_is_throttled_one_upload_at_a_time_and_shows_the_end():
    from bots.computer_use import ScreenWatch
    from bots.events import ReplyTarget
    from geode.loop.events import ToolResulted

    client = _Uploads()
    frames = iter([b"\x89PNG-1", b"\x89PNG-2", b"\x89PNG-3", b"\x89PNG-4"])

    async def shoot(display: str) -> bytes:
        assert display == ":5"
        return next(frames)

    watch = ScreenWatch(client=client, target=ReplyTarget(channel="c", thread_root="t"),  # type: ignore[arg-type]
                        display=":5", every_s=3600.0, shoot=shoot)
    watch.start()
    sink = watch.tee(None)
    client.gate.clear()  # the first upload hangs: more actions come meanwhile
    await sink(ToolResulted(id="0", name="computer", status="ok"))
    async with asyncio.timeout(10):
        while client.running == 0:
            await asyncio.sleep(0.01)
    for i in range(1, 5):
        await sink(ToolResulted(id=str(i), name="computer", status="ok"))
    await sink(ToolResulted(id="x", name="read_file", status="ok"))  # not the screen
    client.gate.set()
    await watch.close(final=True)
    # one while it ran (the next would be an hour later), never two at once, and the end
    assert [c[2] for c in client.calls] == ["🖥 The screen now",
                                            "🖥 The screen at the end of the turn"]
    assert client.most == 1 and watch.posted == 2

    idle = ScreenWatch(client=client, target=ReplyTarget(channel="c", thread_root="t"),  # type: ignore[arg-type]
                       display=":5", every_s=0, shoot=shoot)
    idle.start()
    await idle.tee(None)(ToolResulted(id="d", name="computer", status="denied"))
    await idle.close(final=True)
    # a turn whose only computer call was denied never changed the screen: nothing posted
    assert watch.posted == 2 and idle.posted == 0
