"""`geode agents list / show NAME` (+ ``--json``): the named agents, the bindings using each
and where each key of a binding comes from; doctor and serve refuse an unknown agent key or
name (exit 2, with the close match) and doctor checks an agent's model and tool names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CONFIG = '''
[agents.coder]
model = "gpt-6-sol"
system_prompt = "You write code."
tools = ["read_file"]

[agents.idle]
skills = []

[[bindings]]
platform = "telegram"
channel = "-100"
agent = "coder"
system_prompt = "Answer in French."

[[bindings]]
platform = "telegram"
channel = "-200"
agent = "coder"

[[bindings]]
platform = "telegram"
channel = "-300"
'''


def _geode(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-m", "geode", *argv], cwd=home, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def _home(tmp_path: Path, text: str = CONFIG) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(text)
    return home


def test_agents_list_json_and_text(tmp_path: Path) -> None:
    home = _home(tmp_path)
    proc = _geode(home, "agents", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["agents"]
    assert [(r["name"], r["bindings"]) for r in rows] == [
        ("coder", ["telegram:-100", "telegram:-200"]), ("idle", [])]
    assert rows[0]["keys"] == {"model": "gpt-6-sol", "system_prompt": "You write code.",
                               "tools": ["read_file"]}
    text = _geode(home, "agents", "list").stdout
    assert "coder  sets model, system_prompt, tools\n    used by: telegram:-100, telegram:-200" \
        in text
    assert "idle  sets skills\n    used by: no binding" in text


def test_agents_show_says_where_each_key_comes_from(tmp_path: Path) -> None:
    home = _home(tmp_path)
    proc = _geode(home, "agents", "show", "coder", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    first, second = out["bindings"]
    assert first["binding"] == "telegram:-100"
    assert first["keys"]["system_prompt"] == {"value": "Answer in French.", "from": "binding"}
    assert first["keys"]["model"] == {"value": "gpt-6-sol", "from": "agent"}
    assert first["keys"]["busy_policy"] == {"value": "queue", "from": "default"}
    assert second["keys"]["system_prompt"] == {"value": "You write code.", "from": "agent"}
    text = _geode(home, "agents", "show", "coder").stdout
    assert '  system_prompt = "Answer in French."  (binding)' in text
    assert '  model = "gpt-6-sol"  (agent)' in text


def test_an_unknown_agent_is_exit_2_with_the_close_match(tmp_path: Path) -> None:
    home = _home(tmp_path)
    proc = _geode(home, "agents", "show", "codr")
    assert proc.returncode == 2
    assert "unknown agent 'codr'. Did you mean coder?" in proc.stderr
    assert "Traceback" not in proc.stderr
    # a binding naming one: serve refuses the config (exit 2), doctor reports it (exit 1,
    # as every broken config)
    _home(tmp_path, CONFIG.replace('agent = "coder"\nsystem', 'agent = "codre"\nsystem'))
    for argv, code in ((("doctor",), 1), (("serve",), 2)):
        proc = _geode(home, *argv)
        assert proc.returncode == code, (argv, proc.stdout, proc.stderr)
        assert "unknown agent 'codre'. Did you mean \"coder\"?" in proc.stdout + proc.stderr


def test_an_unknown_agent_key_is_exit_2_with_the_close_match(tmp_path: Path) -> None:
    home = _home(tmp_path, CONFIG.replace('[agents.idle]\nskills', '[agents.idle]\nskils'))
    for argv, code in ((("doctor",), 1), (("serve",), 2), (("agents", "list"), 2)):
        proc = _geode(home, *argv)
        assert proc.returncode == code, (argv, proc.stdout, proc.stderr)
        assert "[agents.idle]: unknown key 'skils'. Did you mean skills?" in (
            proc.stdout + proc.stderr)


def test_doctor_checks_an_unused_agents_model_and_tools(tmp_path: Path) -> None:
    home = _home(tmp_path, CONFIG + '\n[agents.typo]\nmodel = "gpt-6-sl"\n')
    proc = _geode(home, "doctor")
    assert proc.returncode != 0
    assert "[FAIL] [agents.typo]: Unknown model id 'gpt-6-sl'" in proc.stdout, proc.stdout
    assert "[ok  ] [agents.coder]: model and tools known" in proc.stdout


def test_doctor_and_serve_check_an_unused_agent_as_a_bindings_keys(tmp_path: Path) -> None:
    # a binding with these keys is refused at load; an agent no binding names used to pass
    home = _home(tmp_path, CONFIG + '\n[agents.shell]\ntools = ["run_bash"]\n'
                                    'skills = ["no-such-skill"]\n')
    words = ("[agents.shell]: run_bash cannot be in a binding's `tools` (it would run for "
             "everyone in the channel, unasked)")
    proc = _geode(home, "doctor")
    assert proc.returncode != 0
    assert f"[FAIL] {words}" in proc.stdout, proc.stdout
    assert "[ok  ] [agents.coder]: model and tools known" in proc.stdout
    assert "[warn] [agents.shell]: skills no-such-skill are not installed" in proc.stdout
    proc = _geode(home, "serve")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert words in proc.stderr
