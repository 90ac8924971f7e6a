"""EvidenceLedger: redacted JSONL with content hashes; planted secrets never reach the file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from geode.store import EvidenceLedger, payload_hash

PLANTED = {
    "anthropic": "sk-ant-api03-PLANTEDsecretPLANTEDsecret0001",
    "openai": "sk-proj-PLANTEDopenaiKEY0123456789abcd",
    "slack_bot": "xoxb-1234567890-PLANTEDslackBOT",
    "slack_app": "xapp-1-A0PLANTED-123-abcdef",
    "telegram": "123456789:AAPLANTEDtelegramTOKENabcdefghijklmn",
    "bearer": "PLANTEDbearerValue0123",
    "literal": "hunter2-PLANTED-literal",
    "password_field": "PLANTED-password-value",
}


async def test_ledger_rows_contain_no_planted_secret(tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path, secrets=[PLANTED["literal"]])
    await ledger.append(
        session_id="s1",
        turn_id="t1",
        kind="task_preflight",
        summary=f"using key {PLANTED['anthropic']} for the run",
        payload={
            "env": {"ANTHROPIC_API_KEY": PLANTED["anthropic"], "OPENAI": PLANTED["openai"]},
            "headers": [f"Authorization: Bearer {PLANTED['bearer']}"],
            "text": f"slack {PLANTED['slack_bot']} app {PLANTED['slack_app']}",
            "telegram_url": f"https://api.telegram.org/bot{PLANTED['telegram']}/getMe",
            "note": f"the operator typed {PLANTED['literal']}",
            "password": PLANTED["password_field"],
            "usage": {"input_tokens": 10, "output_tokens": 3},
        },
    )
    raw = ledger.path_for("s1").read_bytes()
    assert raw  # something was written
    for name, secret in PLANTED.items():
        assert secret.encode() not in raw, name
    assert b"PLANTED" not in raw
    (row,) = await ledger.read("s1")
    assert row["payload"]["usage"] == {"input_tokens": 10, "output_tokens": 3}
    assert row["kind"] == "task_preflight" and row["turn_id"] == "t1"


async def test_rows_carry_seq_and_a_verifiable_payload_hash(tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path)
    written = await ledger.append(
        session_id="s1", kind="final_result", summary="s" * 900, payload={"b": 1, "a": [1, 2]}
    )
    await ledger.append(session_id="s1", kind="evidence_check", payload={})
    rows = await ledger.read("s1")
    assert [r["seq"] for r in rows] == [1, 2]
    assert rows[0] == written
    canonical = json.dumps({"a": [1, 2], "b": 1}, separators=(",", ":"), sort_keys=True)
    assert rows[0]["payload_hash"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert rows[0]["payload_hash"] == payload_hash(rows[0]["payload"])
    assert len(rows[0]["summary"]) == 500
    assert set(rows[0]) == {
        "seq",
        "ts",
        "session_id",
        "turn_id",
        "kind",
        "summary",
        "payload_hash",
        "payload",
    }
    day = datetime.now(UTC).date().isoformat()
    assert ledger.path_for("s1") == tmp_path / "ledger" / f"{day}.jsonl"


async def test_sessions_share_the_day_file_and_read_back_only_their_rows(tmp_path: Path) -> None:
    # a chat daemon opens a session per thread: one file per session was one file per thread
    ledger = EvidenceLedger(tmp_path)
    for i in range(30):
        await ledger.append(session_id=f"telegram:1:-100:{i}", kind="final_result",
                            payload={"i": i})
    assert [p.name for p in (tmp_path / "ledger").iterdir()] == [ledger.path_for("x").name]
    rows = await ledger.read("telegram:1:-100:7")
    assert [r["payload"]["i"] for r in rows] == [7]
    assert rows[0]["seq"] == 8  # seq counts the file's rows
    assert await ledger.read("telegram:1:-100:70") == []


async def test_rows_of_a_home_written_before_day_files_are_still_read_first(
    tmp_path: Path,
) -> None:
    ledger = EvidenceLedger(tmp_path)
    legacy = tmp_path / "ledger" / "s1.jsonl"
    legacy.parent.mkdir(parents=True)
    old = {"seq": 1, "ts": "2026-01-01T00:00:00+00:00", "session_id": "s1", "turn_id": "",
           "kind": "old", "summary": "", "payload_hash": payload_hash({}), "payload": {}}
    legacy.write_text(json.dumps(old) + "\n")
    await ledger.append(session_id="s1", kind="new")
    assert [r["kind"] for r in await ledger.read("s1")] == ["old", "new"]


async def test_concurrent_appends_keep_one_monotonic_seq(tmp_path: Path) -> None:
    a, b = EvidenceLedger(tmp_path), EvidenceLedger(tmp_path)  # two writers, one file
    await asyncio.gather(
        *(
            (a if i % 2 else b).append(session_id="s1", kind="k", payload={"i": i})
            for i in range(40)
        )
    )
    rows = await a.read("s1")
    assert sorted(r["seq"] for r in rows) == list(range(1, 41))
    assert sorted(r["payload"]["i"] for r in rows) == list(range(40))


async def test_torn_last_line_does_not_swallow_the_next_row(tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path)
    await ledger.append(session_id="s1", kind="k")
    with ledger.path_for("s1").open("ab") as fh:
        fh.write(b'{"seq": 2, "ts": "torn')  # a writer killed mid-line
    await ledger.append(session_id="s1", kind="after")
    lines = ledger.path_for("s1").read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "after"
    assert json.loads(lines[-1])["seq"] == 2  # continues after the last complete row


async def test_unsafe_session_ids_stay_inside_the_ledger_dir(tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path)
    ids = ["../../etc/passwd", "slack:T1/C1:1.2", "slack:T1:C1:1.2", 'quote"d']
    for sid in ids:
        await ledger.append(session_id=sid, kind="k")
        assert ledger.path_for(sid).parent == tmp_path / "ledger"
    assert [p.name for p in tmp_path.iterdir()] == ["ledger"]
    for sid in ids:
        assert [r["session_id"] for r in await ledger.read(sid)] == [sid]


async def test_prune_removes_old_files_only(tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path)
    await ledger.append(session_id="new", kind="k")
    old = tmp_path / "ledger" / "2020-01-01.jsonl"
    old.write_text('{"seq": 1, "session_id": "old"}\n')
    long_ago = time.time() - 40 * 86_400
    os.utime(old, (long_ago, long_ago))
    assert await ledger.prune(30) == 1
    assert not old.exists() and ledger.path_for("new").exists()


async def test_a_read_sees_every_append_already_under_way(tmp_path: Path) -> None:
    """Observers append in fire-and-forget tasks; a read right after must not race them."""
    ledger = EvidenceLedger(tmp_path)
    writers = [
        asyncio.create_task(ledger.append(session_id="s", kind="tool_finished", summary=str(i)))
        for i in range(20)
    ]
    await asyncio.sleep(0)  # every append has started (its thread may still be writing)
    rows = await ledger.read("s")
    assert sorted(r["summary"] for r in rows) == sorted(str(i) for i in range(20))
    assert [r["seq"] for r in rows] == list(range(1, 21))
    await asyncio.gather(*writers)


async def test_append_recreates_a_removed_ledger_dir(tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path / "home-not-created-yet")
    await ledger.append(session_id="s1", kind="k")
    path = ledger.path_for("s1")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    path.unlink()
    ledger.dir.rmdir()  # e.g. an operator cleaned the home while the daemon ran
    await ledger.append(session_id="s1", kind="k")
    assert [r["seq"] for r in await ledger.read("s1")] == [1]
