"""The CLI's tests run commands against a short temporary GEODE_HOME (``home``)."""

from tests.daemon.conftest import home

__all__ = ["home"]
