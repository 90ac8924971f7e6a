"""Behaviour settings of the shared channel layer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["LayerOptions"]


class LayerOptions(BaseModel):
    """Behaviour of the shared layer (``[channels.<platform>]`` keys of the same names)."""

    model_config = ConfigDict(extra="ignore")

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
    pairing_max_new_per_hour: int = 20
    #: how often recorded events are looked for without a wake-up (e.g. ones another
    #: replica's intake recorded in a thread this replica holds)
    pump_interval_s: float = 1.0
    #: the bot's intake lease and each thread lease last this long unless renewed (every
    #: third of it); a replica that died is taken over after it
    lease_ttl_s: float = 30.0
