"""The ``send_file`` tool: a channel session hands a workspace file to the people in the
thread.

Only the channel layer adds it (to the sessions of its turns), so it exists in channel
sessions only. It is an external effect (``safety="external"``): it runs when the binding
lists it in ``tools`` (allowed) or ``approve`` (an approver says yes for each call), and is
denied otherwise, like any other. The path is resolved like the file tools' (the race-free
workspace walk, GEODE's own files refused). Images, recognised by their content, go as
photos where the platform makes the difference (Telegram). The tool is built once per layer;
a call goes to the thread of the turn its session runs (``targets``, by session id). The
upload is exactly once across restarts: an outbox row keyed by the turn and the call
(``bots.uploads``); the tool is ``idempotent`` so that a turn resumed after a crash runs the
call again, which then finds the row instead of uploading twice.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from bots.events import ReplyTarget
from bots.format import human_size
from bots.port import PlatformClient
from bots.uploads import FileSender, UploadOutcome, image_type
from geode.tools.base import ToolContext, ToolDef, tool
from geode.tools.builtin import path_key, read_workspace_bytes
from geode.tools.errors import ToolFailure

__all__ = ["make_send_file"]

#: a caption longer than this is cut (Telegram's caption limit is the smallest)
CAPTION_MAX = 1024


def make_send_file(*, client: PlatformClient, sender: FileSender,
                   targets: Mapping[str, ReplyTarget]) -> ToolDef:
    """The tool of one layer's turns, sending through ``sender`` into the thread a session's
    running turn answers in (``targets``, by session id)."""

    def keys(args: dict[str, object], ctx: ToolContext) -> list[str]:
        return [path_key("file", ctx, str(args.get("path", "")))]

    @tool(safety="external", idempotent=True, resource_keys=keys, deadline_s=600.0)
    async def send_file(
        ctx: ToolContext,
        path: Annotated[str, Field(description="File path, relative to the workspace")],
        caption: Annotated[str | None, Field(
            description="Short text shown with the file (optional)")] = None,
    ) -> str:
        """Send a file of the workspace to the people in this chat thread (uploaded as an
        attachment; images are shown as pictures). Use it to hand over a report, an export,
        a log or a screenshot; the file itself must exist in the workspace."""
        target = targets.get(ctx.session_id)
        if target is None:
            raise ToolFailure("no thread to send to: this session has no turn running here")
        most = max(client.upload_limit(image=False), client.upload_limit(image=True))
        if most <= 0:
            raise ToolFailure(f"files cannot be sent on {client.platform}")
        shown, data = await asyncio.to_thread(read_workspace_bytes, ctx, path, max_bytes=most)
        if not data:
            raise ToolFailure(f"{shown} is empty; there is nothing to send")
        name = posixpath.basename(shown.replace("\\", "/")) or "file"
        image = image_type(data) is not None
        if image and len(data) > client.upload_limit(image=True):
            image = False  # too large for a photo: it still goes, as a file
        if len(data) > client.upload_limit(image=image):
            raise ToolFailure(f"{shown} is {human_size(len(data))}: over the "
                              f"{human_size(client.upload_limit(image=image))} {client.platform} "
                              "takes")
        outcome = await sender.send(
            session_key=ctx.session_id, turn_key=f"file:{ctx.turn_id}:{ctx.call_id}",
            target=target, filename=name, data=data,
            caption=(caption or "").strip()[:CAPTION_MAX], image=image)
        return _result(outcome, shown)

    return send_file


def _result(outcome: UploadOutcome, shown: str) -> str:
    size = human_size(outcome.file.size)
    what = "a picture" if outcome.file.image else "a file"
    if outcome.status == "sent":
        return f"sent {outcome.file.name} ({size}) to the thread as {what}"
    if outcome.status == "uncertain":
        raise ToolFailure(
            f"{shown} may or may not be in the thread: the upload was interrupted "
            f"({outcome.error or 'outcome unknown'}) and it was not sent again; ask before "
            "sending it once more")
    raise ToolFailure(f"{shown} was not sent: {outcome.error}")
