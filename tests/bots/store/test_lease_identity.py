"""Lease holder identity: a restart knows its own dead predecessor (bots.holders) and takes
its leases over at once; a live holder, another host's or another home's keeps them until
their TTL.

Holders are real processes here: a child registers its name in a home and is killed with
SIGKILL (or kept alive), as a crashed or running ``geode serve`` would be.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bots.events import InboundEvent
from bots.holders import HolderRegistry, host_identity
from bots.store.inbound import InboundLog
from bots.store.leases import Lease, ThreadLeases
from geode.store import Store

REPO = Path(__file__).resolve().parents[3]

# The child loads bots/holders.py alone (stdlib and structlog): the bots package's imports
# would make each holder take seconds to start.
_CHILD = """
import importlib.util, sys, time
from pathlib import Path
spec = importlib.util.spec_from_file_location("holders", sys.argv[4])
holders = importlib.util.module_from_spec(spec)
spec.loader.exec_module(holders)
HolderRegistry = holders.HolderRegistry
host = sys.argv[3] or None
registry = HolderRegistry(home=Path(sys.argv[1]), host=host)
dead = registry.register(sys.argv[2])
print("DEAD=" + ",".join(sorted(dead)), flush=True)
time.sleep(600)
"""


class Holder:
    """A child process holding ``name`` in ``home`` until :meth:`kill_9`."""

    def __init__(self, home: Path, name: str, host: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        args = [sys.executable, "-c", _CHILD, str(home), name, host or "",
                str(REPO / "bots" / "holders.py")]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = ""
        while not line.startswith("DEAD="):  # registered (and what it found dead)
            line = self.proc.stdout.readline()
            assert line, "the holder process ended before it registered"
        self.found = {n for n in line.strip().removeprefix("DEAD=").split(",") if n}

    def kill_9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill_9()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for h in started:
        h.stop()


def _holder(holders: list[Holder], home: Path, name: str, host: str | None = None) -> Holder:
    h = Holder(home, name, host)
    holders.append(h)
    return h


def test_a_killed_holder_is_known_dead_by_the_next_process_on_its_home(
    tmp_path: Path, holders: list[Holder]
) -> None:
    old = _holder(holders, tmp_path, "vm:100:old")
    old.kill_9()
    successor = HolderRegistry(home=tmp_path)
    assert successor.register("vm:200:new") == {"vm:100:old"}
    # its file is gone; its name lives on in the successor's (a restart that dies too
    # hands it on)
    files = list((tmp_path / "holders").glob("*.lock"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["inherited"] == ["vm:100:old"]
    successor.close()


def test_a_live_holder_is_never_dead(tmp_path: Path, holders: list[Holder]) -> None:
    _holder(holders, tmp_path, "vm:100:alive")
    other = HolderRegistry(home=tmp_path)
    assert other.register("vm:200:new") == frozenset()
    other.close()


def test_a_reused_pid_neither_hides_a_death_nor_fakes_one(
    tmp_path: Path, holders: list[Holder]
) -> None:
    # A live holder whose name carries a pid no process has: alive, its lock is held.
    _holder(holders, tmp_path, "vm:999999999:alive")
    # A dead holder whose pid now belongs to a live process (this one): still dead, the
    # lock says so, not the pid.
    (tmp_path / "holders" / "1-dead.lock").write_text(json.dumps(
        {"host": host_identity(), "pid": os.getpid(), "names": [f"vm:{os.getpid()}:gone"],
         "inherited": []}))
    successor = HolderRegistry(home=tmp_path)
    assert successor.register("vm:200:new") == {f"vm:{os.getpid()}:gone"}
    successor.close()


def test_another_hosts_holder_is_not_evidence(tmp_path: Path, holders: list[Holder]) -> None:
    # a home on a shared file system whose locks do not cross hosts: a file written on
    # another host proves nothing here, and stays
    elsewhere = _holder(holders, tmp_path, "other:100:x", host="other-host|abc")
    elsewhere.kill_9()
    here = HolderRegistry(home=tmp_path)
    assert here.register("vm:200:new") == frozenset()
    assert len(list((tmp_path / "holders").glob("*.lock"))) == 2
    here.close()


def test_another_homes_holder_is_not_a_predecessor(tmp_path: Path, holders: list[Holder]
                                                   ) -> None:
    _holder(holders, tmp_path / "home-a", "vm:100:a").kill_9()
    b = HolderRegistry(home=tmp_path / "home-b")
    assert b.register("vm:200:b") == frozenset()
    b.close()
    a = HolderRegistry(home=tmp_path / "home-a")
    assert a.register("vm:300:a2") == {"vm:100:a"}
    a.close()


def test_a_restart_that_dies_too_hands_its_predecessors_on(
    tmp_path: Path, holders: list[Holder]
) -> None:
    _holder(holders, tmp_path, "vm:1:first").kill_9()
    second = _holder(holders, tmp_path, "vm:2:second")
    assert second.found == {"vm:1:first"}
    second.kill_9()
    third = HolderRegistry(home=tmp_path)
    assert third.register("vm:3:third") == {"vm:1:first", "vm:2:second"}
    third.close()


def test_one_process_registers_every_connector_in_one_file(tmp_path: Path) -> None:
    registry = HolderRegistry(home=tmp_path)
    registry.register("vm:1:telegram")
    registry.register("vm:1:slack")
    (only,) = (tmp_path / "holders").glob("*.lock")
    assert json.loads(only.read_text())["names"] == ["vm:1:telegram", "vm:1:slack"]
    # while it lives, another process sees neither as dead
    other = HolderRegistry(home=tmp_path)
    assert other.register("vm:2:x") == frozenset()
    other.close()
    registry.close()


# -- the leases (both stores) ----------------------------------------------------------------


def _event(ws: str, thread: int) -> InboundEvent:
    return InboundEvent(platform="telegram", workspace=ws, channel="-100",
                        thread_root=str(thread), message_id=f"{thread}.1", sender="7",
                        dedupe_key=f"telegram:{ws}:-100:{thread}.1", text=f"t{thread}")


async def test_a_dead_predecessors_leases_are_taken_over_at_once_a_live_replicas_are_not(
    store: Store,
) -> None:
    ws = uuid.uuid4().hex[:10]
    name = f"telegram:{ws}"
    log = InboundLog(store=store)
    await log.record([(_event(ws, 1), "received"), (_event(ws, 2), "received")])
    dead = ThreadLeases(store=store, owner="vm:1:dead", ttl_s=60)
    live = ThreadLeases(store=store, owner="elsewhere:7:live", ttl_s=60)
    await log.claim_batch("telegram", ws, owner="vm:1:dead", leases=dead, limit=1)
    await log.claim_batch("telegram", ws, owner="elsewhere:7:live", leases=live, limit=1)
    assert set((await dead.holders("telegram", ws)).values()) == {"vm:1:dead",
                                                                   "elsewhere:7:live"}
    poller = Lease(store=store, name=name, owner="vm:1:dead", ttl_s=60)
    assert await poller.try_acquire()

    # Without knowing the predecessor dead, the restart waits (the leases run 60 s) ...
    unaware = Lease(store=store, name=name, owner="vm:2:new", ttl_s=60)
    assert not await unaware.try_acquire()
    assert await ThreadLeases(store=store, owner="vm:2:new", ttl_s=60).take_over(
        "telegram", ws) == set()
    # ... knowing it, it takes the intake and the dead one's thread at once; the live
    # replica's thread stays with it.
    new = Lease(store=store, name=name, owner="vm:2:new", ttl_s=60,
                predecessors={"vm:1:dead"})
    assert await new.try_acquire()
    assert (await new.holder() or ("", 0))[0] == "vm:2:new"
    taken = await ThreadLeases(store=store, owner="vm:2:new", ttl_s=60,
                               predecessors={"vm:1:dead"}).take_over("telegram", ws)
    assert len(taken) == 1
    assert sorted((await dead.holders("telegram", ws)).values()) == ["elsewhere:7:live",
                                                                     "vm:2:new"]
    # the live replica keeps its intake lease too, predecessor list or not
    assert not await Lease(store=store, name=name, owner="elsewhere:7:live", ttl_s=60,
                           predecessors={"vm:1:dead"}).try_acquire()


def test_an_unreadable_dead_file_is_removed_and_names_nobody(tmp_path: Path) -> None:
    folder = tmp_path / "holders"
    folder.mkdir()
    (folder / "7-garbage.lock").write_text("")  # a process that died mid-write
    registry = HolderRegistry(home=tmp_path)
    assert registry.register("vm:1:new") == frozenset()
    assert not (folder / "7-garbage.lock").exists()
    registry.close()
