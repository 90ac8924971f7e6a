"""``[channels.slack]``: the Slack connector's typed options and its platform spec.

Unknown keys are refused (:class:`bots.options.LayerOptions` forbids extras), so a misspelt
``base_ur`` is an error naming ``base_url``, never a silently ignored line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bots.options import LayerOptions, PlatformSpec, TokenSpec

#: ``bots.slack._mrkdwn.SLACK_LIMIT`` (spelt out here: this module imports no SDK or
#: renderer, the harness reads the spec in every process)
_SLACK_LIMIT = 3900

__all__ = ["SPEC", "SlackOptions"]


class SlackOptions(LayerOptions):
    """``[channels.slack]`` (CONTRACT.md): secrets are named by ``*_env`` keys."""

    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    base_url: str = "https://slack.com/api/"
    #: auto: Socket Mode when the app token is set, else HTTP Events API
    mode: Literal["auto", "socket", "http"] = "auto"
    http_host: str = "127.0.0.1"
    http_port: int = 3000
    http_path: str = "/slack/events"
    command: str = "/geode"
    #: try assistant.threads.setStatus (needs assistant:write); falls back per channel
    status_api: bool = True
    status_text: str = "is working…"
    #: with ``stream``: the answer streams by chat.startStream / appendStream / stopStream
    #: where Slack allows it (else, and with false, by paced chat.update edits)
    native_stream: bool = True
    #: the workspace's native streams a minute (chat.startStream / stopStream are Tier 2; a
    #: turn over the budget streams by edits); 0 = no limit
    stream_starts_per_min: float = Field(default=20.0, ge=0)
    #: the workspace's chat.appendStream calls a minute (Tier 4; one over the budget is
    #: skipped, the next carries its text); 0 = no limit
    stream_appends_per_min: float = Field(default=100.0, ge=0)
    #: the workspace's chat.update calls a minute (Tier 3): a streamed draft's edit (one
    #: that does not stream natively) is skipped while less than half is left, the next
    #: carries its text; answers always go; 0 = no limit
    updates_per_min: float = Field(default=50.0, ge=0)
    chunk_limit: int = _SLACK_LIMIT
    rate_limit_retries: int = 3
    history_page_size: int = 200
    catch_up_max_threads: int = 50
    ping_interval_s: float = 10.0


SPEC = PlatformSpec(
    name="slack", options=SlackOptions, connector="bots.slack:build_connector",
    tokens=(TokenSpec(option="bot_token_env", what="the Bot User OAuth Token (xoxb-…)"),),
    # bot / user / app-level tokens
    secret_shapes=(r"xox[abprs]-[A-Za-z0-9\-]{8,}", r"xapp-[A-Za-z0-9\-]{8,}"),
    extra="slack", sdk_modules=("slack_bolt", "slack_sdk"),
    team="workspace",
)
