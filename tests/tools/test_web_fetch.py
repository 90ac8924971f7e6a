"""web_fetch: SSRF guard (every hop), exact allow-list override, caps, text extraction.

A fake aiohttp server runs on loopback; the autouse ``loopback_only`` guard in conftest fails
any test that would connect to a non-loopback address, so the refusals below are checked to
happen before any connection.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from geode.tools.base import ToolContext, ToolDeps
from geode.tools.builtin import web_fetch
from geode.tools.builtin.web_fetch import check_address, html_to_text
from geode.tools.builtin.web_search import UNTRUSTED_NOTE
from geode.tools.errors import ToolFailure

PAGE = """<!doctype html><html><head><title>Fake  page</title>
<style>body { color: red }</style><script>var secret = "js";</script></head>
<body><h1>Hello</h1><p>First &amp; second</p><ul><li>one</li><li>two</li></ul></body></html>"""


@dataclass
class Fake:
    port: int
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Host header)

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"http://{self.hostport}{path}"


async def _start(redirect_to: dict[str, str]) -> tuple[web.AppRunner, Fake]:
    fake = Fake(port=0)

    async def handle(request: web.Request) -> web.StreamResponse:
        fake.requests.append((request.path, request.headers.get("Host", "")))
        if request.path in redirect_to:
            raise web.HTTPFound(redirect_to[request.path])
        if request.path == "/page":
            return web.Response(text=PAGE, content_type="text/html")
        if request.path == "/big":
            return web.Response(text="z" * 200_000, content_type="text/plain")
        if request.path == "/png":
            return web.Response(body=b"\x89PNG\r\n\x1a\n" + b"\x00" * 50, content_type="image/png")
        if request.path == "/json":
            return web.json_response({"ok": True})
        return web.Response(status=404, text="not here")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.port = runner.addresses[0][1]
    return runner, fake


@pytest.fixture
async def other() -> AsyncIterator[Fake]:
    """A second loopback server that no redirect may reach."""
    runner, fake = await _start({})
    yield fake
    await runner.cleanup()


@pytest.fixture
async def fake(other: Fake) -> AsyncIterator[Fake]:
    runner, fake = await _start(
        {
            "/to-metadata": "http://169.254.169.254/latest/meta-data/",
            "/to-other": other.url("/page"),
            "/to-relative": "/page",
            "/to-file": "file:///etc/passwd",
            "/loop": "/loop",
        }
    )
    yield fake
    await runner.cleanup()


def fetched(out: object) -> str:
    """The fetched text inside web_fetch's untrusted-content fence (which it checks)."""
    assert isinstance(out, str)
    note, fence, rest = out.partition("\n<untrusted source=\"web_fetch:")
    assert note == UNTRUSTED_NOTE and fence, out[:200]
    inner = rest.split('">\n', 1)[1]
    assert inner.endswith("\n</untrusted>")
    return inner.removesuffix("\n</untrusted>")


def _ctx(workspace: Path, **deps: Any) -> ToolContext:
    return ToolContext(
        session_id="s", turn_id="t", call_id="c", workspace=workspace, mode="repl",
        deps=ToolDeps(**deps),
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:{port}/page", "127.0.0.1 is a loopback address"),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[::1]:{port}/", "::1 is a loopback address"),
        ("http://localhost:{port}/page", "localhost resolves to 127.0.0.1, a loopback address"),
        (
            "http://[::ffff:169.254.169.254]/",
            "::ffff:169.254.169.254 is a link-local (IPv4 169.254.169.254 embedded in IPv6)",
        ),
        ("http://0x7f000001:{port}/", "resolves to 127.0.0.1, a loopback address"),
        ("http://100.64.0.1/", "shared (CGNAT)"),
    ],
)
async def test_internal_addresses_refused_by_default(
    call: Any, workspace: Path, fake: Fake, url: str, reason: str
) -> None:
    with pytest.raises(ToolFailure, match="refused") as info:
        await call(web_fetch, _ctx(workspace), url=url.format(port=fake.port))
    assert reason in str(info.value)
    assert fake.requests == []  # refused before connecting


async def test_allowed_host_is_fetched_and_html_reduced(
    call: Any, workspace: Path, fake: Fake
) -> None:
    out = fetched(await call(
        web_fetch, _ctx(workspace, allow_private_hosts=[fake.hostport]), url=fake.url("/page")
    ))
    assert out == (
        f"URL: {fake.url('/page')}\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\n\n"
        "# Fake page\n\nHello\n\nFirst & second\n\n- one\n\n- two"
    )
    assert fake.requests == [("/page", fake.hostport)]


async def test_redirect_to_metadata_refused(
    call: Any, workspace: Path, fake: Fake, loopback_only: list[Any]
) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport])
    with pytest.raises(ToolFailure, match=re.escape("169.254.169.254 is a link-local address")):
        await call(web_fetch, ctx, url=fake.url("/to-metadata"))
    assert fake.requests == [("/to-metadata", fake.hostport)]
    assert loopback_only == []  # never even tried to connect there


async def test_allow_list_is_exact_host_and_port(
    call: Any, workspace: Path, fake: Fake, other: Fake
) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport])
    with pytest.raises(ToolFailure, match=re.escape("127.0.0.1 is a loopback address")):
        await call(web_fetch, ctx, url=fake.url("/to-other"))
    assert other.requests == []
    # the same host under its name is another key: not allowed either
    with pytest.raises(ToolFailure, match=re.escape("localhost resolves to 127.0.0.1")):
        await call(web_fetch, ctx, url=f"http://localhost:{fake.port}/page")


async def test_relative_redirect_followed_and_rechecked(
    call: Any, workspace: Path, fake: Fake
) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport])
    out = fetched(await call(web_fetch, ctx, url=fake.url("/to-relative")))
    assert isinstance(out, str)
    assert out.startswith(f"URL: {fake.url('/page')}\nStatus: 200 OK")
    assert [p for p, _ in fake.requests] == ["/to-relative", "/page"]


async def test_redirect_scheme_and_loop_limits(call: Any, workspace: Path, fake: Fake) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport])
    with pytest.raises(ToolFailure, match="only http and https"):
        await call(web_fetch, ctx, url=fake.url("/to-file"))
    fake.requests.clear()
    with pytest.raises(ToolFailure, match="too many redirects"):
        await call(web_fetch, ctx, url=fake.url("/loop"))
    assert len(fake.requests) == 6  # the first request and 5 redirects, no more


async def test_name_connects_to_the_checked_address_with_its_host_header(
    call: Any, workspace: Path, fake: Fake
) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[f"localhost:{fake.port}"])
    out = fetched(await call(web_fetch, ctx, url=f"http://localhost:{fake.port}/json"))
    assert isinstance(out, str)
    assert out.endswith('\n\n{"ok": true}')
    # the connection went to the resolved IP, the Host header kept the name
    assert fake.requests == [("/json", f"localhost:{fake.port}")]


async def test_size_cap_and_text_cap(call: Any, workspace: Path, fake: Fake) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport], web_fetch_max_bytes=1_000)
    out = fetched(await call(web_fetch, ctx, url=fake.url("/big")))
    assert isinstance(out, str)
    head, body = out.split("\n\n", 1)
    assert head.endswith("[body cut at 1000 bytes]")
    assert body == "z" * 1_000
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport])
    out = fetched(await call(web_fetch, ctx, url=fake.url("/big"), max_chars=500))
    assert isinstance(out, str)
    assert out.endswith("z" * 500 + "\n[... truncated 199500 chars ...]")


async def test_binary_content_not_shown(call: Any, workspace: Path, fake: Fake) -> None:
    ctx = _ctx(workspace, allow_private_hosts=[fake.hostport])
    out = fetched(await call(web_fetch, ctx, url=fake.url("/png")))
    assert isinstance(out, str)
    assert out.endswith("[image/png content, 58 bytes; not shown as text]")


def test_address_classification() -> None:
    refused = {
        "0.0.0.0": "unspecified",
        "127.0.0.2": "loopback",
        "10.1.2.3": "private",
        "172.16.5.5": "private",
        "192.168.1.1": "private",
        "169.254.169.254": "link-local",
        "100.64.0.1": "shared (CGNAT)",
        "224.0.0.1": "multicast",
        "::": "unspecified",
        "::1": "loopback",
        "fd00::1": "private",
        "fe80::1": "link-local",
        "ff02::1": "multicast",
    }
    for addr, why in refused.items():
        assert check_address(ipaddress.ip_address(addr)) == why, addr
    mapped = check_address(ipaddress.ip_address("::ffff:10.0.0.1"))
    assert mapped is not None and mapped.startswith("private")
    nat64 = check_address(ipaddress.ip_address("64:ff9b::a9fe:a9fe"))
    assert nat64 is not None and nat64.startswith("link-local")
    for public in ("93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"):
        assert check_address(ipaddress.ip_address(public)) is None


def test_html_to_text_drops_scripts() -> None:
    text = html_to_text(PAGE)
    assert "secret" not in text and "color" not in text
    assert text.startswith("# Fake page")


def test_resource_key_and_safety() -> None:
    ctx = _ctx(Path("/tmp"))
    assert web_fetch.keys_for({"url": "https://Example.com:8443/x"}, ctx) == ["host:example.com"]
    assert web_fetch.safety == "external"


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the name ``localhost`` (not for 127.0.0.1)."""
    require_openssl = shutil.which("openssl") is not None
    if not require_openssl:
        if os.environ.get("CI") == "true":
            pytest.fail("openssl is required under CI=true (apt-get install openssl)")
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_pins_the_ip_and_verifies_the_name(
    call: Any, workspace: Path, tls_cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tls_cert
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Host", ""))
        return web.Response(text="tls ok")

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx).start()
    port = runner.addresses[0][1]
    # trust our certificate instead of the public CAs; everything else is the real client
    real_client = httpx.AsyncClient
    trust = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: real_client(verify=trust, **kw))
    ctx = _ctx(workspace, allow_private_hosts=[f"localhost:{port}", f"127.0.0.1:{port}"])
    try:
        # connected to the checked IP, certificate verified against the name "localhost"
        out = fetched(await call(web_fetch, ctx, url=f"https://localhost:{port}/"))
        assert isinstance(out, str) and out.endswith("\n\ntls ok")
        assert seen == [f"localhost:{port}"]
        # the certificate does not name the IP: verification is real, not switched off
        with pytest.raises(ToolFailure, match="CERTIFICATE_VERIFY_FAILED"):
            await call(web_fetch, ctx, url=f"https://127.0.0.1:{port}/")
        assert seen == [f"localhost:{port}"]
    finally:
        await runner.cleanup()
