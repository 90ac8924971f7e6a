"""Signing in with a one-time link, and out.

``GET /signin?token=...`` only shows a button; ``POST /signin`` uses the link (once, within
its ten minutes) and sets the session cookie. Failed attempts are limited per address
(:data:`~bots.console.app.SIGNIN_FAILURES_PER_WINDOW`), so a link cannot be guessed by
trying.
"""

from __future__ import annotations

from aiohttp import web

from bots.console.access import Identity
from bots.console.app import (
    DEPS_KEY,
    IDENTITY,
    failed,
    failures_left,
    refuse,
    respond,
    see_other,
    session_of,
)
from bots.store import ConsoleLinks, ConsoleSessions
from bots.store.console import SESSION_TTL_S

__all__ = ["signin", "signin_page", "signout"]

_REFUSED = {
    "unknown": "This sign-in link is not valid.",
    "used": "This sign-in link was used already: each link signs in once. Ask for a new one.",
    "expired": "This sign-in link expired (links are good for 10 minutes). Ask for a new one.",
}


async def signin_page(request: web.Request) -> web.Response:
    """The link's page: a button that signs in (GET never uses the link)."""
    return respond(request, "signin.html", {"title": "Sign in",
                                            "token": request.query.get("token", "")})


async def signin(request: web.Request) -> web.Response:
    deps = request.app[DEPS_KEY]
    remote = request.remote or ""
    if not failures_left(deps, remote):
        return refuse(request, 429, "Too many failed sign-ins from this address: wait a few "
                                    "minutes.")
    form = await request.post()
    token = str(form.get("token", ""))
    outcome = await ConsoleLinks(store=deps.store).redeem(
        token, remote=remote, user_agent=request.headers.get("User-Agent", ""),
        now_ms=deps.now_ms()) if token else "unknown"
    if isinstance(outcome, str):
        failed(deps, remote)
        return refuse(request, 403, _REFUSED[outcome])
    session, cookie = outcome
    who = Identity(platform=session.platform, user_id=session.user_id)
    if not (await deps.access()).may_sign_in(who):
        # rights are read now, not when the link was made: one removed since has none
        await ConsoleSessions(store=deps.store).revoke(session.id)
        return refuse(request, 403, f"{who} is not an operator or approver.")
    await deps.audit(who, session, "signin", remote=remote)
    response = see_other("/")
    response.set_cookie(deps.cookie_name, cookie, max_age=SESSION_TTL_S, path="/",
                        httponly=True, samesite="Strict", secure=deps.secure)
    return response


async def signout(request: web.Request) -> web.Response:
    deps = request.app[DEPS_KEY]
    session = session_of(request)
    await ConsoleSessions(store=deps.store).revoke(session.id)
    await deps.audit(request[IDENTITY], session, "signout")
    response = see_other("/signin")
    response.del_cookie(deps.cookie_name, path="/")
    return response
