"""Wire-level fakes of the chat platforms, on loopback, for the real SDK clients: our tests,
the offline demo and yours. Import them from their modules (``from bots.testing.discord
import FakeDiscord``); they pull in aiohttp only.

- :mod:`bots.testing.telegram` — the Bot API (``FakeTelegramServer``);
- :mod:`bots.testing.slack` — Web API, Socket Mode and the Events API (``FakeSlack``);
- :mod:`bots.testing.discord` — REST and the gateway (``FakeDiscord``);
- :mod:`bots.testing.telegram_demo` — the offline demo (``python -m bots.testing.telegram_demo``).

Production code never imports this package (``tests/test_architecture.py``).
"""
