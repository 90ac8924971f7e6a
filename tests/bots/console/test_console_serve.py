"""The console inside a real ``geode serve``: started with the daemon on ``[console]
listen``, signed in through a link made on the host, its session revoked from the CLI; a
non-loopback listen without TLS is refused with exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import free_port, geode, start_serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def console_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return geode(home, "console", *args)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _open(url: str, *, data: dict[str, str] | None = None,
          cookie: str = "") -> tuple[int, dict[str, str], bytes]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={
        "Accept": "application/json", **({"Cookie": cookie} if cookie else {})})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _wait_up(base: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if _open(f"{base}/signin")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the console at {base} did not answer")


def test_serve_hosts_the_console_and_a_host_link_signs_in(home: Path) -> None:
    port = free_port()
    (home / "config.toml").write_text(
        f'[console]\nenabled = true\nlisten = "127.0.0.1:{port}"\noperators = ["telegram:1"]\n',
        encoding="utf-8")
    serve = start_serve(home, args=("--demo",))
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_up(base)
        assert "console.started" in serve.output() and base in serve.output()
        assert _open(f"{base}/")[0] == 401
        made = console_cli(home, "link", "--as", "telegram:1")
        assert made.returncode == 0, made.stderr
        token = re.search(r"/signin\?token=([\w-]+)", made.stdout)
        assert token is not None and made.stdout.startswith(base), made.stdout
        status, headers, _ = _open(f"{base}/signin", data={"token": token.group(1)})
        assert status == 303, headers
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        status, _, body = _open(f"{base}/", cookie=cookie)
        page = json.loads(body)
        assert status == 200 and page["identity"] == "telegram:1"
        assert page["readiness"]["checks"]["store"]["ok"] is True
        assert page["lanes"]["running"] == 0 and page["lanes"]["global_cap"] >= 1
        listed = console_cli(home, "sessions", "--json")
        [session] = json.loads(listed.stdout)
        assert session["identity"] == "telegram:1"
        revoked = console_cli(home, "sessions", "revoke", session["id"])
        assert revoked.returncode == 0, revoked.stderr
        assert _open(f"{base}/", cookie=cookie)[0] == 401
        assert console_cli(home, "sessions", "revoke", session["id"]).returncode == 1
        # nobody else gets a link: not an operator, not an approver
        refused = console_cli(home, "link", "--as", "telegram:2")
        assert refused.returncode == 2 and "may not sign in" in refused.stderr
    finally:
        assert serve.stop() == 0, serve.output()


def test_a_non_loopback_listen_without_tls_is_refused(home: Path) -> None:
    (home / "config.toml").write_text(
        '[console]\nenabled = true\nlisten = "0.0.0.0:8788"\n', encoding="utf-8")
    run = geode(home, "serve")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "not a loopback address" in run.stderr and "public_url" in run.stderr
    # an https public_url (a TLS proxy in front) or the explicit switch lets it start
    for extra in ('public_url = "https://console.example.org"', "allow_insecure_http = true"):
        (home / "config.toml").write_text(
            f'[console]\nenabled = true\nlisten = "0.0.0.0:8788"\n{extra}\n', encoding="utf-8")
        run = geode(home, "sessions", "list")
        assert run.returncode == 0, run.stderr
