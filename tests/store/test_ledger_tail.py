"""EvidenceLedger: the seq of an append comes from what the process knows of the file's end
when nobody else wrote since (no tail read back), and from the file itself otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geode.store import EvidenceLedger
from geode.store import ledger as ledger_mod


@pytest.fixture
def tail_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    real = ledger_mod._last_seq

    def counted(fd: int) -> int:
        reads.append(fd)
        return real(fd)

    monkeypatch.setattr(ledger_mod, "_last_seq", counted)
    return reads


def _seqs(ledger: EvidenceLedger) -> list[int]:
    return [json.loads(ln)["seq"] for ln in ledger.path_for("s").read_text().splitlines()
            if ln.startswith("{\"seq\": ") and ln.endswith("}")]


async def test_appends_of_one_process_read_the_tail_once(
        tmp_path: Path, tail_reads: list[int]) -> None:
    ledger = EvidenceLedger(tmp_path)
    for i in range(5):
        await ledger.append(session_id="s", kind="k", payload={"i": i})
    assert len(tail_reads) == 1  # the first append: the file was not this process's yet
    assert _seqs(ledger) == [1, 2, 3, 4, 5]


async def test_a_row_written_by_another_process_is_read_back(
        tmp_path: Path, tail_reads: list[int]) -> None:
    here, there = EvidenceLedger(tmp_path), EvidenceLedger(tmp_path)  # two replicas
    await here.append(session_id="s", kind="k")
    await there.append(session_id="s", kind="k")
    await here.append(session_id="s", kind="k")  # the file moved past its last row
    await here.append(session_id="s", kind="k")
    assert len(tail_reads) == 3
    assert _seqs(here) == [1, 2, 3, 4]


async def test_a_torn_line_or_a_removed_file_after_the_last_append_is_noticed(
        tmp_path: Path) -> None:
    ledger = EvidenceLedger(tmp_path)
    await ledger.append(session_id="s", kind="k")
    await ledger.append(session_id="s", kind="k")
    with ledger.path_for("s").open("ab") as fh:
        fh.write(b'{"seq": 3, "ts": "torn')  # another writer killed mid-line
    await ledger.append(session_id="s", kind="after")
    assert _seqs(ledger) == [1, 2, 3]
    last = json.loads(ledger.path_for("s").read_text().splitlines()[-1])
    assert (last["kind"], last["seq"]) == ("after", 3)
    ledger.path_for("s").unlink()  # pruned by hand
    await ledger.append(session_id="s", kind="k")
    assert _seqs(ledger) == [1]
