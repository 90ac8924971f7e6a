"""A web-chat thread in a real browser (Debian's chromium driven by Playwright) against a
real ``geode serve``: sign in with a one-time link, open a thread, watch the request arrive
live, a ``kill -9`` of serve while the thread's approval request waits, a restart, Approve clicked
in the thread: the file is written and the answer shown once.

Nothing downloads a browser (the system ``chromium``); skipped where it is not installed,
except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bots.workspaces import binding_workspace
from geode.settings import BindingSettings
from tests.scenarios._serve_proc import free_port, kill_9, serve_env, start_serve, stop, write_home

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CHROMIUM = "/usr/bin/chromium"


def _browser_or_skip() -> Any:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("playwright is not installed (the test extra)")
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            raise AssertionError("chromium is not installed (.ci/apt-packages.txt)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return async_playwright


def _config(port: int) -> str:
    return f"""
[channels.webchat]
progress_edit_interval_s = 0
pump_interval_s = 0.2
lease_ttl_s = 1.5
poll_interval_s = 0.2

[console]
enabled = true
listen = "127.0.0.1:{port}"

[[bindings]]
platform = "webchat"
channel = "ops"
allow_users = ["alice"]
approve = ["write_file"]
approvers = ["alice"]
"""


async def _up(base: str, proc: Any, home: Path) -> None:
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


async def test_a_web_chat_thread_s_approval_survives_a_kill_9_and_is_clicked(
        tmp_path: Path) -> None:
    async_playwright = _browser_or_skip()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    home = write_home(tmp_path, _config(port))
    # a turn asks to write a file (approval), then says so
    step = {"after_results": "Wrote notes.txt.",
            "otherwise": {"tool": "write_file",
                          "input": {"path": "notes.txt", "content": "hello\n"}}}
    env = serve_env(home, tmp_path, final="", drop_prefix="WEBCHAT_")
    script = Path(env["GEODE_SCRIPTED_MODEL"])
    script.write_text(json.dumps({"latency": 0.5, "script": [step]}))
    link = subprocess.run([sys.executable, "-m", "geode", "console", "link", "--as",
                           "webchat:alice"], env=env, cwd=str(home), capture_output=True,
                          text=True, timeout=60)
    assert link.returncode == 0, link.stderr
    proc = await start_serve(home, env)
    try:
        await _up(base, proc, home)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, headless=True,
                args=["--no-sandbox"] if os.geteuid() == 0 else [])
            try:
                page = await browser.new_page(viewport={"width": 1000, "height": 800})
                await page.goto(link.stdout.strip().splitlines()[0])
                await page.click("button:has-text('Sign in')")
                await page.wait_for_url(f"{base}/")
                await page.goto(f"{base}/chat")
                await page.fill("form.chat-new textarea", "please write the notes")
                await page.click("form.chat-new button")
                await page.wait_for_url(re.compile(r".*/chat/ops/\d+$"))
                url = page.url
                # the request arrives live (server-sent events), with its buttons
                await page.locator("form.chat-decide button.approve").wait_for(timeout=30_000)
                # serve dies while the request waits; the wait is durable
                await kill_9(proc)
                proc = await start_serve(home, env)
                await _up(base, proc, home)
                await page.goto(url)  # the session cookie is a row of the store
                await page.click("form.chat-decide button.approve")
                await page.locator("#chat li.bot pre", has_text="Wrote notes.txt.").wait_for(
                    timeout=30_000)
                ws = binding_workspace(home, BindingSettings(platform="webchat", channel="ops"))
                assert (ws / "notes.txt").read_text() == "hello\n"
                await asyncio.sleep(1.0)
                await page.reload()
                assert await page.locator("form.chat-decide").count() == 0  # decided
                assert await page.locator("#chat li.bot pre",
                                          has_text="Wrote notes.txt.").count() == 1
            finally:
                await browser.close()
    finally:
        await stop(proc)
        log = (home / "serve.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-4000:]
