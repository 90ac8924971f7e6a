"""The walk of one Telegram mention, measured by ``benchmarks/trace_turn.py`` (a real daemon,
the real connector, the wire-level fake, the scripted model): the harness is entered once,
its loop events come back through one typed stream, and the walk stays within the bound
docs/architecture.md states ("A chat turn, end to end")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_turn.py"

#: the documented bounds (docs/architecture.md): the issue's target, which the walk meets (20
#: in every run: it ends when the answer's send returns, so no publish after it is counted)
MAX_MODULE_HOPS = 20
MAX_TURNS_REENTRIES = 9
#: the mention's path end to end (received, then answered): the bound the architecture keeps
MAX_PATH_HOPS = 20


def test_one_mention_enters_the_harness_once_within_the_documented_hops() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = "\n" + proc.stdout  # the figures are the last thing printed, after any log line
    figures = json.loads(out[out.rindex("\n{\n") + 1:])
    assert figures["harness_entries"] == 1
    assert figures["event_streams"] == 1 and figures["loop_events"] >= 2
    assert 0 < figures["module_hops"] <= MAX_MODULE_HOPS, figures["edges"]
    hops = {line.rpartition(" (")[0] for line in figures["edges"]}
    # a loop entered before the mention (the pump's, the poller's) resuming is no call
    assert "geode.daemon.supervisor -> bots.intake" not in hops, hops
    assert "bots._intake_lease -> bots.telegram.inbound" not in hops, hops
    # a loop's pass is reported as data on its component, not by a call per pass: the
    # mention's walk makes no call into the supervisor (the pump's, the poller's beat)
    assert not any(hop.endswith("-> geode.daemon.supervisor") for hop in hops), hops
    # the event the intake recorded and claimed in one transaction is handed on as given
    # (nothing in it was masked), not decoded from its row again
    assert "bots.store.inbound -> bots.events" not in hops, hops
    # the draft is one collaborator chosen once per turn (bots.turn.stream.AnswerStream)
    assert "bots.turn.run -> bots.turn.native" not in hops, hops
    # facts handed over as values: the title, the overrides, ``ok``, the thread key, the
    # /model choice (none), the spoken-reply switch (off) are not asked again on the way
    for hop in ("bots.turn.run -> geode.store.sessions", "bots.turn.run -> bots.bindings",
                "bots.turn.run -> geode.secret_redaction", "bots.turn.run -> geode.loop.agent_loop",
                "bots.turn.run -> bots.commands", "bots.turn.run -> bots.events",
                "bots.turn.prepare -> bots.events", "bots.turn.driver -> bots.voice_reply",
                "bots.store.inbound -> bots.store._sql", "bots.store.outbox -> bots.events",
                # the shared renderer's ``render`` with Telegram's dialect as a value
                "bots.telegram.format -> bots.render", "bots.turn.deliver -> bots.telegram.format",
                # the inline markup is data the shared renderer reads, not a call back
                "bots.render -> bots.telegram.format",
                # the harness masks what it hands back: the answer is delivered as given
                "bots.turn.deliver -> geode.secret_redaction",
                # the counters are incremented inline, not from the published events
                "geode.hooks.system -> bots.metrics",
                # the write claim is a value the turn builds
                "bots.turn.prepare -> bots.store.leases",
                # one typed stream back: no session callback into the run phase, and the queue
                # entry claimed by the turn's admission
                "geode.daemon.serve -> bots.turn.run", "bots.turn.run -> bots.store.queue"):
        assert hop not in hops, hops
    assert figures["turns_reentries"] <= MAX_TURNS_REENTRIES, figures["edges"]
    # the path runs from Telegram's inbound side to Telegram's client, through the store
    path = figures["path"]
    assert path[0].startswith("bots.") and path[-1].startswith("bots.telegram."), path
    assert any(mod.startswith("bots.store") for mod in path), path
    assert 0 < figures["path_hops"] == len(path) - 1 <= MAX_PATH_HOPS, path
