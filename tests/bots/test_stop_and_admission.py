"""``/stop`` and ``geode queue drop`` through the harness port, with one typed event stream
back: the harness tells the layer the turn runs (``TurnStarted``, its first event), ``/stop``
reaches the running turn through ``stop_turn``, and a queued message is claimed by the turn's
admission (``run_turn(admit=...)``) once it holds its lanes, before its session opens (the
port's side: ``tests/daemon/test_port.py``)."""

from __future__ import annotations

from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, finals


async def test_stop_while_the_session_opens_stops_the_turn_at_its_first_event(
        make_stack, fake) -> None:
    # /stop lands after the turn showed itself (👀, progress) and before the harness said it
    # runs: nothing can be stopped yet, so the turn is stopped by its first event, the model
    # never asked
    provider = ScriptedProvider(["should not be said"])
    stack = make_stack(provider=provider)

    def fault(point: str) -> None:
        if point == "progress_started":
            assert stack.connector is not None and stack.connector.layer is not None
            for active in stack.connector.layer.active.values():
                assert not active.running
                active.cancel()

    stack.fault = fault
    await stack.start()
    fake.user_says(CHAT, "@geode_bot a long job", from_user=42)
    await fake.wait_until(lambda: finals(fake, "⏹ Stopped."), within=15)
    assert provider.calls == []
    assert not finals(fake, "should not be said")
