"""Make the legacy fixture with the release before the branched migrations (run on a HEAD worktree)."""
import asyncio, sys, pathlib
from geode.store import open_store
from bots.store import PairingStore

async def main(path: str) -> None:
    p = pathlib.Path(path)
    if p.exists():
        p.unlink()
    async with await open_store(f"sqlite:///{p}") as store:
        await store.sessions.create("legacy-session-1", mode="headless", model="scripted",
                                    title="made by the 0012 release")
        pairing = PairingStore(store=store)
        code = await pairing.issue(platform="telegram", sender="u-legacy", sender_name="Legacy",
                                   channel="c-1", now=1_800_000_000)
        print("code", code)
        async with store.read() as conn:
            print((await conn.exec_driver_sql("select version_num from alembic_version")).all())
    # fold the WAL into the file: the fixture is one file
    import sqlite3
    c = sqlite3.connect(p); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.execute("PRAGMA journal_mode=DELETE"); c.execute("VACUUM"); c.close()

asyncio.run(main(sys.argv[1]))
