"""Behaviour settings of the shared channel layer, and what a platform package declares.

Every ``[channels.<platform>]`` table is validated as that platform's options model, a
subclass of :class:`LayerOptions`; unknown keys are refused (``extra="forbid"``) with the
close match, like every other section of config.toml: a misspelt key used to be ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LayerOptions", "PlatformSpec", "TokenSpec"]


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


@dataclass(frozen=True, kw_only=True)
class PlatformSpec:
    """What a platform package declares about itself (``bots/<platform>/options.py``):
    its ``[channels.<name>]`` options model and the secrets a start needs. The start
    checks (:mod:`bots.platforms`) read only this; they name no platform."""

    name: str
    options: type[LayerOptions]
    tokens: tuple[TokenSpec, ...] = ()
