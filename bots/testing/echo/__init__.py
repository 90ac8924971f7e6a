"""A test-only chat platform ("echo chat"), proving a platform is one folder plus one
registration line: an in-process chat (:class:`EchoChat`), its options and spec, and its
connector on the shared :class:`~bots.connector.BaseConnector`. Nothing outside this folder
names it; a test registers it in the ``geode.platforms`` entry point group
(``echo = bots.testing.echo.options:SPEC``) as an installed outside package would.
"""

from bots.testing.echo.chat import EchoChat, EchoMessage

__all__ = ["EchoChat", "EchoMessage"]
