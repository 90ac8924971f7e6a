"""The walk of one Telegram mention through the project's modules, measured.

A real ``Daemon`` (store, lanes, session factory) hosts the real Telegram connector, which
long-polls the wire-level fake Telegram server; the model is the scripted one. One mention
is said in a bound chat; from that moment until the Bot API call sending the bot's reply
returns, every Python function entered is seen by a profile hook (``sys.setprofile`` and
``threading.setprofile``). Only *project* modules count: files under ``geode/`` and
``bots/``, except the test doubles (``geode/testing/``, ``bots/testing/``,
``geode/providers/scripted.py``).

Figures (defined in docs/architecture.md, "A chat turn, end to end"):

* ``module hops`` — distinct directed edges ``A -> B`` between two different project
  modules, where a function of ``A`` called (or first awaited) a function of ``B``, on
  the chat turn's walk (:func:`on_the_walk`: one end in ``bots/``; the harness's and the
  record stores' insides are not the walk). The caller is the nearest project frame up
  the stack; a frame the event loop resumes has no project caller and adds no edge. Each
  frame counts once (a coroutine resumed again is not a new call).
* ``all module edges`` — the same, the harness's insides included.
* ``cross-module calls`` — the hops counted each time they happen.
* ``harness entries`` — calls of the harness port's ``run_turn`` (``Daemon.run_turn``).
* ``turns re-entries`` — calls into the chat turn's modules (``bots/turn/``) from a module
  outside them, each counted.
* ``loop events`` — the typed loop events the harness handed back to the layer's sink,
  all through one ``on_event`` stream.

Run it: ``python benchmarks/trace_turn.py`` (``--json`` for the figures as JSON, ``--edges``
to list the hops). ``tests/bots/test_trace_turn.py`` runs it and holds the bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_ROOTS = ("geode/", "bots/")
_DOUBLES = ("geode/testing/", "bots/testing/", "geode/providers/scripted.py")
TOKEN = "123456:TRACE-TOKEN"
CHAT = -100777
QUESTION = "what is the answer?"
MENTION = f"@geode_bot {QUESTION}"


@dataclass
class Walk:
    """What the profile hook saw between the mention and its reply."""

    edges: Counter[tuple[str, str]] = field(default_factory=Counter)
    modules: set[str] = field(default_factory=set)
    harness_entries: int = 0
    turns_reentries: int = 0
    #: loop events the harness's ``emit`` handed to the layer, and the sinks they went to
    loop_events: int = 0
    sinks: set[object] = field(default_factory=set)
    #: the project modules on the stack (innermost first, followed across task creations)
    #: where the mention was first recorded, and where the answer was handed to the SDK
    received: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    #: each hop -> the functions that made it (``caller_function -> callee_function``)
    calls: dict[tuple[str, str], set[str]] = field(default_factory=dict)


def on_the_walk(caller: str, callee: str) -> bool:
    """An edge of the chat turn's walk: one end in ``bots/``, and not a record store calling
    its own engine (``bots.store.* -> geode.store.*``); geode -> geode calls are the
    harness's insides (entered once, through ``run_turn``)."""
    if not (caller.startswith("bots.") or callee.startswith("bots.")):
        return False
    return not (caller.startswith("bots.store") and callee.startswith("geode."))


@dataclass(frozen=True)
class Figures:
    module_hops: int
    all_module_edges: int
    cross_module_calls: int
    modules: int
    harness_entries: int
    turns_reentries: int
    loop_events: int
    event_streams: int
    seconds: float
    edges: list[str]
    calls: dict[str, list[str]]
    path_hops: int
    path: list[str]


class _Tracer:
    def __init__(self) -> None:
        self.walk = Walk()
        self._module: dict[str, str | None] = {}
        #: frames seen (kept alive so an id is never reused): a resumption is no new call
        self._seen: dict[int, FrameType] = {}
        #: each task created during the walk -> the modules on its creator's stack
        self._creators: dict[asyncio.Task[Any], list[str]] = {}
        #: the frame of the Bot API call sending the answer (its return ends the walk)
        self._answer: FrameType | None = None
        self.on = False

    def stack(self, frame: FrameType | None) -> list[str]:
        """The project modules on ``frame``'s stack, innermost first, then on the stack that
        created the running task (and so on): the chain of calls that led here."""
        mods: list[str] = []
        while frame is not None:
            mod = self.module_of(frame.f_code.co_filename)
            if mod is not None:
                mods.append(mod)
            frame = frame.f_back
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is not None:
            mods.extend(self._creators.get(task, ()))
        return mods

    def already_running(self, frames: list[FrameType]) -> None:
        """``frames`` were entered before the trace began (a loop waiting for its next
        pass): resuming one later is no call, so it adds no edge."""
        for frame in frames:
            self._seen[id(frame)] = frame

    def task_factory(self, loop: asyncio.AbstractEventLoop, coro: Any,
                     **kw: Any) -> asyncio.Task[Any]:
        """The loop's task factory while tracing: a task remembers who created it."""
        task = asyncio.Task(coro, loop=loop, **kw)
        if self.on:
            self._creators[task] = self.stack(sys._getframe(1))
        return task

    def _answer_sent(self, frame: FrameType) -> bool:
        """``frame`` is the Bot API call (python-telegram-bot's ``_post``) that sends or
        edits in the final answer."""
        code = frame.f_code
        if code.co_name != "_post" or not code.co_filename.endswith("telegram/_bot.py"):
            return False
        data = frame.f_locals.get("data")
        return (frame.f_locals.get("endpoint") in ("sendMessage", "editMessageText")
                and isinstance(data, dict) and "the answer" in str(data.get("text", "")))

    def module_of(self, filename: str) -> str | None:
        found = self._module.get(filename, "")
        if found != "":
            return found
        mod: str | None = None
        try:
            rel = Path(filename).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            rel = ""
        if rel.startswith(_ROOTS) and not rel.startswith(_DOUBLES):
            mod = rel[:-3].replace("/", ".") if rel.endswith(".py") else rel
        self._module[filename] = mod
        return mod

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        if event == "return" and frame is self._answer and isinstance(arg, dict):
            # the answer's Bot API call returned Telegram's message: the walk ends here
            # (what follows, the row marked sent and ``ReplySent`` published, is the
            # bookkeeping after the reply, and timing decided whether it was seen)
            self.on = False
            return
        if event != "call":
            return
        callee = self.module_of(frame.f_code.co_filename)
        if callee is None:
            if self._answer is None and self._answer_sent(frame):
                self.walk.answered = self.stack(frame)
                self._answer = frame
            return
        if id(frame) in self._seen:
            return
        self._seen[id(frame)] = frame
        walk = self.walk
        walk.modules.add(callee)
        if callee == "geode.daemon.serve" and frame.f_code.co_name == "run_turn":
            walk.harness_entries += 1
        caller_frame = frame.f_back
        caller = None
        while caller_frame is not None:
            caller = self.module_of(caller_frame.f_code.co_filename)
            if caller is not None:
                break
            caller_frame = caller_frame.f_back
        if (callee.startswith("bots.store") and not walk.received
                and _carries_the_mention(frame)):
            walk.received = self.stack(frame)  # the mention reaches the store: received
        if caller is None or caller == callee:
            return
        if (caller == "geode.loop._util" and caller_frame is not None
                and caller_frame.f_code.co_name == "emit" and callee.startswith("bots.")):
            walk.loop_events += 1  # a loop event handed to the layer's sink
            walk.sinks.add(frame.f_code)
        walk.edges[(caller, callee)] += 1
        walk.calls.setdefault((caller, callee), set()).add(
            f"{caller_frame.f_code.co_name if caller_frame else '?'} -> {frame.f_code.co_name}")
        if callee.startswith("bots.turn") and not caller.startswith("bots.turn"):
            walk.turns_reentries += 1  # the driver calling its own phases is not a re-entry


async def trace_one_mention(home: Path) -> Figures:
    """Start the stack on ``home``, trace one mention to its reply, stop."""
    sys.path.insert(0, str(ROOT))
    from bots.telegram import TelegramConnector, TelegramOptions
    from bots.testing.telegram import FakeTelegramServer
    from geode.daemon import Daemon
    from geode.providers.scripted import ScriptedProvider
    from geode.settings import BindingSettings, load_settings

    provider = ScriptedProvider(["the answer"], repeat_last=True)
    binding = BindingSettings(platform="telegram", channel=str(CHAT), allow_users=["42"])
    tracer = _Tracer()
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
        settings, secrets = load_settings(
            env={"GEODE_HOME": str(home)}, health_port=0, bindings=[binding],
            store={"url": f"sqlite:///{home / 'geode.db'}"},
            lanes={"global_cap": 8, "channel_cap": 8})
        daemon = Daemon(settings=settings, secrets=secrets, provider_factory=lambda: provider,
                        workspace=home / "ws", drain_timeout_s=0.5)
        opts = TelegramOptions(
            base_url=fake.base_url, base_file_url=fake.base_file_url, poll_timeout_s=1,
            progress_edit_interval_s=0.0, typing_interval_s=30.0, typing_delay_s=0.0,
            lease_ttl_s=30.0, pump_interval_s=0.2, rate_group_per_min=0)
        connector = TelegramConnector(host=daemon, token=TOKEN, bindings=[binding],
                                      options=opts)
        daemon.add_connector(connector)
        await daemon.start()
        try:
            # warm up: a first mention opens the store's statements, imports lazily
            # imported modules and fills caches; the traced one is a follow-up's first
            # message in a new thread, as steady state sees it
            fake.user_says(CHAT, "@geode_bot warm up", from_user=42)
            await _reply(fake, 1)
            await asyncio.sleep(0.5)  # the warm-up's bookkeeping after its send is not traced
            asyncio.get_running_loop().set_task_factory(tracer.task_factory)
            tracer.already_running(alive_frames())
            sys.setprofile(tracer.hook)
            threading.setprofile(tracer.hook)
            tracer.on = True
            started = time.perf_counter()
            fake.user_says(CHAT, MENTION, from_user=42)
            await _reply(fake, 2)
            tracer.on = False  # (already off: the answer's send returned)
            seconds = time.perf_counter() - started
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            asyncio.get_running_loop().set_task_factory(None)
            await daemon.shutdown()
    walk = tracer.walk
    hops = {e: n for e, n in walk.edges.items() if on_the_walk(*e)}
    path = the_path(walk.received, walk.answered)
    return Figures(
        module_hops=len(hops), all_module_edges=len(walk.edges),
        cross_module_calls=sum(hops.values()),
        modules=len(walk.modules), harness_entries=walk.harness_entries,
        turns_reentries=walk.turns_reentries, loop_events=walk.loop_events,
        event_streams=len(walk.sinks), seconds=round(seconds, 3),
        edges=[f"{a} -> {b} ({n})" for (a, b), n in sorted(hops.items())],
        calls={f"{a} -> {b}": sorted(walk.calls.get((a, b), ())) for (a, b) in sorted(hops)},
        path_hops=max(len(path) - 1, 0), path=path,
    )


def alive_frames() -> list[FrameType]:
    """The frames running when the trace starts: every task's chain of awaiting coroutines
    (a supervised loop, its body, what that awaits) and every thread's stack. The profile
    hook reports a coroutine's resumption as a ``call``; for a frame entered before the
    mention (the pump's or the poller's loop) that is no call made on the mention's behalf."""
    frames: list[FrameType] = []
    for task in asyncio.all_tasks():
        awaited: Any = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                frames.append(frame)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    for thread_frame in sys._current_frames().values():
        current: FrameType | None = thread_frame
        while current is not None:
            frames.append(current)
            current = current.f_back
    return frames


def _carries_the_mention(frame: FrameType) -> bool:
    """An argument of ``frame`` is the traced mention (an event, or a batch of them)."""
    for value in list(frame.f_locals.values()):
        items = value[:8] if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            parts = item if isinstance(item, tuple) else ()  # e.g. (event, status)
            for obj in (item, getattr(item, "event", None), *parts):
                text = getattr(obj, "text", None)
                if isinstance(text, str) and QUESTION in text:
                    return True
    return False


def _chain(stack: list[str]) -> list[str]:
    """A stack (innermost first) as the modules it passed through, outermost first, from
    the first ``bots`` module (the task runner that hosts a connector's loop is no hop),
    a module called again from itself counted once."""
    mods: list[str] = []
    for mod in reversed(stack):
        if not mods and not mod.startswith("bots."):
            continue
        if not mods or mods[-1] != mod:
            mods.append(mod)
    return mods


def the_path(received: list[str], answered: list[str]) -> list[str]:
    """The mention's path end to end: the calls that carried it from the connector to
    the store (received), then those that carried the turn from the loop that took it up
    to the Bot API call sending the answer (answered). Each list's module changes are
    its hops, and the hand-over between the two is one more."""
    return [*_chain(received), *_chain(answered)]


async def _reply(fake: Any, n: int, within: float = 30.0) -> None:
    """Until the bot's ``n``-th final answer is in the chat."""
    async with asyncio.timeout(within):
        # the fake records what it was sent, it signals nothing: polled
        while sum(1 for m in fake.messages_in(CHAT, from_bot=True)  # noqa: ASYNC110
                  if m.plain_text == "the answer") < n:
            await asyncio.sleep(0.005)


def measure() -> Figures:
    home = Path(tempfile.mkdtemp(prefix="geode-trace-", dir="/tmp"))
    try:
        return asyncio.run(trace_one_mention(home))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--edges", action="store_true", help="list every module hop")
    parser.add_argument("--why", action="store_true",
                        help="with each hop, the functions that made it")
    args = parser.parse_args()
    figures = measure()
    if args.json:
        print(json.dumps(asdict(figures), indent=2))
        return
    print(f"path hops           {figures.path_hops} (received, then answered, end to end)")
    print(f"module hops         {figures.module_hops}")
    print(f"all module edges    {figures.all_module_edges} (the harness's insides included)")
    print(f"cross-module calls  {figures.cross_module_calls}")
    print(f"modules entered     {figures.modules}")
    print(f"harness entries     {figures.harness_entries}")
    print(f"turns re-entries    {figures.turns_reentries}")
    print(f"loop events         {figures.loop_events} through {figures.event_streams} stream")
    print(f"traced for          {figures.seconds:.2f} s")
    if args.edges:
        print("path:", " -> ".join(figures.path))
        for edge in figures.edges:
            print(edge)
            if args.why:
                for call in figures.calls[edge.rpartition(" (")[0]]:
                    print(f"    {call}")


if __name__ == "__main__":
    main()
