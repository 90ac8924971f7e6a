"""The attacker's view of Slack's native stream (chat.appendStream only appends: what went
out cannot be taken back): a model streams keys into a Slack thread, a character or two per
delta, one of them with invisible characters between its letters. No call Slack receives
(the stream's start and appends, an update, the final message) holds any of a secret's
characters; the final message shows the masks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from slack_helpers import ALICE, CH, bot_messages, make, mention

from bots.testing.slack import FakeSlack
from geode.messages import StreamEvent
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.secret_redaction import MASK, register_secret

SHAPED = "xoxb-1234567890-SLACKattackTOKENabcdef"
WORDY = "QzvenSlackLettersOnlyPassKw"
register_secret(WORDY)
ZW = "\u200b"
ANSWER = (f"The token is {SHAPED} and the password is {ZW.join(WORDY)} so there.\n\n"
          "That is all. Done.")


class _Streaming(ScriptedProvider):
    def __init__(self, text: str, *, piece: int, every_s: float) -> None:
        super().__init__([text], repeat_last=True)
        self.piece, self.every_s = piece, every_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.complete(request)
        text = response.message.text
        for i in range(0, len(text), self.piece):
            await asyncio.sleep(self.every_s)
            yield StreamEvent(kind="text_delta", text=text[i:i + self.piece])
        yield StreamEvent(kind="done", response=response)


def _leaks(text: str) -> list[str]:
    visible = text.replace(ZW, "").replace("\\u200b", "")
    found = [s[i:i + 6] for s in (SHAPED[5:], WORDY) for i in range(len(s) - 5)
             if s[i:i + 6] in visible]
    return found + (["QzvenS-start"] if "Qz" in visible else [])


async def test_a_streamed_key_reaches_no_slack_call(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    stack = make(stacks, home, fake, provider=_Streaming(ANSWER, piece=2, every_s=0.01),
                 options={"stream": True, "progress_after_ms": 0,
                          "progress_edit_interval_s": 0.05})
    await stack.start()
    ts = await fake.user_posts(CH, mention("explain"), user=ALICE)

    def final() -> list[dict[str, Any]]:
        return [m for m in bot_messages(fake, CH, thread=ts) if m["text"].endswith("Done.")
                and not m.get("streaming")]

    await fake.wait_until(final, within=20)
    assert fake.calls_to("chat.appendStream"), "the answer was not streamed natively"
    for call in fake.calls:
        sent = json.dumps(call.params, default=str, ensure_ascii=False)
        assert not _leaks(sent), (call.method, _leaks(sent))
    assert final()[0]["text"].count(MASK) == 2
