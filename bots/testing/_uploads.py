"""What the three wire fakes share about uploads: holding their answers.

A test calls :meth:`UploadHold.hold_upload_answers` so that an upload takes effect on the
fake's side while its HTTP answer waits (the client can be killed between the two), then
:meth:`UploadHold.release_upload_answers`. A fake awaits :meth:`UploadHold._held_upload`
after it has recorded an upload and before it answers.
"""

from __future__ import annotations

import asyncio


class UploadHold:
    """Mixin for a wire fake: upload answers that can be held back."""

    _upload_hold: asyncio.Event | None = None

    def hold_upload_answers(self) -> None:
        """From now on an upload takes effect but its answer waits for
        :meth:`release_upload_answers` (the client can die between the two)."""
        self._upload_hold = asyncio.Event()

    def release_upload_answers(self) -> None:
        """Answer the held uploads, and hold no more."""
        if self._upload_hold is not None:
            self._upload_hold.set()
            self._upload_hold = None

    async def _held_upload(self) -> None:
        hold = self._upload_hold
        if hold is not None:
            await hold.wait()
