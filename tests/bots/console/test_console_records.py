"""The console's records on SQLite and PostgreSQL: a link signs in once even when two
requests race for it; sessions expire and are revoked; only token hashes are stored."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from bots.store import ConsoleLinks, ConsoleSessions
from bots.store.console import KEEP_ENDED_S, SESSION_TTL_S
from geode.store import Store


async def test_two_requests_racing_for_one_link_make_one_session(store: Store) -> None:
    links = ConsoleLinks(store=store)
    token = await links.issue("telegram", "42", via="cli")
    outcomes = await asyncio.gather(*(links.redeem(token) for _ in range(4)))
    won = [o for o in outcomes if not isinstance(o, str)]
    assert len(won) == 1 and sorted(o for o in outcomes if isinstance(o, str)) == ["used"] * 3
    [session] = await ConsoleSessions(store=store).list()
    assert session.identity == "telegram:42"
    assert await links.redeem("no-such-token") == "unknown"


async def test_sessions_expire_and_are_revoked(store: Store) -> None:
    links, sessions = ConsoleLinks(store=store), ConsoleSessions(store=store)
    outcome = await links.redeem(await links.issue("telegram", "42", via="cli"), now_ms=1000)
    assert not isinstance(outcome, str)
    session, cookie = outcome
    assert (await sessions.by_token(cookie, now_ms=2000)) == session
    assert await sessions.by_token(cookie, now_ms=1000 + SESSION_TTL_S * 1000) is None
    assert await sessions.list(now_ms=2000) == [session]
    assert await sessions.revoke(session.id, now_ms=3000)
    assert not await sessions.revoke(session.id)  # once
    assert await sessions.by_token(cookie, now_ms=4000) is None
    assert await sessions.list(now_ms=4000) == []
    [ended] = await sessions.list(include_ended=True, now_ms=4000)
    assert ended.revoked_at == 3000


async def test_the_store_keeps_no_token(store: Store) -> None:
    links = ConsoleLinks(store=store)
    token = await links.issue("telegram", "42", via="cli")
    outcome = await links.redeem(token)
    assert not isinstance(outcome, str)
    _session, cookie = outcome
    async with store.read() as conn:
        rows = [str(r) for t in ("console_links", "console_sessions")
                for r in (await conn.execute(text(f"SELECT * FROM {t}"))).all()]
    assert rows and not any(token in r or cookie in r for r in rows)


async def test_ended_sessions_and_spent_links_are_pruned_after_a_while(store: Store) -> None:
    links, sessions = ConsoleLinks(store=store), ConsoleSessions(store=store)
    outcome = await links.redeem(await links.issue("telegram", "42", via="cli", now_ms=0),
                                 now_ms=1)
    assert not isinstance(outcome, str)
    await links.issue("telegram", "42", via="cli", now_ms=2)  # never used
    fresh = await links.issue("telegram", "42", via="cli", now_ms=KEEP_ENDED_S * 1000)
    assert await sessions.prune(now_ms=KEEP_ENDED_S * 1000) == 0  # not old enough yet
    later = (KEEP_ENDED_S + SESSION_TTL_S) * 1000 + 2000
    assert await sessions.prune(now_ms=later) == 3  # the session and both old links
    assert await sessions.list(include_ended=True, now_ms=later) == []
    assert not isinstance(await links.redeem(fresh, now_ms=KEEP_ENDED_S * 1000 + 1), str)
