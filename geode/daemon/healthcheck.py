"""``python -m geode.daemon.healthcheck``: exit 0 when this host's ``geode serve`` answers.

The container's HEALTHCHECK (``deploy/Dockerfile``, ``deploy/compose.yaml``) runs it. It reads the
same configuration as ``geode serve`` (``config.toml``, ``GEODE_HEALTH_HOST`` /
``GEODE_HEALTH_PORT``), so a changed ``health_port`` needs no second edit. Exit 1 with one line
on stderr otherwise.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

__all__ = ["main", "probe_url"]

_TIMEOUT_S = 5.0


def probe_url(host: str, port: int, path: str = "/healthz") -> str:
    """The URL to probe on this host for a server listening on ``host:port``."""
    if host in ("", "0.0.0.0"):  # listening everywhere: loopback reaches it
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def main(argv: list[str] | None = None) -> int:
    from geode.errors import GeodeError
    from geode.settings import load_settings

    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else "/healthz"
    try:
        settings, _ = load_settings()
    except GeodeError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    url = probe_url(settings.health_host, settings.health_port, path)
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"healthcheck: {url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
