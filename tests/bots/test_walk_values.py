"""Facts a chat turn hands on as values instead of deriving them again at each step: the
event's thread key, the binding's session overrides (made once per binding, again when the
binding changes), the turn result's ``ok``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bots.events import InboundEvent
from bots.turn import Accept, PreparePhase
from geode.loop import TerminationReason, TurnResult
from geode.settings import BindingSettings


def _event(**kw: Any) -> InboundEvent:
    base: dict[str, Any] = {"platform": "telegram", "workspace": "123", "channel": "-100",
                            "thread_root": "7", "message_id": "7", "sender": "42",
                            "dedupe_key": "k7", "text": "hi"}
    return InboundEvent(**{**base, **kw})


def test_an_event_carries_its_thread_key_as_a_value() -> None:
    ev = _event()
    # stored on the value as it is made: reading it calls nothing
    assert vars(ev)["thread_key"] == "telegram:123:-100:7" and vars(ev)["starts_thread"]
    moved = ev.with_thread("3")
    assert moved.thread_key == "telegram:123:-100:3" and not moved.starts_thread
    follow = replace(ev, message_id="8")
    assert follow.thread_key == ev.thread_key and not follow.starts_thread
    # recorded as what it is made of; read back, the derived facts are made anew
    data = ev.to_json()
    assert "thread_key" not in data and "starts_thread" not in data
    assert InboundEvent.from_json(data) == ev
    assert InboundEvent.from_json({**data, "thread_key": "forged"}).thread_key == ev.thread_key
    assert "thread_key" not in repr(ev)


def test_a_turn_result_says_ok_as_a_value() -> None:
    done = TurnResult(session_id="s", turn_id="t", termination=TerminationReason.NATURAL,
                      text="x", rounds=1)
    assert vars(done)["ok"] is True
    failed = replace(done, termination=TerminationReason.MAX_ROUNDS)
    assert failed.ok is False and done != replace(done, text="y")


def _prepare(tmp_path: Path) -> PreparePhase:
    leases = SimpleNamespace(claim=lambda *a: "claim")
    deps: Any = SimpleNamespace(thread_leases=leases, host=SimpleNamespace(home=tmp_path))
    return PreparePhase(deps=deps)


def _accept(binding: BindingSettings) -> Accept:
    stored: Any = SimpleNamespace(id=1, event=_event())
    row: Any = SimpleNamespace(platform="telegram", workspace="123", session_key="s",
                               target=SimpleNamespace(channel="-100", thread_root="7"))
    return Accept(stored=stored, row=row, binding=binding)


def test_a_binding_s_overrides_are_made_once_and_again_when_it_changes(
    tmp_path: Path,
) -> None:
    prepare = _prepare(tmp_path)
    binding = BindingSettings(platform="telegram", channel="-100", model="m-1",
                              approve=["memory"], max_tokens_per_day=100)
    first = prepare.turn(_accept(binding)).overrides
    assert first.model == "m-1" and first.spend_scope == "telegram:-100"
    assert first.approve_actions == {"memory": frozenset({"scope=channel"})}
    # the same binding (or an equal one read again): the same value, not made again
    assert prepare.turn(_accept(binding)).overrides is first
    assert prepare.turn(_accept(binding.model_copy(deep=True))).overrides is first
    # changed in place, or read again changed: made again
    binding.model = "m-2"
    assert prepare.turn(_accept(binding)).overrides.model == "m-2"
    other = binding.model_copy(update={"system_prompt": "be brief"})
    assert prepare.turn(_accept(other)).overrides.prompt_addition == "be brief"
    # another channel's binding has its own
    elsewhere = BindingSettings(platform="telegram", channel="-200")
    assert prepare.turn(_accept(elsewhere)).overrides.spend_scope == "telegram:-200"
