"""The Discord connector is ready (``/readyz``) only while its gateway session can deliver:
not before READY (discord.py first waits ``guild_ready_timeout`` for the guilds, and a
message sent then is only found by the catch-up READY starts), and not after the gateway
gave up for good (a token rejected at IDENTIFY: nothing will ever arrive)."""

from __future__ import annotations

import asyncio

from _discord_stack import dfake, make_dstack  # noqa: F401  (fixtures)


async def test_not_ready_before_the_gateway_is_ready(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    dfake.hold_gateway()  # the handshake waits (as discord.py waits for the guilds)
    connector = await stack.start(wait_ready=False)
    assert connector.layer is not None and connector.layer.processing
    assert not connector.ready  # started, but no READY yet
    dfake.release_gateway()
    await dfake.wait_for(lambda: connector.ready, timeout=10)
    assert connector.catch_ups >= 1


async def test_not_ready_once_the_gateway_rejects_the_token(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    connector = await stack.start()
    assert connector.ready
    dfake.token = "rotated-token"  # the operator reset the token in the Developer Portal
    await dfake.invalidate_session()  # the bot must IDENTIFY again: 4004
    for _ in range(500):
        if not connector.ready:
            break
        await asyncio.sleep(0.02)
    assert not connector.ready
