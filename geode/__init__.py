"""GEODE: an agent harness run as a chat-ops service.

Heavy modules (SDKs, SQLAlchemy) are imported lazily by the commands that need them, so
``geode --help`` starts fast.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
