"""Make ``legacy_0012.sqlite`` with the linear-chain release (run it on that release's tree)."""

import asyncio
import pathlib
import sqlite3
import sys

from bots.store import PairingStore
from geode.store import open_store


async def main(path: str) -> None:
    p = pathlib.Path(path)
    if p.exists():
        p.unlink()
    async with await open_store(f"sqlite:///{p}") as store:
        await store.sessions.create("legacy-session-1", mode="headless", model="scripted",
                                    title="made by the 0012 release")
        pairing = PairingStore(store=store)
        code = await pairing.issue(platform="telegram", sender="u-legacy",
                                   sender_name="Legacy", channel="c-1", now=1_800_000_000)
        print("code", code)
    # fold the WAL into the file: the fixture is one file
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("VACUUM")
    conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
