"""GEODE's error tree.

::

    GeodeError
    ├── ConfigError            the user must fix something; the message says what and how
    │                          (the CLI exits 2 with it)
    │   └── UnknownModelError  a model id not in the catalog (with close matches)
    ├── StoreError             the durable store failed (corrupt file, unreachable server)
    │   ├── StoreUnavailableError  the store's server did not answer (it may come back: the CLI
    │   │                          exits 75, EX_TEMPFAIL, so a supervisor restarts it)
    │   └── CheckpointSaveError    a save before execute failed: nothing ran
    └── RunError               a run failed for a reason that is not the user's configuration
        ├── ModelError         a provider call failed, classified (``kind``), with HTTP status
        │                      and ``retry_after`` where the vendor gave them
        └── TurnNotStartedError    the daemon did not start the turn; nothing of it ran
            ├── LaneBusy           the lanes stayed full for the wait bound (``lane``,
            │                      ``kind``, ``waited_s``): try again later
            ├── NotAdmitted        its caller's admission check said no once it held its
            │                      lanes (a queued message dropped meanwhile)
            └── ShuttingDown       the daemon is draining: the turn is taken up again
                                   after the restart (channels) or refused (IPC)

Vendor SDK exceptions are translated in exactly one place per vendor
(``geode.providers._errors``); retry logic only ever sees :class:`ModelError`.
Control-flow signals (``ApprovalRequired``, ``StopTurn``) are not errors and do not live here.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "CheckpointSaveError",
    "ConfigError",
    "GeodeError",
    "LaneBusy",
    "ModelError",
    "ModelErrorKind",
    "NotAdmitted",
    "RunError",
    "ShuttingDown",
    "StoreError",
    "StoreUnavailableError",
    "TurnNotStartedError",
    "UnknownModelError",
]

ModelErrorKind = Literal[
    "auth",
    "bad_request",
    "rate_limit",
    "overloaded",
    "context_overflow",
    "transient",
    "fatal",
]


class GeodeError(Exception):
    """Root of every error GEODE raises on purpose."""


class ConfigError(GeodeError):
    """A configuration problem the user must fix; the message says what and how."""


class UnknownModelError(ConfigError):
    def __init__(self, model_id: str, close: list[str]) -> None:
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        super().__init__(
            f"Unknown model id {model_id!r}.{hint} Run `geode models` for the catalog, "
            f"or use `provider:model` (e.g. `openai:{model_id}`) for an endpoint outside it."
        )
        self.model_id = model_id
        self.close = close


class StoreError(GeodeError):
    """The durable store could not be used."""


class StoreUnavailableError(StoreError):
    """The store's server could not be reached; retrying later may work."""


class CheckpointSaveError(StoreError):
    """A checkpoint save failed; the work it guarded did not run."""


class RunError(GeodeError):
    """A run failed for a reason outside the user's configuration."""


class ModelError(RunError):
    """A classified provider failure."""

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind,
        provider: str = "",
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.provider = provider
        self.status_code = status_code
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in ("rate_limit", "overloaded", "transient")

    def __repr__(self) -> str:
        return f"ModelError(kind={self.kind!r}, status={self.status_code}, {self.args[0]!r})"


class TurnNotStartedError(RunError):
    """The daemon refused to start a turn: nothing of it ran, nothing was recorded."""


class LaneBusy(TurnNotStartedError):
    """The lanes stayed full for the whole wait bound; the request did not run."""

    def __init__(self, *, lane: str, kind: str, waited_s: float) -> None:
        self.lane = lane
        self.kind = kind
        self.waited_s = waited_s
        super().__init__(
            f"busy: the {lane} lane stayed full for {waited_s:.1f}s; try again later"
        )


class NotAdmitted(TurnNotStartedError):
    """The turn's caller said no when the turn got its lanes (``run_turn``'s ``admit``): its
    session was not opened, nothing of it ran. A channel's message that ``geode queue drop``
    took while it waited for a lane is one."""

    def __str__(self) -> str:
        return "the turn was not admitted when it got its lanes"


class ShuttingDown(TurnNotStartedError):
    """The daemon is draining and takes no new turns."""

    def __str__(self) -> str:
        return "the daemon is shutting down; try again later"
