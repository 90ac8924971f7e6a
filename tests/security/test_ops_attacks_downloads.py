"""Issue #30 finding 10, the shared part: a download goes only to the allowed origins (each
redirect too), a credential header never reaches another origin, and Telegram's
``file_path`` stays beneath the bot's own file folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots._download import check_url, origin, stream_to_file, telegram_file_url
from bots.port import AttachmentRefused
from tests.security._evil import LOOT, evil_server

BASE = "https://api.telegram.org/file/bot123:ABC"


@pytest.mark.parametrize("path", [
    "../../_ctl/calls", "documents/../../bot123:ABC/getMe", "/etc/passwd", "documents/./a",
    "documents//a", "documents/%2e%2e/%2e%2e/x", "documents/a?x=1", "documents/a#f",
    "documents\\..\\x", "", "documents/a\x00", "..", "photos/../../../metrics",
])
def test_a_telegram_file_path_cannot_leave_the_bot_file_folder(path: str) -> None:
    with pytest.raises(AttachmentRefused):
        telegram_file_url(BASE, path)


def test_a_plain_telegram_file_path_is_fetched_beneath_the_folder() -> None:
    assert telegram_file_url(BASE, "documents/file_12.pdf") == f"{BASE}/documents/file_12.pdf"


@pytest.mark.parametrize("url", [
    "https://files.slack.com.evil.example/x", "https://evil.example/files.slack.com/x",
    "https://files.slack.com@evil.example/x", "https://user:pw@files.slack.com/x",
    "http://files.slack.com/x", "https://files.slack.com:8443/x", "ftp://files.slack.com/x",
    "https://files.slack.com\\@evil.example/x", "https:/files.slack.com/x", "file:///etc/passwd",
])
def test_only_the_allowed_origins_pass(url: str) -> None:
    with pytest.raises(AttachmentRefused):
        check_url(url, ("https://files.slack.com",))


def test_allowed_origins_and_configured_bases_pass() -> None:
    allowed = ("https://files.slack.com", "http://127.0.0.1:8080/api/")
    assert check_url("https://FILES.slack.com:443/files-pri/T1/a.csv", allowed)
    assert check_url("http://127.0.0.1:8080/files-pri/F1/a", allowed)
    assert origin("http://127.0.0.1/x") == "http://127.0.0.1:80"


async def test_a_redirect_to_another_origin_is_not_followed_and_gets_no_token(
        tmp_path: Path) -> None:
    async with evil_server() as target, evil_server(redirect_to=target.url + "/metrics") as hop:
        with pytest.raises(AttachmentRefused):
            await stream_to_file(hop.url + "/file", tmp_path / "f", max_bytes=1 << 20,
                                 headers={"Authorization": "Bearer xoxb-SECRET"},
                                 allowed=(hop.url,))
        assert len(hop.hits) == 1 and hop.hits[0]["Authorization"] == "Bearer xoxb-SECRET"
        assert target.hits == []
        assert not (tmp_path / "f").exists()
        # allowed there too: followed, but the token stays with the origin it was meant for
        got = await stream_to_file(hop.url + "/file", tmp_path / "g", max_bytes=1 << 20,
                                   headers={"Authorization": "Bearer xoxb-SECRET"},
                                   allowed=(hop.url, target.url))
        assert got == len(LOOT)
        assert [h.get("Authorization") for h in target.hits] == [None]
