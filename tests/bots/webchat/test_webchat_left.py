"""A browser that leaves a web-chat thread (a navigation, a reload) before the thread's live
stream has begun ends the stream quietly. Chromium did this in the web chat's browser test after
a restart, and aiohttp logged a traceback for the headers it could not write any more."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.http_writer import StreamWriter
from aiohttp.test_utils import make_mocked_request

from bots.console.access import Access
from bots.console.app import ACCESS, IDENTITY
from bots.webchat import routes
from tests.bots.webchat.conftest import ALICE, BINDINGS, ChatStack

pytestmark = pytest.mark.timeout(60)


async def test_a_stream_the_browser_left_before_it_began_ends_quietly(make_chat: Any) -> None:
    stack: ChatStack = make_chat()
    await stack.start()
    alice = await stack.sign_in(ALICE)
    url = await alice.open_thread("hello there")
    _, _, channel, root = url.split("/")
    transport = mock.Mock()
    transport.is_closing.return_value = True  # the browser is gone
    protocol = mock.Mock(transport=transport)
    writer = StreamWriter(protocol, asyncio.get_running_loop())
    request = make_mocked_request("GET", f"{url}/events", app=alice.client.app,
                                  match_info={"channel": channel, "root": root},
                                  transport=transport, protocol=protocol, writer=writer)
    request[IDENTITY] = ALICE
    request[ACCESS] = Access.build([], BINDINGS)
    response = await asyncio.wait_for(routes.events(request), 10)
    assert isinstance(response, web.StreamResponse)
