"""The console in a real browser (Debian's chromium driven by Playwright) against a real
``geode serve`` with the Telegram fake in the test process:

* ``/console`` in a private chat with the bot brings a one-time link; the browser opens it
  and signs in with its button;
* a turn's progress arrives on the thread page live (server-sent events, no reload);
* a ``write_file`` approved on the Approvals page is written, and the thread's request
  message is edited to say who decided and where;
* Stop on a thread page stops its running turn;
* the Usage page shows its chart.

Nothing downloads a browser: the system ``chromium`` is used (``.ci/apt-packages.txt``). Under
``CI=true`` a missing browser or Playwright fails the test instead of skipping it. With
``GEODE_DOCS_SCREENSHOTS=1`` the test writes the screenshots shown in ``docs/console.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from bots.testing.telegram import FakeTelegramServer
from bots.workspaces import binding_workspace
from geode.settings import BindingSettings
from tests.scenarios._serve_proc import (
    REPO,
    free_port,
    serve_env,
    start_serve,
    stop,
    telegram_section,
    write_home,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CHROMIUM = "/usr/bin/chromium"
TOKEN = "123456:TEST-TOKEN"
CHAT = -100123
USER = 42
SHOTS = REPO / "docs" / "console"


def _browser_or_skip() -> Any:
    """Playwright's async API, with the system browser present; a skip outside CI."""
    in_ci = os.environ.get("CI", "").lower() == "true"
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        if in_ci:
            raise
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        if in_ci:
            pytest.fail(f"{CHROMIUM} is missing: CI installs it (.ci/apt-packages.txt)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return async_playwright


def _config(fake: FakeTelegramServer, port: int) -> str:
    return telegram_section(fake) + f"""
[console]
enabled = true
listen = "127.0.0.1:{port}"

[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["{USER}"]
approve = ["write_file"]
approvers = ["{USER}"]
"""


async def _until(predicate: Any, within: float, what: str) -> None:
    async with asyncio.timeout(within):
        while not predicate():
            await asyncio.sleep(0.1)
    assert predicate(), what


def _answers(fake: FakeTelegramServer, chat: int) -> list[str]:
    return [m.plain_text for m in fake.messages_in(chat, from_bot=True)]


async def _console_up(base: str, proc: Any, home: Path) -> None:
    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/signin", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    async with asyncio.timeout(60):
        while not await asyncio.to_thread(up):
            assert proc.returncode is None, (home / "serve.log").read_text(errors="replace")
            await asyncio.sleep(0.2)


async def _shot(page: Any, name: str) -> None:
    if os.environ.get("GEODE_DOCS_SCREENSHOTS") == "1":
        SHOTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def test_sign_in_from_a_dm_watch_approve_stop_and_see_usage(tmp_path: Path) -> None:
    async_playwright = _browser_or_skip()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
        home = write_home(tmp_path, _config(fake, port))
        # each turn: a slow model call, write_file (approval), a slow call, the answer
        step = {"after_results": "Wrote notes.txt.",
                "otherwise": {"tool": "write_file",
                              "input": {"path": "notes.txt", "content": "hello\n"}}}
        script = [step, step]
        env = serve_env(home, tmp_path, final="", drop_prefix="TELEGRAM_",
                        TELEGRAM_BOT_TOKEN=TOKEN)
        (tmp_path / "script.json").write_text(json.dumps({"latency": 1.5, "script": script}))
        proc = await start_serve(home, env)
        try:
            await _console_up(base, proc, home)
            await _run(async_playwright, fake, home, base)
        except BaseException:
            print((home / "serve.log").read_text(errors="replace")[-6000:])  # on failure
            raise
        finally:
            await stop(proc)
        log = (home / "serve.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-6000:]


async def _run(async_playwright: Any, fake: FakeTelegramServer, home: Path, base: str) -> None:
    # the sign-in link comes by direct message; in the group the bot never posts one
    fake.user_says(USER, "/console", from_user=USER, chat_type="private")
    await fake.wait_until(lambda: any("token=" in t for t in _answers(fake, USER)), within=30)
    link = re.search(r"http://\S+/signin\?token=[\w-]+", _answers(fake, USER)[-1])
    assert link is not None and link.group(0).startswith(base)
    ws = binding_workspace(home, BindingSettings(platform="telegram", channel=str(CHAT)))

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 800})
            page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
            await page.goto(link.group(0))
            await _shot(page, "signin")
            await page.click("button:has-text('Sign in')")
            await page.wait_for_url(f"{base}/")
            assert await page.inner_text("span.me") == f"telegram:{USER}"
            await _shot(page, "overview")

            # a turn starts; its page follows it live
            update = fake.user_says(CHAT, "@geode_bot write the notes", from_user=USER)
            mid = fake.message_id_for(update)
            key = f"telegram:{fake.bot_id}:{CHAT}:{mid}"
            thread_url = f"{base}/threads/{quote(key, safe='')}"
            await _thread_page(page, thread_url)
            rows = await page.locator("#timeline tr").count()
            # the request appears on the page while it stays open (server-sent events)
            await page.locator("#timeline tr").nth(rows).wait_for(timeout=30_000)
            await page.locator("#timeline tr", has_text="approval.requested").wait_for(
                timeout=30_000)
            await _shot(page, "thread")

            # approved on the Approvals page: written, and the thread's message edited
            await page.goto(f"{base}/approvals")
            await page.wait_for_selector("button.approve")
            await _shot(page, "approvals")
            await page.click("button.approve")
            await page.wait_for_url(f"{base}/approvals")
            await _until(lambda: (ws / "notes.txt").exists(), 30, "notes.txt was not written")
            assert (ws / "notes.txt").read_text() == "hello\n"
            await fake.wait_until(lambda: any(
                f"approved by web console ({USER})" in t for t in _answers(fake, CHAT)),
                within=30)
            await fake.wait_until(lambda: "Wrote notes.txt." in _answers(fake, CHAT),
                                  within=30)

            # another turn waits for its approval: Stop on its page ends it
            update = fake.user_says(CHAT, "@geode_bot write them again", from_user=USER)
            key2 = f"telegram:{fake.bot_id}:{CHAT}:{fake.message_id_for(update)}"
            await _thread_page(page, f"{base}/threads/{quote(key2, safe='')}",
                               running=True)
            await _shot(page, "stop")
            await page.click("form.stop button")
            await fake.wait_until(lambda: any(t.startswith("⏹ Stopped")
                                              for t in _answers(fake, CHAT)), within=30)

            # the Usage page's chart, drawn on the server
            await page.goto(f"{base}/usage?by=binding")
            assert await page.locator("figure svg rect").count() >= 1
            await _shot(page, "usage")
            await page.goto(f"{base}/threads")
            await _shot(page, "threads")
        finally:
            await browser.close()


async def _thread_page(page: Any, url: str, *, running: bool = False) -> None:
    """Open a thread's page once the console knows the thread (and, with ``running``, once
    its turn is running)."""
    async with asyncio.timeout(30):
        while True:
            response = await page.goto(url)
            if response is not None and response.status == 200 and (
                    not running or await page.locator("form.stop").count()):
                return
            await asyncio.sleep(0.3)
