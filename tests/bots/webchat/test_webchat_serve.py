"""The web chat in a real ``geode serve``: ``geode serve --demo`` starts offline with a
throwaway home, prints the web chat's address and a one-time sign-in link, and the scripted
demo model answers a message; a serve killed with SIGKILL mid-turn answers once after its
restart."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import free_port, geode, start_serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _open(url: str, *, data: dict[str, str] | None = None, cookie: str = "",
          accept: str = "application/json") -> tuple[int, dict[str, str], bytes]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={
        "Accept": accept, **({"Cookie": cookie} if cookie else {})})
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def sign_in(link: str) -> str:
    """The session cookie a one-time link gives."""
    base, token = link.split("/signin?token=", 1)
    status, headers, body = _open(f"{base}/signin", data={"token": token})
    assert status == 303, body
    return headers["Set-Cookie"].split(";", 1)[0]


def csrf(base: str, cookie: str) -> str:
    _, _, body = _open(f"{base}/chat", cookie=cookie, accept="text/html")
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', body.decode())
    assert found is not None, body
    return found.group(1)


def open_thread(base: str, cookie: str, channel: str, text: str) -> str:
    status, _, body = _open(f"{base}/chat", cookie=cookie, data={
        "channel": channel, "text": text, "csrf": csrf(base, cookie)})
    assert status == 200, body
    return str(json.loads(body)["thread"])


def bot_texts(base: str, cookie: str, url: str) -> list[str]:
    status, _, body = _open(f"{base}{url}", cookie=cookie)
    assert status == 200, body
    return [m["text"] for m in json.loads(body)["messages"] if m["kind"] == "bot"]


def wait_until(check: Any, within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_serve_demo_prints_a_sign_in_link_and_the_demo_model_answers(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# A demo project\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(HOME=str(tmp_path / "user"), GEODE_HEALTH_PORT=str(free_port()))
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "geode", "serve", "--demo"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=str(folder))
    try:
        link = wait_until(lambda: re.search(r"sign in\s+(http://\S+/signin\?token=\S+)",
                                            log.read_text()))
        output = log.read_text()
        home = re.search(r"home\s+(/\S+) \(--demo: a throwaway home", output)
        assert home is not None, output
        base = link.group(1).split("/signin?", 1)[0]
        assert f"{base}/chat" in output and base.startswith("http://127.0.0.1:")
        cookie = sign_in(link.group(1))
        assert _open(f"{base}/signin", data={"token": link.group(1).split("token=")[1]}
                     )[0] == 403  # the link is used
        url = open_thread(base, cookie, "demo", "what is in this folder?")

        def answered() -> list[str]:
            return [t for t in bot_texts(base, cookie, url) if "[demo: scripted model" in t]

        [answer] = wait_until(answered)
        assert "what is in this folder?" in answer
        assert "README.md" in answer and "A demo project" in answer
        time.sleep(0.5)
        assert len(answered()) == 1
        assert not (Path(env["HOME"]) / ".geode").exists()  # nothing in the user's home
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        code = proc.wait(timeout=30)
    assert code == 0, log.read_text()
    assert "geode serve: stopped" in log.read_text()
    assert not Path(home.group(1)).exists()  # the throwaway home is gone


def test_a_kill_9_mid_turn_then_a_restart_answers_once(home: Path, tmp_path: Path) -> None:
    port = free_port()
    (home / "config.toml").write_text(f"""
[channels.webchat]
progress_edit_interval_s = 0
pump_interval_s = 0.2
lease_ttl_s = 1.5
poll_interval_s = 0.1

[console]
enabled = true
listen = "127.0.0.1:{port}"

[[bindings]]
platform = "webchat"
channel = "ops"
allow_users = ["alice"]
approvers = ["alice"]
""", encoding="utf-8")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"latency": 4, "script": ["the slow answer"]}))
    serve = start_serve(home, script=script)
    base = f"http://127.0.0.1:{port}"
    try:
        made = geode(home, "console", "link", "--as", "webchat:alice")
        assert made.returncode == 0, made.stderr
        cookie = sign_in(made.stdout.strip().splitlines()[0])
        url = open_thread(base, cookie, "ops", "answer slowly")
        # the progress message is out: the turn runs, its answer is not there yet
        wait_until(lambda: bot_texts(base, cookie, url))
        assert "the slow answer" not in bot_texts(base, cookie, url)
    finally:
        serve.stop(signal.SIGKILL)
    serve = start_serve(home, script=script)
    try:
        # the session cookie is a row of the store: the browser is still signed in
        wait_until(lambda: "the slow answer" in bot_texts(base, cookie, url))
        time.sleep(1.0)
        texts = bot_texts(base, cookie, url)
        assert texts.count("the slow answer") == 1, texts
        assert len(texts) == 1  # the progress message became the answer (no stray one)
    finally:
        assert serve.stop() == 0, serve.output()
