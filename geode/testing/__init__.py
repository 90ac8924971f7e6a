"""Test doubles that ship with GEODE, for our tests, the offline demo and yours.

- :class:`~geode.providers.scripted.ScriptedProvider`: a model that replays a script.
- Wire-level fakes on loopback, for the real SDK clients: ``fake_anthropic``, ``fake_openai``,
  ``fake_telegram``, ``fake_slack``, ``fake_discord``. Import them from their modules
  (``from bots.testing.discord import FakeDiscord``); they pull in aiohttp only.
"""

from geode.providers.scripted import ScriptedProvider, ToolCall

__all__ = ["ScriptedProvider", "ToolCall"]
