"""Process-wide CLI options set by the root callback."""

from __future__ import annotations

LOG_JSON = False
LOG_LEVEL: str | None = None
