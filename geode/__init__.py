"""GEODE: an agent harness run as a chat-ops service.

Heavy modules (SDKs, SQLAlchemy) are imported lazily by the commands that need them, so
``geode --help`` starts fast.
"""

from geode._imports import import_without as _import_without

__version__ = "0.1.0"
__all__ = ["__version__"]

# Before any module of ours imports it: structlog without rich (see geode._imports).
_import_without("structlog", "rich")
