"""structlog set-up: console for humans, JSON with ``--log-json``; secrets always redacted.

Context (platform, channel, thread, session_id, turn_id) is bound once at each entry with
``structlog.contextvars.bind_contextvars``; the merge processor adds it to every line.
Model and tool payloads are not logged by default.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from geode.redact import redact

__all__ = ["configure_logging", "redaction_processor"]


def redaction_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Strip secrets from every key and value of a log event, whatever the renderer."""
    cleaned = redact(dict(event_dict))
    event_dict.clear()
    event_dict.update(cleaned)
    return event_dict


def configure_logging(
    *, json: bool = False, level: str = "WARNING", stream: TextIO | None = None
) -> None:
    """Configure structlog and stdlib logging (SDK loggers go through the same redaction)."""
    out = stream or sys.stderr
    lvl = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redaction_processor,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (httpx, anthropic, discord, telegram) → same redaction and renderer.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                redaction_processor,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
