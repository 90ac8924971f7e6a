"""Configuration: the one place that reads the environment.

Sources, highest first: explicit overrides (CLI flags) → ``GEODE_*`` environment variables
(``GEODE_MODEL``, ``GEODE_STORE__URL``, ...; nested keys use ``__``) → the project's
``./.geode/config.toml`` → ``$GEODE_HOME/config.toml`` → defaults.

Secrets never live in config files: provider keys and bot tokens come from the process
environment or ``$GEODE_HOME/.env`` (the environment wins) and are registered with the
redactor as soon as they are read.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from copy import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from dotenv import dotenv_values
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from geode.agents import BINDING_ONLY, apply_agent
from geode.config_errors import config_error, reject_unknown_sections, unknown_key_message
from geode.errors import ConfigError
from geode.secret_redaction import register_secret

__all__ = [
    "BINDING_ONLY",
    "PROJECT_CONFIG",
    "AgentSettings",
    "BindingSettings",
    "BudgetSettings",
    "CodexSettings",
    "ComputerSettings",
    "ConsoleSettings",
    "LoopSettings",
    "MemorySettings",
    "ModelSettings",
    "RewindSettings",
    "SandboxSettings",
    "SearchSettings",
    "Secrets",
    "Settings",
    "SkillsSettings",
    "SpendCaps",
    "StoreSettings",
    "VerifySettings",
    "VoiceSettings",
    "geode_home",
    "load_settings",
    "platform_names",
    "unknown_key_message",
]


#: a project's own config file, relative to its directory (``geode.mcp.trust`` names it too)
PROJECT_CONFIG = Path(".geode") / "config.toml"


def geode_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("GEODE_HOME") or Path.home() / ".geode").expanduser()


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSettings(_Section):
    default: str = "claude-opus-5-5"
    #: empty unless configured: a failing model is never silently swapped
    fallbacks: list[str] = Field(default_factory=list)
    max_tokens: int = 8192
    request_timeout_s: float = 120.0
    max_retries: int = 4
    #: one model call, all its retries and their waits included, gives up after this
    call_deadline_s: float = Field(default=300.0, gt=0)
    #: "waiting for the model (42 s, attempt 2/4)" after this many seconds of silence
    waiting_notice_s: float = Field(default=5.0, gt=0)
    #: USD per million tokens, [input, output], by model id; needed for a cost budget
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)
    #: access path: "api" (the provider's key) or "codex" (the Codex CLI login); None = api.
    #: A model the catalog does not allow on the path is refused, never served another way.
    path: str | None = None
    #: per-model access path, by model id; wins over ``path``
    paths: dict[str, str] = Field(default_factory=dict)
    #: role → model id, overriding the catalog's roles (primary, auxiliary, low_cost)
    roles: dict[str, str] = Field(default_factory=dict)
    #: context window in tokens, by model id, for ids the catalog does not know (or to
    #: correct it); unknown everywhere: 200,000 is assumed
    windows: dict[str, int] = Field(default_factory=dict)


class VerifySettings(_Section):
    #: the verify judge: "none" (hooks and checks only), "llm" (the auxiliary-role model
    #: returns a strict JSON verdict) or "jev" (the judge-only TypeSafe/Jev adapter)
    judge: Literal["none", "llm", "jev"] = "none"
    #: how Jev is reached: "typesafe" (direct, TYPESAFE_API_KEY) or "openrouter"
    #: (OPENROUTER_API_KEY)
    jev_route: Literal["typesafe", "openrouter"] = "typesafe"
    #: seconds per judge call
    timeout_s: float = 60.0


class CodexSettings(_Section):
    """The Codex-subscription path: the official Codex CLI login and its endpoints."""

    #: directory of the Codex CLI's auth.json; default $CODEX_HOME, else ~/.codex
    home: Path | None = None
    base_url: str = "https://chatgpt.com/backend-api/codex"
    token_url: str = "https://auth.openai.com/oauth/token"


class ProviderSettings(_Section):
    base_url: str | None = None
    api_key_env: str | None = None  # read the key from another variable


class StoreSettings(_Section):
    url: str | None = None  # default: sqlite under $GEODE_HOME
    #: a file holding the database password (a Docker/systemd secret), so the url carries none
    password_file: Path | None = None
    timeline_retention_days: int = 90
    ledger_retention_days: int = 30


class LoopSettings(_Section):
    max_rounds: int = 30
    time_budget_s: float | None = None
    repair_budget: int = 2
    #: spend cap per turn in USD (needs [model.prices] for the model); None = no cap
    cost_budget_usd: float | None = None
    #: the same call (tool + arguments) failing the same way this many rounds in a row ends
    #: the turn (repeated_errors); the model is told once, one failure earlier
    repeated_error_limit: int = Field(default=5, ge=1)
    #: this many rounds in a row in which every tool call failed, whatever the calls, end it
    max_error_rounds: int = Field(default=20, ge=1)
    #: a tool result passes whole up to this share of the model's context window; a longer
    #: one is cut to head + tail, its whole kept for the read_result tool
    max_result_share: float = Field(default=0.25, gt=0, le=1)
    #: an absolute ceiling in characters on a result passed whole (None: the share decides)
    max_result_chars: int | None = Field(default=None, gt=0)
    #: times a turn interrupted by a crash or restart is resumed before it is ended
    recovery_limit: int = Field(default=3, ge=0)


class LaneSettings(_Section):
    global_cap: int = 8
    channel_cap: int = 6
    cli_cap: int = 4
    #: how long a `geode ask` / scheduled run waits for a lane (a channel message waits
    #: queued as long as it takes: its pending reply is in the store)
    wait_timeout_s: float = 300.0
    #: a turn running this long moves to the long lane (None: never)
    long_after_s: float | None = Field(default=60.0, gt=0)
    #: turns that may run in the long lane at once (outside global_cap)
    long_cap: int = Field(default=4, ge=1)


class SpendCaps(_Section):
    """Spend caps (issue #20): ``None`` = no cap. Tokens are input + output as reported by
    the provider; USD caps need ``[model.prices]`` for the model (never guessed)."""

    max_tokens_per_day: int | None = Field(default=None, ge=0)
    max_usd_per_day: float | None = Field(default=None, ge=0)
    max_tokens_per_thread: int | None = Field(default=None, ge=0)
    max_tokens_per_user_per_day: int | None = Field(default=None, ge=0)
    max_usd_per_turn: float | None = Field(default=None, ge=0)

    def caps(self) -> dict[str, float]:
        """The caps that are set, by name."""
        return {name: float(v) for name in SPEND_CAP_NAMES
                if (v := getattr(self, name)) is not None}


SPEND_CAP_NAMES = ("max_tokens_per_day", "max_usd_per_day", "max_tokens_per_thread",
                   "max_tokens_per_user_per_day", "max_usd_per_turn")


def iana_zone(v: Any) -> Any:
    """A ``timezone`` zoneinfo knows, or a ValueError naming the close match (a misspelt
    zone must not silently mean UTC)."""
    import difflib
    import zoneinfo

    try:
        if v is not None:
            zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        close = difflib.get_close_matches(v, sorted(zoneinfo.available_timezones()), n=1)
        match = f' Did you mean "{close[0]}"?' if close else ""
        raise ValueError(f"unknown time zone {v!r}.{match} Use an IANA "
                         'name such as "Europe/Berlin", "America/New_York" or "UTC".') from None
    return v


class BudgetSettings(SpendCaps):
    """``[budgets]``: daemon-wide caps (every session of this store counts) and the time
    zone the day boundaries of every per-day cap (daemon and bindings) are read in."""

    timezone: Annotated[str, AfterValidator(iana_zone)] = "UTC"


class BindingSettings(SpendCaps):
    #: a registered chat platform (as its [channels.NAME] table is named)
    platform: str
    channel: str
    #: the platform's team (workspace, server, bot id) this binding is limited to ("" = any)
    team: str = ""
    #: a named agent (``[agents.NAME]``) whose keys this binding takes where it sets none
    agent: str | None = None
    #: the folder its turns work in; "" = its own, $GEODE_HOME/workspaces/<platform>-<channel>/
    #: (see bots.workspaces); two bindings share one only when both name it
    workspace: str = ""
    #: attachments larger than this are refused (not downloaded)
    max_attachment_mb: float = Field(default=20.0, gt=0)
    #: accepted attachment types: MIME patterns ("text/*") or extensions (".log"); None = any
    attachment_types: list[str] | None = None
    require_mention: bool = True
    allow_users: list[str] = Field(default_factory=list)
    allow_bots: bool = False
    tools: list[str] | None = None
    # kept as given: only the literal boolean ``true`` enables computer use
    computer_use: Any = False
    model: str | None = None
    #: what ``/model`` may pick in its threads (catalog or ``provider:model`` ids); the
    #: binding's ``model`` is always one of them; empty: that model only
    models: list[str] = Field(default_factory=list)
    system_prompt: str = ""
    time_budget_s: float | None = None
    busy_policy: Literal["queue", "interrupt"] = "queue"
    #: tools that run only after one of ``approvers`` says yes for that call in the thread
    approve: list[str] = Field(default_factory=list)
    #: platform user ids who may decide; empty: nobody can, every such call is denied
    approvers: list[str] = Field(default_factory=list)
    approval_timeout_s: float = Field(default=300.0, gt=0)
    #: with ``computer`` in ``approve``: the actions that wait for an approver; the others
    #: (a screenshot, moving the mouse, scrolling) run without asking
    approve_computer_actions: list[str] = Field(default_factory=lambda: ["click", "type", "key"])
    #: the skills offered in its threads, by name (None: every installed skill; []: none)
    skills: list[str] | None = None
    #: what its threads remember: "off"; "user" (what each person asked to be remembered
    #: about them, shown only in their threads); "channel" (that, and notes for everyone here)
    memory: Literal["off", "user", "channel"] = "off"
    #: a voice note is answered with a voice note too (``[voice] tts_model``), text beside it
    voice_replies: bool = False
    #: the IANA time zone (``Europe/Berlin``) its reminders' times of day, dates and crons
    #: are read and shown in; unset: UTC
    timezone: Annotated[str | None, AfterValidator(iana_zone)] = None

    #: the keys it took from its agent (:func:`apply_agent`); None: not resolved here
    _agent_keys: frozenset[str] | None = PrivateAttr(default=None)

    @property
    def agent_keys(self) -> frozenset[str]:
        """The keys this binding took from its named agent (none without one)."""
        return self._agent_keys or frozenset()

    @field_validator("platform")
    @classmethod
    def _registered_platform(cls, v: str) -> str:
        if v not in platform_names():
            raise ValueError(unknown_key_message("[[bindings]] platform", v, platform_names(),
                                                 what="platform"))
        return v

    @field_validator("channel", mode="before")
    @classmethod
    def _channel_str(cls, v: Any) -> str:
        return str(v)

    @field_validator("approvers", mode="before")
    @classmethod
    def _approver_ids(cls, v: Any) -> Any:
        # ids are strings on every platform; a TOML integer (user 42) means the same
        return [str(x) for x in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _approval_keys(self) -> BindingSettings:
        if self.tools is not None and "run_bash" in self.tools:
            raise ValueError(
                "run_bash cannot be in a binding's `tools` (it would run for everyone in the "
                "channel, unasked); list it in `approve` so an approver says yes to each call")
        both = sorted(set(self.approve) & set(self.tools or ()))
        if both:
            raise ValueError(
                f"{', '.join(both)} in both `tools` (runs unasked) and `approve` (runs after an "
                "approver says yes): keep each tool in one of them")
        if "delegate_task" in self.approve:
            raise ValueError("delegate_task cannot run in a channel, not even with approval")
        if "computer" in self.approve and self.computer_use is not True:
            raise ValueError("computer in `approve` still needs `computer_use = true`")
        unknown = sorted(set(self.approve_computer_actions) - set(COMPUTER_ACTIONS))
        if unknown:
            raise ValueError(f"approve_computer_actions: unknown {', '.join(unknown)}; the "
                             f"computer tool's actions are {', '.join(COMPUTER_ACTIONS)}")
        return self


class _AgentBase(_Section):
    """What every ``[agents.NAME]`` table is: the behaviour keys of a binding (its fields are
    BindingSettings' minus :data:`BINDING_ONLY`, with their types, defaults and bounds). The
    rules between keys (``run_bash`` only in ``approve``, ...) are checked in each binding
    that uses the agent, after its own keys are applied."""

    @field_validator("approvers", mode="before", check_fields=False)
    @classmethod
    def _approver_ids(cls, v: Any) -> Any:
        return [str(x) for x in v] if isinstance(v, list) else v


if TYPE_CHECKING:
    AgentSettings = _AgentBase
else:
    AgentSettings = create_model(
        "AgentSettings", __base__=_AgentBase, __module__=__name__,
        __doc__=_AgentBase.__doc__,
        **{name: (info.annotation, copy(info))
           for name, info in BindingSettings.model_fields.items() if name not in BINDING_ONLY})


class SandboxSettings(_Section):
    """Per-call limits of run_bash's sandbox (see geode.tools.builtin._sandbox)."""

    max_processes: int = Field(default=256, ge=8)
    max_memory_mb: int = Field(default=2048, ge=64)
    max_file_mb: int = Field(default=1024, ge=1)
    tmpfs_mb: int = Field(default=256, ge=1)
    uid: int = Field(default=1000, ge=1)
    gid: int = Field(default=1000, ge=1)


class RewindSettings(_Section):
    """``[rewind]``: what a session keeps so ``/rewind`` and ``geode sessions rewind`` can put
    its workspace files back (``geode.rewind``)."""

    #: keep pre-images of files before write_file / edit_file and a workspace snapshot
    #: before run_bash; off: nothing is kept and no turn with such a call can be rewound
    enabled: bool = True
    #: the most one call's kept pre-images may hold (MB); a run_bash that changed more makes
    #: its turn not rewindable
    max_snapshot_mb: int = Field(default=64, ge=1, le=100_000)


class SearchSettings(_Section):
    """``[search]``: the backend of the ``web_search`` tool (no provider: no such tool).

    Its key comes from the environment or ``$GEODE_HOME/.env`` only (``BRAVE_API_KEY``,
    ``TAVILY_API_KEY``), never from a config file."""

    #: a registered backend (``brave``, ``tavily``, ``searxng``, or one a package adds)
    provider: str | None = None
    #: the backend's address; needed for a self-hosted SearXNG, else the vendor's own
    base_url: str | None = None
    #: the most results one call may return (the model asks for at most this many)
    max_results: int = Field(default=10, ge=1, le=20)
    #: seconds one search may take
    timeout_s: float = Field(default=15.0, gt=0, le=120)

    @field_validator("provider")
    @classmethod
    def _registered_backend(cls, v: str | None) -> str | None:
        from geode.search import backend_names

        if v is not None and v not in backend_names():
            raise ValueError(unknown_key_message("[search] provider", v, backend_names(),
                                                 what="search provider"))
        return v


class VoiceSettings(_Section):
    """``[voice]``: voice notes transcribed through an OpenAI-compatible
    ``/audio/transcriptions`` endpoint (no model: voice notes are saved as files, unread),
    and answers spoken through ``/audio/speech`` (``tts_model``; a binding's
    ``voice_replies``).

    Its key is ``OPENAI_API_KEY`` from the environment or ``$GEODE_HOME/.env`` (a local
    Whisper server that wants none works without it), never from a config file."""

    #: the transcription model (``whisper-1``, ``gpt-4o-mini-transcribe``, a local server's)
    model: str | None = None
    #: the endpoint's address (``http://127.0.0.1:8000/v1`` for a local server; unset: OpenAI)
    base_url: str | None = None
    #: voice notes larger than this (as the platform declares them) are not downloaded
    max_mb: float = Field(default=20.0, gt=0, le=25)
    #: voice notes longer than this (seconds, as the platform declares them) are not downloaded
    max_duration_s: int = Field(default=600, ge=1, le=7200)
    #: seconds one transcription (or one spoken reply's synthesis) may take
    timeout_s: float = Field(default=60.0, gt=0, le=600)
    #: the speech model of spoken replies (``tts-1``, ``gpt-4o-mini-tts``, a local server's),
    #: sent to ``/audio/speech`` at the same address; unset: no binding's answers are spoken
    tts_model: str | None = None
    #: the voice it speaks with (the endpoint's name: ``alloy``, ``nova``, ...)
    voice: str = "alloy"
    #: the longest text spoken (characters); a longer answer is cut at a sentence end, its
    #: whole text is beside the voice note
    max_speech_chars: int = Field(default=1500, ge=50, le=4096)


class MemorySettings(_Section):
    """``[memory]``: how much of the system prompt remembered entries may take
    (``geode.memory``; a binding's ``memory`` turns it on)."""

    #: the memory block's budget (estimated tokens); past it the least recently used
    #: entries are left out whole, and the prompt says how many
    budget_tokens: int = Field(default=800, ge=100, le=32_000)


class SkillsSettings(_Section):
    """``[skills]``: where skills (folders holding a ``SKILL.md``) are found, besides
    ``$GEODE_HOME/skills``."""

    #: folders of skill folders (``~`` is expanded; relative to $GEODE_HOME)
    paths: list[str] = Field(default_factory=list)

#: the ``computer`` tool's actions (geode.tools.builtin.desktop)
COMPUTER_ACTIONS = ("screenshot", "click", "type", "key", "scroll", "mouse_move")


class ComputerSettings(_Section):
    """``[computer]``: the X display of computer-use channels (see geode.daemon.display)."""

    #: the X display the ``computer`` tool of channel sessions drives; "" = ``$DISPLAY`` if
    #: set, else ``geode serve`` starts and supervises its own Xvfb; "xvfb" = always its own
    display: str = ""
    #: the screen of that Xvfb (WIDTHxHEIGHTxDEPTH)
    screen: str = Field(default="1280x800x24", pattern=r"^\d+x\d+x\d+$")
    #: while a computer-use turn runs, post a screenshot to its thread at most this often
    #: (and one at its end); 0 = only the one at the end
    screenshot_every_s: float = Field(default=10.0, ge=0)


class ConsoleSettings(_Section):
    """``[console]``: the operator console served by ``geode serve`` (``bots.console``)."""

    #: serve the console inside ``geode serve``
    enabled: bool = False
    #: HOST:PORT it listens on; loopback unless the operator says otherwise (see below)
    listen: str = "127.0.0.1:8788"
    #: the address people reach it at (a reverse proxy's https URL); sign-in links use it
    public_url: str = ""
    #: PLATFORM:USER_ID of the people who see every binding (a binding's approvers may sign
    #: in too, and see their bindings only)
    operators: list[str] = Field(default_factory=list)
    #: serve a non-loopback address over plain http (the session cookie crosses the
    #: network in the clear): only with this literal switch
    allow_insecure_http: bool = False

    @field_validator("operators")
    @classmethod
    def _qualified_ids(cls, v: list[str]) -> list[str]:
        for op in v:
            platform, sep, user = str(op).partition(":")
            if not sep or not platform or not user:
                raise ValueError(f"operators: {op!r} is not PLATFORM:USER_ID (a user id is "
                                 "unique within its platform only)")
        return v

    @model_validator(mode="after")
    def _safe_listen(self) -> ConsoleSettings:
        host, _port = console_listen(self.listen)
        url = self.public_url.strip()
        if url and not url.startswith(("https://", "http://")):
            raise ValueError(f"public_url {url!r} must start with https:// (or http://)")
        if (self.enabled and not _loopback(host) and not url.startswith("https://")
                and not self.allow_insecure_http):
            raise ValueError(
                f"[console] listen = {self.listen!r} is not a loopback address, and the "
                "console would serve sign-in links and session cookies over plain http. "
                'Put it behind an https reverse proxy and set public_url = "https://...", '
                "or set allow_insecure_http = true if the network is yours alone.")
        return self


def console_listen(listen: str) -> tuple[str, int]:
    """``[console] listen`` as (host, port); a ValueError says what is wrong."""
    host, sep, port = listen.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"[console] listen = {listen!r}: use HOST:PORT, e.g. "
                         '"127.0.0.1:8788"')
    return host, int(port)


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HookCommand(_Section):
    command: str
    matcher: str | None = None
    timeout: float = 10.0


class Settings(BaseSettings):
    """All of GEODE's configuration. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="GEODE_",
        env_nested_delimiter="__",
        extra="ignore",
        validate_default=True,
    )

    home: Path = Field(default_factory=geode_home)
    model: ModelSettings = Field(default_factory=ModelSettings)
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    store: StoreSettings = Field(default_factory=StoreSettings)
    loop: LoopSettings = Field(default_factory=LoopSettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    codex: CodexSettings = Field(default_factory=CodexSettings)
    lanes: LaneSettings = Field(default_factory=LaneSettings)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: named agents, before ``bindings``: a binding's validation reads them
    agents: dict[str, AgentSettings] = Field(default_factory=dict)
    bindings: list[BindingSettings] = Field(default_factory=list)
    mcp: dict[str, Any] = Field(default_factory=dict)
    search: SearchSettings = Field(default_factory=SearchSettings)
    skills: SkillsSettings = Field(default_factory=SkillsSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    voice: VoiceSettings = Field(default_factory=VoiceSettings)
    hooks: dict[str, list[HookCommand]] = Field(default_factory=dict)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    rewind: RewindSettings = Field(default_factory=RewindSettings)
    computer: ComputerSettings = Field(default_factory=ComputerSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    log_level: str = "WARNING"
    log_json: bool = False
    #: where /healthz, /readyz and /metrics listen: loopback on bare metal, "0.0.0.0" in a container
    #: (the image sets GEODE_HEALTH_HOST) so the published port reaches it
    health_host: str = "127.0.0.1"
    health_port: int = 8787

    @field_validator("bindings", mode="wrap")
    @classmethod
    def _with_agents(cls, value: Any, handler: ValidatorFunctionWrapHandler,
                     info: ValidationInfo) -> list[BindingSettings]:
        """Each binding that names an agent takes the agent's keys it does not set itself,
        before it is validated: the rules between keys hold for what the binding runs with."""
        agents = info.data.get("agents")
        if agents is None or not isinstance(value, list):  # the agents failed: said already
            bindings: list[BindingSettings] = handler(value)
            return bindings
        merged: list[Any] = []
        taken: list[frozenset[str] | None] = []
        for i, raw in enumerate(value):
            if isinstance(raw, BindingSettings) and raw._agent_keys is None and raw.agent:
                raw = raw.model_dump(include=raw.model_fields_set)
            if isinstance(raw, Mapping):
                raw, keys = apply_agent(raw, agents, where=f"[[bindings]] #{i + 1}")
                taken.append(keys)
            else:
                taken.append(None)
            merged.append(raw)
        bindings = handler(merged)
        for binding, from_agent in zip(bindings, taken, strict=True):
            if from_agent is not None:
                binding._agent_keys = from_agent
        return bindings

    @property
    def store_url(self) -> str:
        url = self.store.url or f"sqlite:///{self.home / 'geode.db'}"
        if self.store.password_file is None:
            return url
        return _with_password(url, self.store.password_file)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        load = _LOAD.get()
        if load is None:  # Settings() outside load_settings: the process env, no files
            return (init_settings, env_settings)
        # later files in the list win: project over home
        tomls = [
            TomlConfigSettingsSource(settings_cls, toml_file=f)
            if f.parent == load.home
            else _ProjectTomlSource(settings_cls, toml_file=f)
            for f in reversed(load.files)
        ]
        return (init_settings, _EnvSource(settings_cls, load.env), *tomls)


def _with_password(url: str, password_file: Path) -> str:
    """``url`` with the password read from ``password_file`` (one line; a trailing newline is
    not part of it), registered with the redactor."""
    from geode.store.url import InvalidURLError, with_password

    try:
        password = password_file.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(
            f"[store] password_file {password_file}: cannot read it ({exc.strerror or exc})"
        ) from exc
    register_secret(password)
    try:
        return with_password(url, password)
    except InvalidURLError as exc:
        raise ConfigError(f"[store] url is not a database URL: {exc}") from exc


#: What ``./.geode/config.toml`` of a project may set: user-facing keys only. Anything else
#: (hooks, channels, bindings, store, providers, sandbox, budgets, home, logging, internal
#: keys...) could make GEODE spawn processes, send data elsewhere or loosen a limit the
#: operator set, just because a cloned repository says so; it is refused. Its ``[mcp]``
#: servers are read separately (geode.mcp.trust) and run only after `geode trust`.
PROJECT_ALLOWED: Mapping[str, frozenset[str]] = {
    "model": frozenset({"default", "fallbacks", "max_tokens", "path", "paths", "roles"}),
    "loop": frozenset(
        {"max_rounds", "time_budget_s", "repair_budget", "repeated_error_limit",
         "max_error_rounds", "max_result_share", "max_result_chars"}
    ),
}
#: read by geode.mcp.trust, gated by `geode trust`; not a Settings source
PROJECT_SEPARATE = frozenset({"mcp"})


def _project_refusals(data: Mapping[str, Any]) -> list[str]:
    refused: list[str] = []
    for key, value in data.items():
        if key in PROJECT_SEPARATE:
            continue
        allowed = PROJECT_ALLOWED.get(key)
        if allowed is None:
            refused.append(key)
        elif isinstance(value, Mapping):
            refused += [f"{key}.{sub}" for sub in value if sub not in allowed]
        else:
            refused.append(key)
    return sorted(refused)


class _ProjectTomlSource(TomlConfigSettingsSource):
    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        refused = _project_refusals(data)
        if refused:
            allowed = ", ".join(f"{k}.{s}" for k, v in PROJECT_ALLOWED.items() for s in sorted(v))
            raise ConfigError(
                f"{self.toml_file_path} (a project file) may not set "
                f"{', '.join(refused)}. A project may set only {allowed} and [mcp] servers "
                "(which run after `geode trust`); put operator settings in "
                "$GEODE_HOME/config.toml."
            )
        return {k: v for k, v in data.items() if k not in PROJECT_SEPARATE}


@dataclass(frozen=True)
class _Load:
    """What the Settings() of one load_settings call reads (context-local, not global)."""

    files: tuple[Path, ...]
    home: Path
    env: Mapping[str, str]


_LOAD: ContextVar[_Load | None] = ContextVar("geode_settings_load", default=None)


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of os.environ,
    so that load_settings(env=...) never touches the process environment."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env  # read by _load_env_vars, which the base __init__ calls
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        out: dict[str, str | None] = {}
        for key, value in self._given.items():
            if self.env_ignore_empty and value == "":
                continue
            parsed = None if value == self.env_parse_none_str else value
            out[key if self.case_sensitive else key.lower()] = parsed
        return out


class Secrets:
    """Provider keys and bot tokens: environment first, then ``$GEODE_HOME/.env``."""

    def __init__(self, *, env: Mapping[str, str], dotenv: Mapping[str, str | None]) -> None:
        self._values = {k: v for k, v in dotenv.items() if v}
        self._values.update({k: v for k, v in env.items() if v})

    def get(self, name: str) -> str | None:
        value = self._values.get(name)
        register_secret(value)
        return value

    def register_known(self) -> None:
        """Register every credential-looking variable so logs can never show it."""
        for name, value in self._values.items():
            if any(m in name.upper() for m in ("KEY", "TOKEN", "SECRET", "PASSWORD")):
                register_secret(value)


def config_files(home: Path, cwd: Path | None = None) -> list[Path]:
    """The config files that exist, lowest priority first."""
    found = []
    for f in (home / "config.toml", (cwd or Path.cwd()) / PROJECT_CONFIG):
        if f.is_file():
            found.append(f)
    return found


def platform_names() -> tuple[str, ...]:
    """The platforms a binding (and a ``[channels.*]`` section) may name: the registered
    ones (:mod:`geode.platforms`), so this module holds no list of them."""
    from geode.platforms import platform_names as registered

    return registered()


def _reject_unknown_sections(path: Path, data: Mapping[str, Any]) -> None:
    reject_unknown_sections(path, data, root=Settings, platforms=platform_names())


def load_settings(
    *, cwd: Path | None = None, env: Mapping[str, str] | None = None, **overrides: Any
) -> tuple[Settings, Secrets]:
    """Load settings and secrets; a broken file or value is a ConfigError saying where."""
    env = dict(os.environ if env is None else env)
    home = geode_home(env)
    # GEODE_MODEL=ID (CONTRACT.md) is shorthand for [model] default = "ID"
    if "GEODE_MODEL" in env:
        env.setdefault("GEODE_MODEL__DEFAULT", env["GEODE_MODEL"])
    files = config_files(home, cwd)
    for f in files:
        try:
            data = tomllib.loads(f.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"Cannot read {f}: {exc}. Fix the TOML syntax.") from exc
        _reject_unknown_sections(f, data)
    token = _LOAD.set(_Load(files=tuple(files), home=home,
                            env={k: v for k, v in env.items() if k != "GEODE_MODEL"}))
    try:
        settings = Settings(home=home, **overrides)
    except (ValidationError, SettingsError) as exc:
        where = ", ".join(str(f) for f in files) or "the environment"
        raise config_error(Settings, where, exc) from exc
    finally:
        _LOAD.reset(token)
    if settings.codex.home is None and env.get("CODEX_HOME"):
        # the official Codex CLI's own variable for where its login lives
        settings.codex.home = Path(env["CODEX_HOME"]).expanduser()
    if not settings.computer.display and env.get("DISPLAY"):
        # X's own variable: the display computer-use channels connect to instead of an Xvfb
        settings.computer.display = env["DISPLAY"]
    dotenv_file = home / ".env"
    dotenv = dotenv_values(dotenv_file) if dotenv_file.is_file() else {}
    secrets = Secrets(env=env, dotenv=dotenv)
    secrets.register_known()
    _ = settings.store_url  # an unreadable [store] password_file fails here, not mid-start
    return settings, secrets
