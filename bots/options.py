"""Behaviour settings of the shared channel layer, and what a platform package declares.

Every ``[channels.<platform>]`` table is validated as that platform's options model, a
subclass of :class:`LayerOptions`; unknown keys are refused (``extra="forbid"``) with the
close match, like every other section of config.toml: a misspelt key used to be ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from geode.settings import Secrets

__all__ = ["LAYER_TOOLS", "DoctorCheck", "LayerOptions", "PlatformSpec", "TokenSpec"]


class LayerOptions(BaseModel):
    """Behaviour of the shared layer (``[channels.<platform>]`` keys of the same names)."""

    model_config = ConfigDict(extra="forbid")

    #: ``enabled = false`` keeps the section (and its options) without starting the connector
    enabled: bool = True
    progress_edit_interval_s: float = 1.0
    typing_interval_s: float = 4.0
    #: the progress message's heartbeat (elapsed, rounds, tool, tokens) is re-rendered this
    #: often while a turn runs (edits stay throttled to progress_edit_interval_s)
    heartbeat_interval_s: float = 15.0
    #: typing starts only for turns running this long (the progress message shows already)
    typing_delay_s: float = 1.0
    #: the answer grows in the progress message as the model writes it (paced edits, or the
    #: platform's own streaming where it has one); false: the progress message shows tool
    #: lines and the heartbeat only, the answer comes whole at the end
    stream: bool = True
    #: no progress message for a turn answered sooner than this: the answer is the only
    #: message (the ack reaction still goes out); 0 sends it at once. A streaming
    #: turn shows its first words 0.3 s after the model's first token, if that is sooner
    progress_after_ms: int = Field(default=1000, ge=0)
    #: reaction on a message GEODE starts working on (unset: none); it goes beside the
    #: turn, which never waits for it, and under load after the answers' own calls
    ack_emoji: str | None = "👀"
    #: events older than this when first seen (downtime backlog) are not answered
    catch_up_max_age_s: float = 24 * 3600
    #: threads run at once; beyond it no new thread is claimed (another replica may take it)
    max_concurrent_threads: int = 64
    #: on a shared (PostgreSQL) store, new threads a replica claims beyond its free channel
    #: lanes: more wait unclaimed in the store for a replica with room (see docs/deployment/
    #: replicas.md); 0 claims only what can start at once
    queue_allowance: int = Field(default=2, ge=0)
    pairing_max_new_per_hour: int = 20
    #: how often recorded events are looked for without a wake-up (e.g. ones another
    #: replica's intake recorded in a thread this replica holds)
    pump_interval_s: float = 1.0
    #: the bot's intake lease and each thread lease last this long unless renewed (every
    #: third of it); a replica on another host that died is taken over after it (a restart
    #: on the same home takes its own dead predecessor's over at once)
    lease_ttl_s: float = 30.0


@dataclass(frozen=True, kw_only=True)
class TokenSpec:
    """A secret a platform needs: the option naming its environment variable, and what
    an operator puts there (said when it is missing)."""

    option: str
    what: str


#: tools only a channel session has (the layer adds them to its sessions): ``send_file``
#: uploads a workspace file into the thread, ``schedule`` sets the thread's reminders.
#: Every platform's spec has them by default.
LAYER_TOOLS = frozenset({"send_file", "schedule"})


#: a doctor check of an enabled ``[channels.<name>]``: what is wrong (an operator's
#: instruction), or None when all is well
DoctorCheck = Callable[[Any, "Secrets"], "str | None"]


@dataclass(frozen=True, kw_only=True)
class PlatformSpec:
    """What a platform package declares about itself (``bots/<platform>/options.py``),
    registered in the ``geode.platforms`` entry point group (one line of its distribution's
    metadata). Everything outside the platform's folder reads only this, so nothing there
    names a platform: the start checks and ``geode doctor`` (:mod:`bots.platforms`,
    ``geode.cli.preflight``), ``geode serve`` (:func:`bots.build_connectors`), ``geode init``,
    the CLI's platform lists, the settings' ``platform`` names and redaction (the harness
    reads its :class:`geode.platforms.PlatformInfo` part).

    The module holding it imports no SDK (the harness reads every spec, for the shapes of
    their secrets), nor its connector: :attr:`connector` and :attr:`sync_commands` name
    theirs as ``"module:function"`` (like an entry point), imported when used, so a
    Telegram-only ``geode serve`` loads no other platform's SDK and the spec's module
    stays out of its connector's import graph.
    """

    #: ``[channels.<name>]``, a binding's ``platform``, the entry point's name
    name: str
    #: its ``[channels.<name>]`` options model
    options: type[LayerOptions]
    #: ``"module:function"`` building its connector (``geode serve``):
    #: ``(*, host, settings, secrets, options) -> BaseConnector``, raising ConfigError when
    #: a secret it needs is not set; "" nothing to serve
    connector: str = ""
    #: the secrets a start needs (``geode doctor`` and ``geode serve`` say which is missing)
    tokens: tuple[TokenSpec, ...] = ()
    #: regular expressions of its secrets' shapes: masked in every output (logs, records,
    #: replies) even when the secret was never loaded here (a token pasted into a prompt)
    secret_shapes: tuple[str, ...] = ()
    #: the extra of geode-agent that installs its SDK, and the SDK's top-level modules: a
    #: configured platform whose SDK is missing is exit 2 naming the extra
    extra: str = ""
    sdk_modules: tuple[str, ...] = ()
    #: tools only its channel sessions have (valid names in a binding's ``tools``)
    chat_tools: frozenset[str] = LAYER_TOOLS
    #: more checks of an enabled ``[channels.<name>]`` for ``geode doctor`` / ``serve``
    checks: tuple[DoctorCheck, ...] = ()
    #: the commented lines ``geode init`` writes into ``.env`` for it (``# NAME=...``)
    env_lines: tuple[str, ...] = ()
    #: what its ``team`` is (a binding's ``--team``): "workspace", "guild", "bot id"
    team: str = "team"
    #: ``"module:function"`` registering its commands with the platform on request
    #: (``geode bindings sync-commands``): ``async (settings, secrets, team_ids, *,
    #: extra_channels) -> lines``; "" it has none to register
    sync_commands: str = ""
