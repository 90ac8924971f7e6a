"""The console's aiohttp application: security headers, sign-in, the session check, CSRF,
and how a page answers (HTML from a Jinja2 template, or the same data as JSON).

Rules every route follows:

* **No action by GET.** A sign-in link opens a page with a button; the POST uses the link
  (a chat client's link preview fetching it uses nothing).
* **A CSRF token on every POST** but the sign-in itself (which carries the link's secret):
  the token is an HMAC of the session's cookie token, so it is the session's own and needs
  no storage; a POST without it, or with another session's, is refused (403).
* **The session cookie** is HttpOnly and SameSite=Strict, Secure (and ``__Host-``
  prefixed) when ``public_url`` is https. It holds a random token whose SHA-256 is the
  session's row (``bots.store.console``); revoked or expired rows sign nobody in.
* **A strict Content-Security-Policy**: scripts and styles from this server only, no
  inline script or style, no frames, no other origin.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from aiohttp import web

from bots.console.access import Access, Identity

if TYPE_CHECKING:
    import jinja2

    from bots.store import ConsoleSession
    from geode.settings import BindingSettings, Settings
    from geode.store import Store

__all__ = [
    "CSP",
    "ConsoleDeps",
    "RunningTurn",
    "csrf_token",
    "respond",
    "see_other",
]

log = structlog.get_logger(__name__)

_HERE = Path(__file__).resolve().parent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # the sign-in page's URL holds the link's token: never sent on as a Referer
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: routes that answer without a session
_PUBLIC = frozenset({"/signin", "/static/console.js", "/static/console.css"})
#: failed sign-in attempts one address may make per window, before it waits
SIGNIN_FAILURES_PER_WINDOW = 10
SIGNIN_WINDOW_S = 600.0

Readiness = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]


class RunningTurn(Protocol):
    """What the thread page reads of a running turn and how Stop ends it: the chat layer's
    ``bots.commands.ActiveTurn`` (the registry ``/stop`` uses), named here by shape so the
    console imports nothing of the layer."""

    session_id: str
    started: float
    loop_turn_id: str
    stop_requested: bool
    waiting: str
    queued_ahead: int | None
    display_wait: bool

    #: the harness said the turn started (before: queued, or its session opening)
    running: bool

    @property
    def heartbeat(self) -> Callable[[], str] | None: ...

    def cancel(self) -> None: ...


@dataclass(kw_only=True)
class ConsoleDeps:
    """What the console's routes use: the store, the configuration, how to reach it."""

    store: Store
    settings: Settings
    #: the console's own address, as people reach it (sign-in links, redirects)
    base_url: str
    #: the daemon's readiness checks (the Overview shows them); None outside serve
    readiness: Readiness | None = None
    #: the lanes in use now (running, waiting, ...); None outside serve
    lanes: Callable[[], dict[str, int]] | None = None
    #: the turn running (or waiting for a lane) in a thread of this process, by thread key
    #: (the registry ``/stop`` uses); None outside serve
    running: Callable[[str], RunningTurn | None] | None = None
    clock: Callable[[], float] = time.time
    #: failed sign-in attempts by remote address (monotonic times)
    failures: dict[str, deque[float]] = field(default_factory=dict)

    @property
    def secure(self) -> bool:
        return self.base_url.startswith("https://")

    @property
    def cookie_name(self) -> str:
        return "__Host-geode_console" if self.secure else "geode_console"

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def bindings(self) -> list[BindingSettings]:
        """Configured bindings and the stored ones (``geode bindings add``), as the layer
        reads them: config first."""
        from bots.store import StoredBindings

        return [*self.settings.bindings, *await StoredBindings(store=self.store).list()]

    async def access(self) -> Access:
        return Access.build(self.settings.console.operators, await self.bindings())

    async def audit(self, who: Identity, session: ConsoleSession | None, action: str,
                    *, session_id: str = "", **payload: Any) -> None:
        """One console action in the audit log and the timeline, with the signed-in
        identity: under the ``console`` timeline (``geode sessions timeline console``),
        and under the chat session it acted on, when there is one."""
        row = {"action": action, "by": str(who),
               "console_session": session.id if session else "", **payload}
        log.info("console.action", **row)
        for sid in ("console", session_id) if session_id else ("console",):
            await self.store.timeline.append(session_id=sid, turn_id="",
                                             kind=f"console.{action}", payload=row)


def csrf_token(cookie_token: str) -> str:
    """The CSRF token of a session: derived from its cookie token, so it is the session's
    own and a page of another session cannot post with it."""
    return hmac.new(cookie_token.encode(), b"geode-console-csrf", hashlib.sha256).hexdigest()


def wants_json(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def jinja_env() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True, undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = _when
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    return env


def _when(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime):
        at = value if value.tzinfo else value.replace(tzinfo=UTC)
    else:
        at = datetime.fromtimestamp(float(value) / 1000, UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


ENV_KEY = web.AppKey("jinja", object)
DEPS_KEY = web.AppKey("deps", ConsoleDeps)
#: what the session check found, for the route that runs after it
IDENTITY = web.RequestKey("identity", Identity)
ACCESS = web.RequestKey("access", Access)
SESSION = web.RequestKey("console_session", object)
CSRF = web.RequestKey("csrf", str)


def respond(request: web.Request, template: str, data: dict[str, Any], *,
            status: int = 200) -> web.Response:
    """The page: ``data`` as JSON when the client asks for it (``Accept:
    application/json``), else rendered with ``template``."""
    if wants_json(request):
        return web.json_response(data, status=status,
                                 dumps=lambda v: json.dumps(v, default=str))
    env: Any = request.app[ENV_KEY]
    who = request.get(IDENTITY)
    html = env.get_template(template).render(
        **data, me=str(who) if who else "", csrf=request.get(CSRF, ""),
        path=request.path)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def see_other(location: str) -> web.Response:
    """A redirect after a POST (303: the browser GETs ``location``)."""
    return web.Response(status=303, headers={"Location": location})


def refuse(request: web.Request, status: int, message: str) -> web.Response:
    return respond(request, "message.html", {"error": message, "title": "Not allowed"},
                   status=status)


@web.middleware
async def _headers(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                   ) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    if isinstance(response, web.HTTPException) and response.status >= 400:
        raise response
    return response


@web.middleware
async def _session(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                   ) -> web.StreamResponse:
    """Every route but the public ones needs an active session of an identity that may
    still sign in; every POST among them needs the session's CSRF token. A POST a browser
    sends from another site (its ``Origin``) is refused first, the sign-in's too: a page
    elsewhere must not sign a visitor in as someone else."""
    deps = request.app[DEPS_KEY]
    if request.method == "POST" and not _same_origin(request, deps):
        log.warning("console.cross_origin_refused", origin=request.headers.get("Origin"),
                    path=request.path)
        return refuse(request, 403, "This form was sent from another site.")
    if request.path in _PUBLIC:
        return await handler(request)
    token = request.cookies.get(deps.cookie_name, "")
    from bots.store import ConsoleSessions

    session = (await ConsoleSessions(store=deps.store).by_token(token, now_ms=deps.now_ms())
               if token else None)
    if session is None:
        return respond(request, "message.html", {
            "title": "Sign in", "error": "Not signed in (or the session ended). Run "
            "`geode console link --as PLATFORM:USER_ID` on the host, and open the link."},
            status=401)
    who = Identity(platform=session.platform, user_id=session.user_id)
    access = await deps.access()
    if not access.may_sign_in(who):
        return refuse(request, 403, f"{who} is no longer an operator or approver.")
    request[IDENTITY] = who
    request[SESSION] = session
    request[ACCESS] = access
    request[CSRF] = csrf_token(token)
    if request.method not in ("GET", "HEAD"):
        form = await request.post() if request.content_type.startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")) else {}
        given = str(form.get("csrf") or request.headers.get("X-CSRF-Token", ""))
        if not hmac.compare_digest(given, request[CSRF]):
            log.warning("console.csrf_refused", by=str(who), path=request.path)
            return refuse(request, 403, "Missing or wrong CSRF token: reload the page.")
    return await handler(request)


def _same_origin(request: web.Request, deps: ConsoleDeps) -> bool:
    """Whether a POST came from the console's own pages (a browser names the page's origin;
    a client that sends none, such as a script with its cookie, is not a browser attack)."""
    from urllib.parse import urlsplit

    origin = request.headers.get("Origin")
    if origin is None:
        return True
    if origin == "null":
        # Our pages' Referrer-Policy (no-referrer) makes a browser send "Origin: null" with
        # their own forms; its Fetch Metadata still tells whether the form was ours (a
        # browser that sends neither is refused)
        return request.headers.get("Sec-Fetch-Site") == "same-origin"
    netloc = urlsplit(origin).netloc
    return bool(netloc) and netloc in {request.host, urlsplit(deps.base_url).netloc}


def failures_left(deps: ConsoleDeps, remote: str) -> bool:
    """Whether ``remote`` may try another sign-in (rate limit of failed attempts)."""
    now = time.monotonic()
    seen = deps.failures.setdefault(remote, deque())
    while seen and seen[0] < now - SIGNIN_WINDOW_S:
        seen.popleft()
    return len(seen) < SIGNIN_FAILURES_PER_WINDOW


def failed(deps: ConsoleDeps, remote: str) -> None:
    deps.failures.setdefault(remote, deque()).append(time.monotonic())


def security() -> list[Any]:
    """The middlewares every route runs behind: headers, then the session and CSRF check."""
    return [_headers, _session]


def session_of(request: web.Request) -> ConsoleSession:
    """The signed-in session of a route behind the session check."""
    from bots.store import ConsoleSession

    session = request[SESSION]
    assert isinstance(session, ConsoleSession)
    return session
