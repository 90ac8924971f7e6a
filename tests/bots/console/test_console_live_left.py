"""A browser that leaves a thread page (a navigation, a closed tab) before its live stream
has begun ends the stream quietly: no error in the log, no feed left polling. Chromium did
this in the console's browser test, and the serve log had a traceback."""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.http_writer import StreamWriter
from aiohttp.test_utils import make_mocked_request

from bots.console import live
from bots.console.access import Access
from bots.console.app import ACCESS, DEPS_KEY, IDENTITY
from tests.bots.console.conftest import ALICE, Console
from tests.bots.console.test_console_pages import _thread

pytestmark = pytest.mark.timeout(30)


async def test_a_stream_the_browser_left_before_it_began_ends_quietly(
        console: Console) -> None:
    sid = await _thread(console, "-1001", "10", "notes")
    app = web.Application()
    app[DEPS_KEY] = console.deps
    app[live.FEEDS_KEY] = feeds = live.ThreadFeeds()
    transport = mock.Mock()
    transport.is_closing.return_value = True  # the browser is gone
    protocol = mock.Mock(transport=transport)
    writer = StreamWriter(protocol, asyncio.get_running_loop())
    request = make_mocked_request("GET", f"/threads/{sid}/events", app=app,
                                  match_info={"key": sid}, transport=transport,
                                  protocol=protocol, writer=writer)
    request[IDENTITY] = ALICE
    request[ACCESS] = Access.build(console.settings.console.operators,
                                   console.settings.bindings)
    response = await asyncio.wait_for(live.thread_events(request), 10)
    assert isinstance(response, web.StreamResponse)
    assert feeds.feeds == {}  # nothing polls for a viewer that never came
