"""The console's security rules, each tested: one-time links (replayed, expired,
rate-limited), the session cookie, CSRF, no action by GET, what an identity may see and
decide, and every action audited with the signed-in identity."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bots.console import Identity
from bots.console.app import CSP, SIGNIN_FAILURES_PER_WINDOW
from bots.store import ApprovalRequests, ConsoleLinks, ConsoleSessions
from bots.store.console import LINK_TTL_S, MAX_LINKS_PER_WINDOW, ConsoleLinkLimitError
from geode.errors import ConfigError
from tests.bots.console.conftest import ALICE, BOB, OPERATOR, Console, open_request

pytestmark = pytest.mark.timeout(60)


async def test_a_link_signs_in_once_and_get_does_not_use_it(console: Console) -> None:
    token = await console.link(ALICE)
    # the link's page (what a chat client's preview fetches) only shows a button
    for _ in range(2):
        r = await console.client.get(f"/signin?token={token}")
        assert r.status == 200 and 'action="/signin"' in await r.text()
        assert not r.cookies
    r = await console.client.post("/signin", data={"token": token}, allow_redirects=False)
    assert r.status == 303 and r.headers["Location"] == "/"
    cookie = r.headers["Set-Cookie"]
    assert "geode_console=" in cookie and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie and "Secure" not in cookie
    # replayed: refused, and no second session
    other = await console.new_client()
    r = await other.post("/signin", data={"token": token}, allow_redirects=False)
    assert r.status == 403 and "used already" in await r.text()
    assert not r.cookies
    assert len(await ConsoleSessions(store=console.store).list()) == 1


async def test_an_expired_link_signs_nobody_in(console: Console) -> None:
    links = ConsoleLinks(store=console.store)
    old = int(time.time() * 1000) - (LINK_TTL_S + 1) * 1000
    token = await links.issue(ALICE.platform, ALICE.user_id, via="cli", now_ms=old)
    r = await console.client.post("/signin", data={"token": token}, allow_redirects=False)
    assert r.status == 403 and "expired" in await r.text()
    assert await ConsoleSessions(store=console.store).list() == []


async def test_links_and_failed_sign_ins_are_rate_limited(console: Console) -> None:
    for _ in range(MAX_LINKS_PER_WINDOW):
        await console.link(BOB)
    with pytest.raises(ConsoleLinkLimitError):
        await console.link(BOB)
    for _ in range(SIGNIN_FAILURES_PER_WINDOW):
        r = await console.client.post("/signin", data={"token": "guess"})
        assert r.status == 403
    # even a good link waits now: guessing is not a way in
    token = await console.link(ALICE)
    r = await console.client.post("/signin", data={"token": token}, allow_redirects=False)
    assert r.status == 429


async def test_only_operators_and_approvers_get_a_link(console: Console) -> None:
    with pytest.raises(ConfigError, match="may not sign in"):
        await console.link(Identity("telegram", "5"))  # allowed to talk, not to approve
    with pytest.raises(ConfigError, match="may not sign in"):
        await console.link(Identity("slack", "42"))  # an approver's id on another platform


async def test_pages_need_a_session_and_send_a_strict_csp(console: Console) -> None:
    for path in ("/", "/threads", "/approvals", "/usage"):
        r = await console.client.get(path)
        assert r.status == 401, path
    browser = await console.sign_in(ALICE)
    r = await browser.client.get("/")
    assert r.status == 200
    assert r.headers["Content-Security-Policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    body = await r.text()
    assert "<script>" not in body and "style=" not in body and "cdn" not in body.lower()


async def test_a_revoked_session_is_signed_out(console: Console) -> None:
    browser = await console.sign_in(ALICE)
    [session] = await ConsoleSessions(store=console.store).list()
    assert await ConsoleSessions(store=console.store).revoke(session.id)
    assert (await browser.client.get("/")).status == 401


async def test_the_cookie_is_secure_behind_https(console: Console) -> None:
    console.deps.base_url = "https://console.example.org"
    token = await console.link(ALICE)
    r = await console.client.post("/signin", data={"token": token}, allow_redirects=False)
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("__Host-geode_console=") and "Secure" in cookie


async def test_a_post_without_the_sessions_csrf_token_does_nothing(console: Console) -> None:
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    alice = await console.sign_in(ALICE)
    bob = await console.sign_in(BOB)
    bobs_token = await bob.csrf()
    for data in ({"decision": "approve"},
                 {"decision": "approve", "csrf": bobs_token},  # another session's token
                 {"decision": "approve", "csrf": "0" * 64}):
        r = await alice.client.post(f"/approvals/{rec.id}", data=data, allow_redirects=False)
        assert r.status == 403 and "CSRF" in await r.text()
    assert (await ApprovalRequests(store=console.store).get(rec.id)).status == "pending"  # type: ignore[union-attr]
    r = await alice.client.post("/signout", allow_redirects=False)
    assert r.status == 403  # signing out is an action too
    assert (await alice.client.get("/")).status == 200


async def test_get_never_acts(console: Console) -> None:
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    alice = await console.sign_in(ALICE)
    for path in (f"/approvals/{rec.id}?decision=approve", "/signout"):
        r = await alice.client.get(path, allow_redirects=False)
        assert r.status in (404, 405), path
    assert (await ApprovalRequests(store=console.store).get(rec.id)).status == "pending"  # type: ignore[union-attr]
    assert (await alice.client.get("/")).status == 200  # still signed in


async def test_an_approver_sees_and_decides_its_own_bindings_only(console: Console) -> None:
    mine = await open_request(console.store, channel="-1001", approvers=["42"])
    theirs = await open_request(console.store, channel="-1002", approvers=["77"], call="c2")
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/approvals")
    assert status == 200 and [a["id"] for a in page["pending"]] == [mine.id]
    token = await alice.csrf()
    r = await alice.client.post(f"/approvals/{theirs.id}",
                                data={"decision": "approve", "csrf": token})
    assert r.status == 404
    status, page = await alice.json(f"/threads/{theirs.thread_key}")
    assert status == 404
    status, page = await alice.json("/threads")
    assert [g["binding"] for g in page["groups"]] == ["telegram:-1001"]
    assert (await ApprovalRequests(store=console.store).get(theirs.id)).status == "pending"  # type: ignore[union-attr]


async def test_an_operator_sees_every_request_but_decides_none_it_is_not_asked(
        console: Console) -> None:
    rec = await open_request(console.store, channel="-1002", approvers=["77"])
    op = await console.sign_in(OPERATOR)
    status, page = await op.json("/approvals")
    assert status == 200
    assert [(a["id"], a["may_decide"]) for a in page["pending"]] == [(rec.id, False)]
    r = await op.client.post(f"/approvals/{rec.id}",
                             data={"decision": "approve", "csrf": await op.csrf()})
    assert r.status == 403
    assert (await ApprovalRequests(store=console.store).get(rec.id)).status == "pending"  # type: ignore[union-attr]


async def test_the_same_user_id_on_another_platform_decides_nothing(console: Console) -> None:
    console.settings.console.operators.append("slack:42")
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    slack42 = await console.sign_in(Identity("slack", "42"))
    r = await slack42.client.post(f"/approvals/{rec.id}",
                                  data={"decision": "approve", "csrf": await slack42.csrf()})
    assert r.status == 403
    assert (await ApprovalRequests(store=console.store).get(rec.id)).status == "pending"  # type: ignore[union-attr]


async def test_a_decision_is_taken_once_and_audited_with_the_identity(
        console: Console) -> None:
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    alice = await console.sign_in(ALICE)
    token = await alice.csrf()
    r = await alice.client.post(f"/approvals/{rec.id}",
                                data={"decision": "approve", "csrf": token},
                                headers={"Accept": "application/json"})
    body: dict[str, Any] = await r.json()
    assert r.status == 200 and body["applied"] and body["status"] == "approved"
    after = await ApprovalRequests(store=console.store).get(rec.id)
    assert after is not None
    assert (after.decided_by, after.decided_by_name) == ("42", "web console")
    # the second click (or the thread's /deny after it) changes nothing
    r = await alice.client.post(f"/approvals/{rec.id}",
                                data={"decision": "deny", "csrf": token},
                                headers={"Accept": "application/json"})
    assert r.status == 409 and (await r.json())["status"] == "approved"
    thread_side = await ApprovalRequests(store=console.store).decide(rec.id, approve=False,
                                                                      by="42")
    assert not thread_side.applied
    [session] = await ConsoleSessions(store=console.store).list()
    rows = await console.store.timeline.list(rec.session_id)
    decided = [r.payload for r in rows if r.kind == "console.approval"]
    assert [(p["by"], p["decision"], p["applied"], p["console_session"]) for p in decided] == [
        ("telegram:42", "approve", True, session.id), ("telegram:42", "deny", False, session.id)]
    audit = [r.kind for r in await console.store.timeline.list("console")]
    assert audit == ["console.signin", "console.approval", "console.approval"]


async def test_the_thread_deciding_first_wins(console: Console) -> None:
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    alice = await console.sign_in(ALICE)
    token = await alice.csrf()
    assert (await ApprovalRequests(store=console.store).decide(rec.id, approve=False,
                                                                by="42")).applied
    r = await alice.client.post(f"/approvals/{rec.id}",
                                data={"decision": "approve", "csrf": token},
                                headers={"Accept": "application/json"})
    assert r.status == 409 and (await r.json())["status"] == "denied"


async def test_a_removed_approver_loses_the_console_at_once(console: Console) -> None:
    alice = await console.sign_in(ALICE)
    console.settings.bindings[0].approvers.clear()
    r = await alice.client.get("/")
    assert r.status == 403


async def test_a_post_from_another_site_is_refused(console: Console) -> None:
    token = await console.link(ALICE)
    evil = {"Origin": "https://evil.example"}
    r = await console.client.post("/signin", data={"token": token}, headers=evil,
                                  allow_redirects=False)
    assert r.status == 403 and not r.cookies
    # the link was not used: the person can still sign in with it, from the console's page
    own = {"Origin": str(console.client.make_url("")).rstrip("/")}
    r = await console.client.post("/signin", data={"token": token}, headers=own,
                                  allow_redirects=False)
    assert r.status == 303
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    alice = await console.sign_in(ALICE)
    r = await alice.client.post(f"/approvals/{rec.id}", headers=evil,
                                data={"decision": "approve", "csrf": await alice.csrf()})
    assert r.status == 403
    assert (await ApprovalRequests(store=console.store).get(rec.id)).status == "pending"  # type: ignore[union-attr]


async def test_a_rewind_is_confirmed_in_its_thread_not_decided_here(console: Console) -> None:
    """/rewind's confirmation runs the rewind where it was asked; decided in the console it
    would be recorded as approved and never run, and the thread could not confirm it any more.
    The console shows it without buttons and refuses a forged POST, leaving it pending."""
    from bots.console.pages import CONFIRMED_IN_THREAD
    from bots.rewind_command import REWIND_TOOL

    assert REWIND_TOOL in CONFIRMED_IN_THREAD
    rec = await ApprovalRequests(store=console.store).open(
        session_id="telegram::-1001:10", turn_id="t1", call_id="rw1",
        thread_key="telegram::-1001:10", platform="telegram", workspace="", channel="-1001",
        thread_root="10", tool=REWIND_TOOL, args={"turns": 1, "seq": 3},
        summary="rewind 1 turn", requested_by="42", requested_by_name="Alice",
        approvers=["42"], timeout_s=300)
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/approvals")
    assert status == 200
    [shown] = [a for a in page["pending"] if a["id"] == rec.id]
    assert shown["may_decide"] is False
    token = await alice.csrf()
    r = await alice.client.post(f"/approvals/{rec.id}",
                                data={"decision": "approve", "csrf": token})
    assert r.status == 409 and "/approve" in await r.text()
    assert (await ApprovalRequests(store=console.store).get(rec.id)).status == "pending"  # type: ignore[union-attr]
