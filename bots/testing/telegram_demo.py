"""Offline demo of the chat-ops path: you write as a Telegram user, ``geode serve`` answers.

``python -m bots.testing.telegram_demo`` starts the wire-level fake Telegram Bot API on
loopback, writes a throwaway ``$GEODE_HOME`` whose ``config.toml`` binds one group chat of
the fake, and runs the real ``geode serve --demo`` against it: python-telegram-bot long
polling, the channel layer, the durable store, the executor, the scripted demo model. No
token, no API key, no network.

Each line you type is posted to the chat as a new mention of the bot (a new thread). A line
starting with ``+`` continues the last thread instead (a reply to the bot's answer, which
needs no mention); ``/status``, ``/new``, ``/help`` ... are sent as typed. What the bot does
on the wire is printed as it happens: the 👀 reaction, the progress message and its edits,
the final answer. End with Ctrl-D (or Ctrl-C).

Given messages as arguments, it sends them one after another, each after the previous one
was answered, and exits (0 when all were answered)::

    python -m bots.testing.telegram_demo "What is in this folder?" "+thanks" /status

The daemon's log goes to ``serve.log`` in the demo's home (``--home DIR`` keeps it; by
default a temporary folder is removed at the end). The session workspace the demo model
lists is ``--cwd`` (default: the current folder).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bots.progress import WORKING
from bots.testing.telegram import FakeTelegramServer, TelegramCall, parse_telegram_html
from geode.logging import configure_logging

__all__ = ["main"]

TOKEN = "4242:OFFLINE-DEMO-TOKEN"
BOT = "geode_bot"
CHAT = -1004242
USER = {"id": 42, "is_bot": False, "first_name": "You", "username": "you"}
_START_WITHIN_S = 60.0


def config_toml(fake: FakeTelegramServer, workspace: Path | None = None) -> str:
    """The demo home's ``config.toml``: the fake's endpoints and one binding for ``CHAT``
    (working in ``workspace``, when given, instead of its own folder)."""
    return "\n".join([
        "health_port = 0",
        "",
        "[channels.telegram]",
        'token_env = "TELEGRAM_BOT_TOKEN"',
        f'base_url = "{fake.base_url}"',
        f'base_file_url = "{fake.base_file_url}"',
        "poll_timeout_s = 5",
        # every step of a reply on show: the progress message at once (the scripted model
        # answers sooner than a quick answer's second), then the answer edited into it
        "progress_after_ms = 0",
        "stream = false",
        "",
        "[[bindings]]",
        'platform = "telegram"',
        f'channel = "{CHAT}"',
        f'allow_users = ["{USER["id"]}"]',
        *([f"workspace = {json.dumps(str(workspace))}"] if workspace is not None else []),
        "",
    ])


def describe(call: TelegramCall) -> str | None:
    """One printable line for a Bot API call that shows in the chat (None: not shown)."""
    p = call.params
    if call.status != 200:
        return f"  [{call.method} answered {call.status}]"
    method = call.method.lower()
    if method in ("sendmessage", "editmessagetext"):
        text = str(p.get("text", ""))
        if p.get("parse_mode") == "HTML":
            text = parse_telegram_html(text)[0]
        what = "bot" if method == "sendmessage" else f"bot (edits #{p.get('message_id')})"
        return f"{what}: {text}"
    if method == "setmessagereaction":
        emoji = " ".join(str(r.get("emoji", "?")) for r in p.get("reaction") or []) or "none"
        return f"  [bot reacts {emoji} to #{p.get('message_id')}]"
    if method == "sendchataction":
        return f"  [bot: {p.get('action')}…]"
    if method == "deletemessage":
        return f"  [bot deletes #{p.get('message_id')}]"
    return None


@dataclass
class _Thread:
    root: int  # the message that started it
    last_bot: int | None = None  # the bot's latest message in it (what "+" replies to)


class Demo:
    """The fake, the daemon process and the chat between them."""

    def __init__(self, *, home: Path, workspace: Path, out: IO[str]) -> None:
        self.home = home
        self.workspace = workspace
        self.out = out
        self.fake = FakeTelegramServer(token=TOKEN, bot_username=BOT)
        self.daemon: asyncio.subprocess.Process | None = None
        self._printed = 0
        self._thread: _Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.fake.start()
        log = await asyncio.to_thread(self._prepare_home)
        env = {**os.environ, "GEODE_HOME": str(self.home), "TELEGRAM_BOT_TOKEN": TOKEN}
        env.pop("GEODE_HEALTH_PORT", None)
        try:
            # cwd = the home: a project's ./.geode/config.toml must not reach the demo daemon
            self.daemon = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "geode", "serve", "--demo", "--cwd", str(self.workspace),
                cwd=self.home, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        self._say(f"fake Telegram Bot API on {self.fake.base_url}; geode serve --demo "
                  f"(pid {self.daemon.pid}, log {self.home / 'serve.log'}) is starting…")
        await self._until(lambda: bool(self.fake.calls_to("getUpdates")), _START_WITHIN_S)
        self._say(f"connected. You are @{USER['username']} in chat {CHAT}; each line is a "
                  f"mention of @{BOT} in a new thread, '+text' continues the last thread, "
                  "/status /new /help are commands. Ctrl-D ends.")

    def _prepare_home(self) -> IO[bytes]:
        """Write the home's config; the daemon's log file, open for appending."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(config_toml(self.fake, self.workspace),
                                                 encoding="utf-8")
        return (self.home / "serve.log").open("ab")

    async def stop(self) -> None:
        proc, self.daemon = self.daemon, None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)  # the daemon drains and exits 0
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await self.fake.stop()

    # -- chat ----------------------------------------------------------------------------------

    async def send(self, line: str, *, within: float = 60.0) -> bool:
        """Post ``line`` as the user and wait for the bot's answer; False if none came."""
        line = line.strip()
        if not line:
            return True
        thread = self._thread
        reply_to: int | None
        if line.startswith("+") and thread is not None:
            text, reply_to = line[1:].strip(), thread.last_bot or thread.root
        elif line.startswith("/"):
            text, reply_to = line, thread.last_bot if thread is not None else None
        else:
            text, reply_to = f"@{BOT} {line.lstrip('+').strip()}", None
        mid = self.fake.message_id_for(self.fake.user_says(CHAT, text, from_user=USER,
                                                           reply_to=reply_to))
        self._say(f"you (#{mid}): {text}")
        if reply_to is None and not line.startswith("/"):
            self._thread = _Thread(root=mid)
        try:
            await self._until(lambda: self._answer_to(mid) is not None, within)
        except TimeoutError:
            self._say(f"  [no answer to #{mid} within {within:.0f} s; see "
                      f"{self.home / 'serve.log'}]")
            return False
        await self._quiet(0.3)  # further chunks, the last edits
        answer = self._answer_to(mid)
        if self._thread is not None and answer is not None and not line.startswith("/"):
            self._thread.last_bot = answer
        return True

    def _answer_to(self, mid: int) -> int | None:
        """The bot's message answering ``mid`` (not the progress placeholder), if any."""
        for m in self.fake.messages_in(CHAT, from_bot=True):
            if m.reply_to_message_id == mid and not m.plain_text.startswith(WORKING):
                return m.message_id
        return None

    # -- output --------------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _print_new_calls(self) -> None:
        calls = self.fake.calls
        while self._printed < len(calls):
            line = describe(calls[self._printed])
            self._printed += 1
            if line is not None:
                self._say(line)

    async def _until(self, done: Callable[[], bool], within: float) -> None:
        """Print calls as they come until ``done()``; TimeoutError after ``within`` s."""
        async with asyncio.timeout(within):
            while True:
                self._print_new_calls()
                if done():
                    return
                if self.daemon is not None and self.daemon.returncode is not None:
                    raise DaemonExited(self.daemon.returncode)
                with contextlib.suppress(TimeoutError):
                    await self.fake.wait_until(lambda: len(self.fake.calls) > self._printed,
                                               within=0.25)

    async def _quiet(self, seconds: float) -> None:
        """Print calls until none came for ``seconds``."""
        while True:
            seen = len(self.fake.calls)
            await asyncio.sleep(seconds)
            self._print_new_calls()
            if len(self.fake.calls) == seen:
                return


class DaemonExited(RuntimeError):
    def __init__(self, code: int) -> None:
        super().__init__(f"geode serve exited with code {code}")
        self.code = code


async def _interactive(demo: Demo) -> int:
    # A daemon thread reads stdin: a thread of the loop's default executor blocked in
    # readline() would keep asyncio.run() from returning after Ctrl-C until Enter is pressed.
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()

    def reader() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody listens
            for line in sys.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, "")  # EOF

    threading.Thread(target=reader, name="demo-stdin", daemon=True).start()
    while line := await lines.get():
        await demo.send(line)
    return 0


async def _run(args: argparse.Namespace, home: Path, workspace: Path, *, keep: bool) -> int:
    demo = Demo(home=home, workspace=workspace, out=sys.stdout)
    try:
        await demo.start()
        if args.messages:
            answered = [await demo.send(m, within=args.timeout) for m in args.messages]
            return 0 if all(answered) else 1
        return await _interactive(demo)
    except DaemonExited as exc:
        print(f"{exc}; its log:\n{_tail(home / 'serve.log')}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"geode serve did not start polling within {_START_WITHIN_S:.0f} s; its log:\n"
              f"{_tail(home / 'serve.log')}", file=sys.stderr)
        return 1
    finally:
        await demo.stop()
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bots.testing.telegram_demo",
        description="Chat with `geode serve --demo` through a fake Telegram, offline.")
    parser.add_argument("messages", nargs="*",
                        help="send these (each after the previous answer) and exit")
    parser.add_argument("--home", help="GEODE_HOME to use and keep (default: a temporary one)")
    parser.add_argument("--cwd", default=".", help="the sessions' workspace (default: here)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for each answer")
    args = parser.parse_args(argv)
    configure_logging(level="WARNING")  # the fake's own debug lines would drown the chat
    keep = args.home is not None
    home = Path(args.home) if keep else Path(tempfile.mkdtemp(prefix="geode-tg-demo-"))
    try:
        return asyncio.run(_run(args, home.resolve(), Path(args.cwd).resolve(), keep=keep))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
