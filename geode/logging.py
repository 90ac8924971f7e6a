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

__all__ = ["LOG_LEVELS", "configure_logging", "parse_log_level", "redaction_processor"]

#: libraries whose INFO lines are their own bookkeeping (alembic's plugin set-up and each
#: migration step, a line per HTTP request, an MCP server's per-request line): shown from
#: WARNING at INFO, everything at DEBUG. GEODE logs what matters of it (``store.migrated``).
_CHATTY = ("alembic", "httpx", "httpcore", "mcp.server.lowlevel.server")


def redaction_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Strip secrets from every key and value of a log event, whatever the renderer."""
    cleaned = redact(dict(event_dict))
    event_dict.clear()
    event_dict.update(cleaned)
    return event_dict


#: what ``--log-level`` / ``log_level`` take (case does not matter)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_log_level(
    level: str, *, what: str = "log level (log_level in config.toml, GEODE_LOG_LEVEL)"
) -> int:
    """The stdlib level of ``level``; anything else is a ConfigError with the close match
    (an unknown level used to mean WARNING, silently)."""
    import difflib

    name = level.strip().upper()
    if name not in LOG_LEVELS:
        from geode.errors import ConfigError

        close = difflib.get_close_matches(name, LOG_LEVELS, n=1, cutoff=0.7)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ConfigError(f"Unknown {what} {level!r}.{hint} Use one of {', '.join(LOG_LEVELS)}.")
    return int(logging.getLevelNamesMapping()[name])


def configure_logging(
    *, json: bool = False, level: str = "WARNING", stream: TextIO | None = None
) -> None:
    """Configure structlog and stdlib logging (SDK loggers go through the same redaction)."""
    out = stream or sys.stderr
    lvl = parse_log_level(level)
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
    if lvl > logging.DEBUG:
        handler.addFilter(_sdk_tracebacks_below_debug)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if lvl <= logging.DEBUG
                                         else max(lvl, logging.WARNING))


#: SDK loggers whose errors GEODE reports itself, in its own words (a misbehaving MCP
#: server is a ``[FAIL]`` line / an ``mcp server failed`` event, not the SDK's traceback)
_QUIET_TRACEBACK_LOGGERS = ("mcp.",)


def _sdk_tracebacks_below_debug(record: logging.LogRecord) -> bool:
    """Keep the record, drop its traceback: the exception's one line is appended instead."""
    if record.exc_info and record.name.startswith(_QUIET_TRACEBACK_LOGGERS):
        exc = record.exc_info[1]
        if exc is not None:
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
            record.args = None
        record.exc_info = None
        record.exc_text = None
    return True
