"""The Slack connector (slack-bolt / slack_sdk): Socket Mode, or HTTP Events API with
signature verification; mrkdwn rendering; ``/geode`` slash command."""

from bots.slack._mrkdwn import SLACK_LIMIT, chunk_mrkdwn, markdown_to_mrkdwn, render_progress
from bots.slack.connector import SLACK_HELP, SlackConnector, SlackOptions

__all__ = [
    "SLACK_HELP",
    "SLACK_LIMIT",
    "SlackConnector",
    "SlackOptions",
    "chunk_mrkdwn",
    "markdown_to_mrkdwn",
    "render_progress",
]
