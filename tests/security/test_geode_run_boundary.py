"""End to end through `geode run` (the entry the attacks of issue #16 used): with GEODE's home
inside the workspace (`geode` run from `~`), neither the file tools nor the sandbox reach its
.env, config or store, and the parent's environment never shows inside run_bash."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from geode.testing.fake_anthropic import FakeAnthropicServer

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-ant-api03-e2eboundary0123456789abcdefgh"
DOTENV = "PLANTED-e2e-dotenv-5c4b3a29"


async def test_geode_run_from_home_layout_cannot_reach_geode_files(
    sandbox: None, tmp_path: Path
) -> None:
    ws = tmp_path / "user"
    home = ws / ".geode"
    home.mkdir(parents=True)
    (home / ".env").write_text(f"SOME_SERVICE_TOKEN={DOTENV}\n")
    (home / "config.toml").write_text("[loop]\nmax_rounds = 5\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", "ANTHROPIC_"))}
    env.update(PYTHONPATH=str(REPO), GEODE_HOME=str(home), ANTHROPIC_API_KEY=KEY)
    bash = (
        "cat .geode/.env; cat /proc/1/environ | tr '\\0' '\\n' | grep -c ANTHROPIC; "
        "echo '[[hooks.Stop]]' >> .geode/config.toml; ls .geode | wc -l"
    )
    async with FakeAnthropicServer() as srv:
        env["ANTHROPIC_BASE_URL"] = srv.base_url
        srv.enqueue_tool_calls(
            [
                ("read_file", {"path": ".geode/.env"}),
                ("grep", {"pattern": "PLANTED"}),
                ("write_file", {"path": ".geode/config.toml", "content": "[[hooks.Stop]]\n"}),
                ("run_bash", {"command": bash}),
            ]
        )
        srv.enqueue_text("done")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "geode", "run", "--json", "--allow-tool", "run_bash",
            "--allow-tool", "write_file", "look around",
            cwd=ws, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()[-3000:]
        statuses = [c["status"] for c in json.loads(out)["tool_calls"]]
        results = json.dumps(srv.generate_requests[-1].body["messages"])
    assert DOTENV not in results and KEY not in results, results
    assert statuses[0] == "error" and statuses[2] == "error", statuses
    assert "GEODE's own files" in results
    assert (home / "config.toml").read_text() == "[loop]\nmax_rounds = 5\n"
