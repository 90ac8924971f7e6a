"""structlog set-up: console for humans, JSON with ``--log-json``; secrets always redacted.

Context (platform, channel, thread, session_id, turn_id) is bound once at each entry with
``structlog.contextvars.bind_contextvars``; the merge processor adds it to every line.
Model and tool payloads are not logged by default.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from types import TracebackType
from typing import Any, TextIO

import structlog

from geode.secret_redaction import redact

__all__ = [
    "LOG_LEVELS",
    "TracebackThrottle",
    "configure_logging",
    "parse_log_level",
    "redaction_processor",
    "throttle_tracebacks",
]

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


class TracebackThrottle:
    """A structlog processor: a full traceback once per distinct error per ``window_s``.

    Every event logged with an exception (``exc_info``, ``log.exception``) gets
    ``error_class`` (and ``error``, the message, if the call did not give one): one line per
    failed operation says what failed. Its traceback is kept the first time an error is
    seen, and then at most once per ``window_s`` for the same error, where "the same" is
    the event name, the exception's class and the place it was raised (file and line of the
    innermost frame). The repeats say ``traceback="repeated; shown at most once per 60s"``.
    A store outage used to print a ~115-line traceback per failed job (~2,300 lines for a
    0.24 s PostgreSQL restart); now it prints one per distinct failure a minute.
    """

    def __init__(
        self, *, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.clock = clock
        self._shown: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()  # stdlib records may come from worker threads

    def __call__(
        self, _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        exc = _exception_of(event_dict.get("exc_info"))
        if exc is None:
            return event_dict
        event_dict.setdefault("error_class", type(exc).__name__)
        if "error" not in event_dict:
            event_dict["error"] = " ".join(str(exc).split())[:300]
        key = (str(event_dict.get("event", "")), _qualname(exc), _raised_at(exc.__traceback__))
        now = self.clock()
        with self._lock:
            last = self._shown.get(key)
            if last is not None and now - last < self.window_s:
                event_dict.pop("exc_info", None)
                event_dict["traceback"] = (
                    f"repeated; shown at most once per {self.window_s:.0f}s")
                return event_dict
            self._shown[key] = now
            if len(self._shown) > 4096:  # bounded: forget what is past its window
                self._shown = {k: t for k, t in self._shown.items()
                               if now - t < self.window_s}
        return event_dict


def _exception_of(exc_info: Any) -> BaseException | None:
    if exc_info is None or exc_info is False:
        return None
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    if exc_info is True:
        return sys.exc_info()[1]
    return None


def _qualname(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def _raised_at(tb: TracebackType | None) -> str:
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return ""
    return f"{last.tb_frame.f_code.co_filename}:{last.tb_lineno}"


#: the process's throttle (tests may build their own :class:`TracebackThrottle`)
throttle_tracebacks = TracebackThrottle()


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
        throttle_tracebacks,
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
    # stdlib loggers (httpx, anthropic, the platforms' SDKs) → same redaction and renderer.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                throttle_tracebacks,
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
