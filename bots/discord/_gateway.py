"""The discord.py client both halves of the connector share, and its gateway loop.

:class:`Link` is what the inbound half (:mod:`bots.discord.inbound`) and the client half
(:mod:`bots.discord.client`) both read once the connector has logged in: the discord.py
client, the bot's ids, and the channel -> parent cache that sending learns from too (a
thread the bot opens) and receiving reads (is this channel a thread of a bound one?).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import discord
import discord.gateway
import discord.http
import structlog
import yarl

__all__ = ["BUCKET_SWEEP_EVERY_S", "PACED", "Endpoints", "GatewayClient", "GlobalPace", "Link",
           "run_gateway"]

log = structlog.get_logger(__name__)


class GatewayClient(discord.Client):
    """discord.Client with the connector's hooks (ready, resumed, interactions)."""

    def __init__(self, *, on_up: Callable[[str], None],
                 on_interaction: Callable[[discord.Interaction[Any]], Awaitable[None]],
                 identify_delay_s: float, global_per_s: float = 0.0, **kw: Any) -> None:
        super().__init__(**kw)
        self._on_up = on_up
        self._on_interaction = on_interaction
        self._identify_delay_s = identify_delay_s
        _throttle_bucket_sweeps(self.http)
        #: the bot's global budget, taken by every request (see :class:`GlobalPace`)
        self.pace = GlobalPace(global_per_s)
        _pace_requests(self.http, self.pace)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial and self._identify_delay_s > 0:
            await asyncio.sleep(self._identify_delay_s)

    async def on_ready(self) -> None:
        self._on_up("ready")

    async def on_resumed(self) -> None:
        self._on_up("resumed")

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        await self._on_interaction(interaction)

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        log.exception("discord.handler_failed", handler=event_method)


@dataclass(eq=False, kw_only=True)
class Link:
    """The logged-in discord.py client and what the connector's halves learn about Discord.

    Set by ``DiscordConnector.connect`` (``client`` is None before the first login).
    """

    client: GatewayClient | None = None
    bot_id: str = ""
    username: str = ""
    app_id: str = ""
    #: the gateway said READY (or RESUMED) and has not failed for good since
    gateway_up: bool = False
    #: channel id -> parent channel id ("" = not a thread)
    parents: dict[str, str] = field(default_factory=dict)

    def http(self) -> GatewayClient:
        """The client, asserted connected (every caller runs after ``connect``)."""
        assert self.client is not None
        return self.client


#: the most often discord.py may sweep its rate-limit buckets for inactive ones
BUCKET_SWEEP_EVERY_S = 30.0


def _throttle_bucket_sweeps(http: Any, *, every_s: float = BUCKET_SWEEP_EVERY_S) -> None:
    """Let discord.py sweep its rate-limit bucket table at most every ``every_s`` seconds.

    Once it holds 256 buckets, discord.py scans the whole table for inactive ones (idle for
    300 s) each time it makes a new bucket. Every Discord thread is a channel with buckets
    of its own (send, edit, react), so a bot answering in many new threads scanned the whole
    table three times per reply, a cost growing with every thread (~0.4 ms of CPU per reply
    at 2,000 buckets, a few minutes of a busy server). Throttled, the table still loses its
    inactive buckets, at most ``every_s`` later than it would have.
    """
    sweep = getattr(http, "_try_clear_expired_ratelimits", None)
    if sweep is None:  # a discord.py without it: nothing to throttle
        return
    last = -every_s

    def throttled() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            sweep()

    http._try_clear_expired_ratelimits = throttled


#: :meth:`GlobalPace.take` ranks: a new message (or any other request) first, then edits,
#: then typing and the ack reaction (the turn runs beside it, never waiting for it)
SEND, EDIT, COSMETIC = 0, 1, 2
#: the share of a second's budget the cosmetic rank leaves to the others: 50 chats' acks
#: at once take at most a quarter, the rest goes to their threads and first words
COSMETIC_LEAVES = 3 / 4


class GlobalPace:
    """At most ``per_s`` requests in any second, for the whole bot (0: no limit), by rank,
    then in the order they asked within a rank (a stale draft edit queued before the final
    answer goes before it).

    Discord allows a bot 50 requests a second in all; discord.py paces each route's bucket
    by the headers of its answers, but learns of the global limit only from a 429 (and then
    holds every request), so many channels streaming edits at once would meet it. Ranks:
    while the budget is short, a thread's first message does not queue behind the edits of
    threads already streaming nor behind 50 chats' acks; typing and acks also leave three
    quarters of the budget to the others (:data:`COSMETIC_LEAVES`)."""

    def __init__(self, per_s: float) -> None:
        self.per_s = per_s
        self._sent: deque[float] = deque()  # monotonic times of the last second's requests
        #: per rank: its waiters are served first come, first served
        self._turns = (asyncio.Lock(), asyncio.Lock(), asyncio.Lock())
        self._waiting = [0, 0, 0]

    async def take(self, rank: int = SEND) -> None:
        """Wait for a slot of this second's budget (after the higher ranks' waiters), and
        take it."""
        if self.per_s <= 0:
            return
        keep = int(self.per_s * COSMETIC_LEAVES) if rank == COSMETIC else 0
        self._waiting[rank] += 1
        try:
            async with self._turns[rank]:
                while True:
                    now = time.monotonic()
                    while self._sent and now - self._sent[0] >= 1.0:
                        self._sent.popleft()
                    ahead = any(self._waiting[r] for r in range(rank))
                    if not ahead and len(self._sent) + keep < self.per_s:
                        self._sent.append(now)
                        return
                    free_at = 1.0 - (now - self._sent[0]) if self._sent else 0.0
                    # a higher rank's waiter takes the next slot: look again a slot later
                    await asyncio.sleep(max(free_at, 1.0 / self.per_s) if ahead else free_at)
        finally:
            self._waiting[rank] -= 1


#: set while a request that already took its slot runs (the connector's client takes it
#: before the request is shielded from cancellation: a draft edit cancelled while it waits
#: is never sent)
PACED: ContextVar[bool] = ContextVar("geode_discord_paced", default=False)


def _pace_requests(http: Any, pace: GlobalPace) -> None:
    """Every request of discord.py's HTTP client (sends, edits, reactions, reads of history:
    its one funnel) takes a slot of ``pace`` first, unless it took one already."""
    if pace.per_s <= 0:
        return
    request = http.request

    async def paced(*args: Any, **kwargs: Any) -> Any:
        if not PACED.get():
            await pace.take()
        return await request(*args, **kwargs)

    http.request = paced


class Endpoints:
    """discord.py's API and gateway addresses, pointed at the configured ones.

    discord.py reads both from class attributes (process-wide): one Discord connector per
    process, restored on disconnect.
    """

    def __init__(self) -> None:
        self._saved: tuple[str, Any] | None = None

    def point(self, *, api_base: str, gateway_url: str) -> None:
        route, ws = discord.http.Route, discord.gateway.DiscordWebSocket
        if self._saved is None:  # a retried connect keeps the originals saved
            self._saved = (route.BASE, ws.DEFAULT_GATEWAY)
        route.BASE = api_base.rstrip("/")
        ws.DEFAULT_GATEWAY = yarl.URL(gateway_url)

    def restore(self) -> None:
        if self._saved is not None:
            discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = (
                self._saved)
            self._saved = None


async def run_gateway(client: GatewayClient, *, token_env: str) -> None:
    """Run discord.py's gateway loop (it RESUMEs / re-IDENTIFYs by itself); return when it
    gave up for good (a rejected token at IDENTIFY, a missing intent), which it logs."""
    failures = 0
    while not client.is_closed():
        try:
            await client.connect(reconnect=True)
            return
        except discord.PrivilegedIntentsRequired:
            log.error("discord.intent_missing", fix="Developer Portal -> Bot -> enable "
                      "MESSAGE CONTENT INTENT, then restart geode serve")
            return
        except discord.ConnectionClosed as exc:
            if exc.code == 4004:
                log.error("discord.auth_failed", token_env=token_env)
                return
            failures += 1
        except Exception as exc:
            failures += 1
            log.warning("discord.gateway_failed", error=repr(exc))
        if client.is_closed():
            return
        # discord.py closes itself on a fatal close code; a closed client cannot
        # reconnect, so a restart of the connector is the operator's call.
        await asyncio.sleep(min(60.0, 0.5 * 2 ** min(failures, 7)) * (0.5 + random.random()))
