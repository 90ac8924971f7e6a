"""Named agents (``[agents.NAME]``): a binding that says ``agent = "NAME"`` takes the agent's
behaviour keys it does not set itself; the binding's own keys win; unknown keys and names
are configuration errors with the close match; configs without agents are unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from geode.errors import ConfigError
from geode.settings import BINDING_ONLY, AgentSettings, BindingSettings, load_settings

AGENT = '''
[agents.coder]
model = "gpt-6-sol"
system_prompt = "You write code."
tools = ["read_file"]
approve = ["write_file"]
approvers = [42]
max_tokens_per_day = 1000
'''


def _load(tmp_path: Path, text: str) -> tuple[list[BindingSettings], dict[str, AgentSettings]]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(text)
    settings, _ = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    return settings.bindings, settings.agents


def test_a_binding_takes_its_agents_keys_and_its_own_win(tmp_path: Path) -> None:
    [coder, plain], _ = _load(tmp_path, AGENT + '''
[[bindings]]
platform = "telegram"
channel = "-100"
agent = "coder"
system_prompt = "Answer in French."
max_tokens_per_day = 50

[[bindings]]
platform = "telegram"
channel = "-200"
''')
    assert (coder.model, coder.tools, coder.approve, coder.approvers) == (
        "gpt-6-sol", ["read_file"], ["write_file"], ["42"])
    assert (coder.system_prompt, coder.max_tokens_per_day) == ("Answer in French.", 50)
    assert coder.agent_keys == {"model", "tools", "approve", "approvers"}
    # a binding without an agent is what it always was
    assert (plain.model, plain.tools, plain.system_prompt, plain.agent_keys) == (
        None, None, "", frozenset())


def test_an_agent_holds_every_behaviour_key_and_no_binding_only_one() -> None:
    # derived from BindingSettings: a key added there is an agent key unless binding-only
    assert set(AgentSettings.model_fields) == set(BindingSettings.model_fields) - BINDING_ONLY
    assert {"model", "models", "system_prompt", "tools", "approve", "approvers", "skills",
            "voice_replies", "max_tokens_per_day"} <= set(AgentSettings.model_fields)
    assert not {"platform", "channel", "agent", "allow_users"} & set(AgentSettings.model_fields)


def test_an_unknown_key_in_an_agent_names_its_close_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[agents\.coder\]: unknown key 'modle'\. "
                                          r"Did you mean model\?"):
        _load(tmp_path, '[agents.coder]\nmodle = "gpt-6-sol"\n')
    with pytest.raises(ConfigError, match=r"\[agents\.coder\]: unknown key 'channel'"):
        _load(tmp_path, '[agents.coder]\nchannel = "-100"\n')


def test_an_unknown_agent_name_names_its_close_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[\[bindings\]\] #1 agent: unknown agent 'codr'\. "
                                          r'Did you mean "coder"\?'):
        _load(tmp_path, AGENT + '[[bindings]]\nplatform = "telegram"\nchannel = "-1"\n'
                                'agent = "codr"\n')


def test_the_rules_between_keys_hold_for_what_the_binding_runs_with(tmp_path: Path) -> None:
    # the agent allows write_file freely; the binding also asks for approval: both lists
    text = ('[agents.w]\ntools = ["write_file"]\n\n[[bindings]]\nplatform = "telegram"\n'
            'channel = "-1"\nagent = "w"\napprove = ["write_file"]\n')
    with pytest.raises(ConfigError, match="write_file in both `tools`"):
        _load(tmp_path, text)
    # and a binding may lift what only the agent's keys together would refuse
    [b], _ = _load(tmp_path, '[agents.c]\napprove = ["computer"]\n\n[[bindings]]\n'
                             'platform = "telegram"\nchannel = "-1"\nagent = "c"\n'
                             "computer_use = true\n")
    assert (b.approve, b.computer_use) == (["computer"], True)


def test_bad_values_in_an_agent_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agents\.coder\.busy_policy"):
        _load(tmp_path, '[agents.coder]\nbusy_policy = "everyone"\n')


# each an agent's keys a binding holding them would be refused for (the rules between keys)
UNUSED = {
    "tools = [\"run_bash\"]": "run_bash cannot be in a binding's `tools`",
    "tools = [\"write_file\"]\napprove = [\"write_file\"]": "write_file in both `tools`",
    "approve = [\"delegate_task\"]": "delegate_task cannot run in a channel",
    "approve = [\"computer\"]": "computer in `approve` still needs `computer_use = true`",
    "approve_computer_actions = [\"click\", \"dance\"]": "approve_computer_actions: unknown dance",
}


@pytest.mark.parametrize("keys", sorted(UNUSED))
def test_an_agent_no_binding_uses_is_checked_as_a_bindings_keys_are(tmp_path: Path,
                                                                    keys: str) -> None:
    from geode.cli.preflight import preflight

    words = UNUSED[keys]
    # what a binding with these keys is refused with
    with pytest.raises(ConfigError, match=re.escape(words)) as refused:
        _load(tmp_path, f'[[bindings]]\nplatform = "telegram"\nchannel = "-1"\n{keys}\n')
    # an agent with them that no binding names: the start checks fail with the same words
    home = tmp_path / "home"
    (home / "config.toml").write_text(f"[agents.idle]\n{keys}\n")
    settings, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    [check] = [c for c in preflight(settings, secrets) if c.name == "[agents.idle]"]
    assert check.status == "fail", check
    assert check.message.startswith("[agents.idle]: ") and words in check.message
    reason = check.message.removeprefix("[agents.idle]: ")
    assert reason in str(refused.value)


def test_a_used_agent_is_checked_in_its_binding_which_may_lift_a_rule(tmp_path: Path) -> None:
    from geode.cli.preflight import preflight

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[agents.c]\napprove = ["computer"]\n\n[[bindings]]\nplatform = "telegram"\n'
        'channel = "-1"\nagent = "c"\ncomputer_use = true\n')
    settings, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    [check] = [c for c in preflight(settings, secrets) if c.name == "[agents.c]"]
    assert check.status == "ok", check
    # the same agent, no longer named by the binding: refused on its own keys
    (home / "config.toml").write_text(
        '[agents.c]\napprove = ["computer"]\n\n[[bindings]]\nplatform = "telegram"\n'
        'channel = "-1"\ncomputer_use = true\n')
    settings, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    [check] = [c for c in preflight(settings, secrets) if c.name == "[agents.c]"]
    assert check.status == "fail"
    assert "computer in `approve` still needs `computer_use = true`" in check.message


def test_an_unused_agent_that_asks_nobody_is_a_warning(tmp_path: Path) -> None:
    # as a binding with `approve` and no `approvers` is: every such call would be denied
    from geode.cli.preflight import preflight, refuse_failed

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[agents.lone]\napprove = ["write_file"]\n\n'
                                      '[agents.asked]\napprove = ["write_file"]\n'
                                      'approvers = [42]\n')
    settings, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    checks = {c.name: c for c in preflight(settings, secrets)}
    lone, asked = checks["[agents.lone]"], checks["[agents.asked]"]
    assert lone.status == "warn" and "no approvers" in lone.message and "approvers =" in lone.fix
    assert asked.status == "ok"
    refuse_failed(list(checks.values()))  # a warning does not stop serve
