"""Issue #30 finding 5: `geode serve` is not silent by default.

serve logs at INFO unless told otherwise, one ``turn.done`` line per turn (turn id,
session, termination, rounds, tokens, latency), so `journalctl -u geode -f` shows each
turn; other commands stay at WARNING. With ``--log-json`` stderr is JSON lines only: the
session id `geode run` announces is a record there, not a human line inside the stream."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.daemon.conftest import geode, start_serve

FIELDS = ("turn_id", "session_id", "termination", "rounds", "input_tokens", "output_tokens",
          "latency_ms")


def test_serve_at_default_settings_logs_one_info_line_per_turn(home: Path) -> None:
    serve = start_serve(home, args=("--demo",))
    try:
        for prompt in ("first question", "second question"):
            ask = geode(home, "ask", prompt)
            assert ask.returncode == 0, ask.stderr
    finally:
        assert serve.stop() == 0, serve.output()
    lines = [line for line in serve.output().splitlines() if "turn.done" in line]
    assert len(lines) == 2, serve.output()
    # one line a turn: the loop's own end-of-turn line stays at DEBUG
    assert "turn finished" not in serve.output()
    for line in lines:
        assert "[info" in line
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        for name in FIELDS:
            assert name in fields, (name, line)
        assert fields["termination"] == "natural"
        assert int(fields["rounds"]) >= 1 and int(fields["latency_ms"]) >= 0
        assert int(fields["input_tokens"]) + int(fields["output_tokens"]) > 0
    assert len({dict(re.findall(r"(\w+)=(\S+)", x))["turn_id"] for x in lines}) == 2


def test_serve_log_json_turn_record_and_an_explicit_level_wins(home: Path) -> None:
    serve = start_serve(home, args=("--demo", "--log-json"))
    try:
        assert geode(home, "ask", "a question").returncode == 0
    finally:
        assert serve.stop() == 0, serve.output()
    records = [json.loads(x) for x in serve.output().splitlines() if x.startswith("{")]
    done = [r for r in records if r["event"] == "turn.done"]
    assert len(done) == 1 and done[0]["level"] == "info"
    assert all(isinstance(done[0][name], int) for name in ("rounds", "input_tokens",
                                                           "output_tokens", "latency_ms"))
    assert done[0]["termination"] == "natural" and done[0]["session_id"]

    quiet = start_serve(home, args=("--demo", "--log-level", "WARNING"))
    try:
        assert geode(home, "ask", "another").returncode == 0
    finally:
        assert quiet.stop() == 0, quiet.output()
    assert "turn.done" not in quiet.output()


def test_run_stays_quiet_and_log_json_keeps_stderr_json_lines(home: Path) -> None:
    plain = geode(home, "run", "--demo", "hello")
    assert plain.returncode == 0, plain.stderr
    assert "[info" not in plain.stderr  # only serve logs at INFO by default
    assert re.search(r"^\(session [0-9a-f]+\)$", plain.stderr, re.M)

    proc = geode(home, "--log-json", "run", "--demo", "--json", "hello")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)  # stdout: the answer object only
    records = [json.loads(line) for line in proc.stderr.splitlines()]  # every line is JSON
    announced = [r for r in records if r.get("event") == "run.session"]
    assert [r["session_id"] for r in announced] == [answer["session_id"]]
