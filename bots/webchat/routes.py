"""The web chat's pages, mounted on the console's application (:func:`mount`).

Every route runs behind the console's security (``bots.console.app``): a signed-in session,
the CSRF token on every POST, same-origin POSTs only, the strict Content-Security-Policy
(the page's one script is ``/chat/static/webchat.js``, from this server). Here:

* **Who sees what.** A person chats as their ``webchat:NAME`` identity: they open threads on
  the web-chat bindings, post and click in the threads they opened, and see only those. An
  identity who sees a binding in the console (an operator, the binding's approvers) may
  read its web-chat threads too; a ``webchat`` one among them may click Approve / Deny.
  Everything else answers 404, whether it exists or not.
* **Inputs are bounded**: a message's length (``max_message_chars``), a file's size
  (``max_file_mb``), names and ids by pattern. A file comes in as a small multipart form
  (within the console's request limit) or as the raw body of a POST (the page's script),
  read up to the limit and no further.
* **No action by GET**; a file goes out as a download (``attachment``), never rendered.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import structlog
from aiohttp import web

from bots.console.app import ACCESS, CSRF, DEPS_KEY, IDENTITY, refuse, see_other, wants_json
from bots.store import WebChatRecords
from bots.webchat import _hub
from bots.webchat.options import WORKSPACE, WebChatOptions

if TYPE_CHECKING:
    import jinja2

    from bots.console.access import Access, Identity
    from bots.store.webchat import WebChatMessage, WebChatThread
    from geode.settings import BindingSettings

__all__ = ["mount"]

log = structlog.get_logger(__name__)

_HERE = Path(__file__).resolve().parent
_CHANNEL = re.compile(r"^[\w.@:+-]{1,100}$")
_ROOT = re.compile(r"^\d{1,18}$")
_SHORT_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_VERBS = frozenset({"approve", "deny"})
#: a comment line this often keeps proxies from closing an idle stream
KEEPALIVE_S = 15.0

_ENV = web.AppKey("webchat_jinja", object)
_CLOSING = web.AppKey("webchat_closing", asyncio.Event)


def mount(app: web.Application) -> None:
    """Add the web chat's routes to the console's application."""
    app[_ENV] = _jinja_env()
    closing = app[_CLOSING] = asyncio.Event()

    async def close_streams(_app: web.Application) -> None:
        closing.set()

    app.on_shutdown.append(close_streams)
    app.router.add_get("/chat", chat_index)
    app.router.add_post("/chat", new_thread)
    app.router.add_get("/chat/files/{file}", download)
    app.router.add_get("/chat/static/webchat.js", _script)
    app.router.add_get("/chat/{channel}/{root}", thread_page)
    app.router.add_post("/chat/{channel}/{root}", post_message)
    app.router.add_post("/chat/{channel}/{root}/upload", upload)
    app.router.add_post("/chat/{channel}/{root}/approvals/{message}", decide)
    app.router.add_get("/chat/{channel}/{root}/events", events)


def _jinja_env() -> jinja2.Environment:
    import jinja2

    from bots.console.app import jinja_env

    env = jinja_env()  # the console's filters and its base.html
    env.loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(_HERE / "templates")),
                                      env.loader or jinja2.BaseLoader()])
    return env


_SCRIPT = (_HERE / "static" / "webchat.js").read_bytes()


async def _script(_request: web.Request) -> web.Response:
    return web.Response(body=_SCRIPT, content_type="text/javascript",
                        headers={"Cache-Control": "max-age=300"})


def _render(request: web.Request, template: str, data: dict[str, Any], *,
            status: int = 200) -> web.Response:
    if wants_json(request):
        return web.json_response(data, status=status,
                                 dumps=lambda v: json.dumps(v, default=str))
    env: Any = request.app[_ENV]
    who = request.get(IDENTITY)
    html = env.get_template(template).render(**data, me=str(who) if who else "",
                                             csrf=request.get(CSRF, ""), path=request.path)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


# -- who may do what -----------------------------------------------------------------------------


def _chatter(who: Identity) -> str | None:
    """The web-chat user id of a signed-in identity (None: it reads, it does not chat)."""
    return who.user_id if who.platform == "webchat" else None


def _connector(request: web.Request) -> _hub.ChatEndpoint | None:
    return _hub.connector_for(request.app[DEPS_KEY].store)


def _records(request: web.Request) -> WebChatRecords:
    return WebChatRecords(store=request.app[DEPS_KEY].store)


async def _webchat_bindings(request: web.Request) -> list[BindingSettings]:
    return [b for b in await request.app[DEPS_KEY].bindings() if b.platform == "webchat"]


def _reads_channel(access: Access, who: Identity, channel: str) -> bool:
    return access.sees_channel(who, "webchat", WORKSPACE, channel)


async def _visible_thread(request: web.Request) -> WebChatThread | None:
    """The thread of the URL when the signed-in identity may see it."""
    channel = unquote(request.match_info["channel"])
    root = request.match_info["root"]
    if not _CHANNEL.match(channel) or not _ROOT.match(root):
        return None
    thread = await _records(request).thread(channel, root)
    if thread is None:
        return None
    who, access = request[IDENTITY], request[ACCESS]
    if thread.owner == _chatter(who) or _reads_channel(access, who, channel):
        return thread
    return None


def _thread_url(t: WebChatThread) -> str:
    return f"/chat/{quote(t.channel, safe='')}/{t.thread_root}"


def _shown(m: WebChatMessage, who: Identity) -> bool:
    return not m.visible_to or m.visible_to == _chatter(who)


def _not_found(request: web.Request) -> web.Response:
    return refuse(request, 404, "No such web-chat thread (or not one you may see).")


def _options(request: web.Request) -> WebChatOptions:
    connector = _connector(request)
    return connector.opts if connector is not None else WebChatOptions()


# -- pages ---------------------------------------------------------------------------------------


async def chat_index(request: web.Request) -> web.Response:
    """The signed-in person's threads (and those of the bindings they see), and a form to
    open a new one."""
    who, access = request[IDENTITY], request[ACCESS]
    bindings = await _webchat_bindings(request)
    readable = [b.channel for b in bindings if _reads_channel(access, who, b.channel)]
    me = _chatter(who)
    threads = await _records(request).threads(owner=me, channels=readable)
    return _render(request, "chat_index.html", {
        "title": "Web chat",
        "served": _connector(request) is not None,
        "chatter": me or "",
        "channels": [b.channel for b in bindings] if me else [],
        "threads": [{"channel": t.channel, "thread_root": t.thread_root, "owner": t.owner,
                     "title": t.title, "created_ms": t.created_ms, "url": _thread_url(t)}
                    for t in threads],
    })


async def new_thread(request: web.Request) -> web.Response:
    """Open a thread on a web-chat binding's channel with its first message."""
    who = request[IDENTITY]
    me = _chatter(who)
    connector = _connector(request)
    if me is None:
        return refuse(request, 403, f"{who} reads the web chat; sign in as a webchat:NAME "
                                    "identity to chat.")
    if connector is None:
        return refuse(request, 404, "The web chat is not served ([channels.webchat]).")
    form = await request.post()
    channel = str(form.get("channel", ""))
    if channel not in {b.channel for b in await _webchat_bindings(request)}:
        return refuse(request, 400, "No web-chat binding has this channel.")
    text = _text(form.get("text"), connector.opts.max_message_chars)
    if isinstance(text, web.Response) or not text:
        return text if isinstance(text, web.Response) else refuse(
            request, 400, "Write a message to start the thread.")
    message = await connector.post(channel=channel, thread_root=None, sender=me, text=text)
    t = await _records(request).thread(channel, message.thread_root)
    assert t is not None
    return _after_post(request, t, message)


def _text(value: Any, limit: int) -> str | web.Response:
    text = (value if isinstance(value, str) else "").replace("\r\n", "\n").strip()
    if len(text) > limit:
        return web.Response(status=413, text=f"A message is at most {limit} characters.")
    return text


def _after_post(request: web.Request, t: WebChatThread, m: WebChatMessage) -> web.Response:
    if wants_json(request):
        return web.json_response({"thread": _thread_url(t), "message": m.to_json()})
    return see_other(_thread_url(t))


async def thread_page(request: web.Request) -> web.Response:
    t = await _visible_thread(request)
    if t is None:
        return _not_found(request)
    who = request[IDENTITY]
    messages, last = await _records(request).messages(t.channel, t.thread_root)
    opts = _options(request)
    return _render(request, "chat_thread.html", {
        "title": t.title or "Web-chat thread",
        "thread": {"channel": t.channel, "thread_root": t.thread_root, "owner": t.owner},
        "url": _thread_url(t),
        "may_post": t.owner == _chatter(who),
        "may_click": _chatter(who) is not None,
        "bot_name": opts.bot_name,
        "max_file_bytes": int(opts.max_file_mb * 1024 * 1024),
        "last_change": last,
        "messages": [m.to_json() for m in messages if _shown(m, who)],
    })


async def _own_thread(
    request: web.Request,
) -> tuple[WebChatThread, _hub.ChatEndpoint] | web.Response:
    """The URL's thread when it is the signed-in person's own, with the connector serving it
    (what writing into a thread needs), or the refusal to answer with."""
    t = await _visible_thread(request)
    connector = _connector(request)
    if t is None or t.owner != _chatter(request[IDENTITY]):
        return _not_found(request)
    if connector is None:
        return refuse(request, 404, "The web chat is not served ([channels.webchat]).")
    return t, connector


async def post_message(request: web.Request) -> web.Response:
    """A message (and a small file, as a multipart form) into one's own thread."""
    found = await _own_thread(request)
    if isinstance(found, web.Response):
        return found
    t, connector = found
    form = await request.post()
    text = _text(form.get("text"), connector.opts.max_message_chars)
    if isinstance(text, web.Response):
        return text
    file = None
    field = form.get("file")
    if isinstance(field, web.FileField) and field.filename:
        data = field.file.read(connector.upload_limit(image=False) + 1)
        if len(data) > connector.upload_limit(image=False):
            return web.Response(status=413, text="The file is over the web chat's limit.")
        file = (_filename(field.filename), field.content_type or "application/octet-stream",
                data)
    if not text and file is None:
        return refuse(request, 400, "Write a message or choose a file.")
    message = await connector.post(channel=t.channel, thread_root=t.thread_root,
                                   sender=t.owner, text=text, file=file)
    return _after_post(request, t, message)


def _filename(raw: str) -> str:
    name = Path(unquote(raw).replace("\\", "/")).name
    name = "".join(c for c in name if c.isprintable())[:200].strip(". ")
    return name or "upload"


async def upload(request: web.Request) -> web.Response:
    """A file as the raw body of the POST (``X-Filename``; ``?text=`` a caption), read up
    to the web chat's limit: the page's script sends files this way, past the console's
    small limit on forms."""
    found = await _own_thread(request)
    if isinstance(found, web.Response):
        return found
    t, connector = found
    limit = connector.upload_limit(image=False)
    if (request.content_length or 0) > limit:
        return web.Response(status=413, text="The file is over the web chat's limit.")
    name = _filename(request.headers.get("X-Filename", ""))
    text = _text(request.query.get("text", ""), connector.opts.max_message_chars)
    if isinstance(text, web.Response):
        return text
    chunks: list[bytes] = []
    size = 0
    while True:
        piece = await request.content.readany()
        if not piece:
            break
        size += len(piece)
        if size > limit:
            return web.Response(status=413, text="The file is over the web chat's limit.")
        chunks.append(piece)
    if not size:
        return refuse(request, 400, "The file is empty.")
    mime = request.headers.get("X-Content-Type", "") or "application/octet-stream"
    message = await connector.post(channel=t.channel, thread_root=t.thread_root,
                                   sender=t.owner, text=text,
                                   file=(name, mime[:100], b"".join(chunks)))
    return _after_post(request, t, message)


async def decide(request: web.Request) -> web.Response:
    """A click on Approve / Deny: ``/approve ID`` or ``/deny ID`` from the clicker, into
    the thread (the layer checks they are an approver; the decision is the durable one)."""
    t = await _visible_thread(request)
    connector = _connector(request)
    who = request[IDENTITY]
    me = _chatter(who)
    if t is None or connector is None:
        return _not_found(request)
    if me is None:
        return refuse(request, 403, f"{who} cannot click in the web chat (sign in as a "
                                    "webchat:NAME identity, or decide on Approvals).")
    form = await request.post()
    verb, message_id = str(form.get("decision", "")), request.match_info["message"]
    if verb not in _VERBS or not _ROOT.match(message_id):
        return refuse(request, 400, "Approve or deny a request of this thread.")
    m = await _records(request).message(int(message_id))
    if (m is None or m.channel != t.channel or m.thread_root != t.thread_root
            or not m.short_id or not _SHORT_ID.match(m.short_id)):
        return _not_found(request)
    await connector.click(channel=t.channel, thread_root=t.thread_root, message_id=m.id,
                          sender=me, verb=verb, short_id=m.short_id)
    if wants_json(request):
        return web.json_response({"clicked": verb, "request": m.short_id})
    return see_other(_thread_url(t))


async def download(request: web.Request) -> web.StreamResponse:
    """A file of a thread the identity may see, as a download."""
    raw = request.match_info["file"]
    found = await _records(request).file(int(raw)) if _ROOT.match(raw) else None
    if found is None:
        return _not_found(request)
    f, data = found
    t = await _records(request).thread(f.channel, f.thread_root)
    who, access = request[IDENTITY], request[ACCESS]
    if t is None or not (t.owner == _chatter(who) or _reads_channel(access, who, t.channel)):
        return _not_found(request)
    return web.Response(body=data, content_type="application/octet-stream", headers={
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(f.name, safe='')}"})


async def events(request: web.Request) -> web.StreamResponse:
    """The thread's changes as server-sent events: ``message`` with the message as it is
    now (sent, edited live, reacted to, deleted); the id resumes a reconnecting browser."""
    t = await _visible_thread(request)
    if t is None:
        return _not_found(request)
    who = request[IDENTITY]
    given = request.headers.get("Last-Event-ID", "") or request.query.get("after", "")
    after = int(given) if given.isdigit() else 0
    records = _records(request)
    poll = _options(request).poll_interval_s
    closing = request.app[_CLOSING]
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store",
        "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
    except ConnectionResetError:  # the browser left (a navigation) before the stream began
        return response
    quiet = 0.0
    try:
        await response.write(b": live\n\n")
        while not closing.is_set():
            found = await records.changes(t.channel, t.thread_root, after=after)
            for change_id, m in found:
                after = change_id
                if _shown(m, who):
                    data = json.dumps(m.to_json(), ensure_ascii=False)
                    await response.write(
                        f"id: {change_id}\nevent: message\ndata: {data}\n\n".encode())
            quiet = 0.0 if found else quiet + poll
            if quiet >= KEEPALIVE_S:
                await response.write(b": keepalive\n\n")
                quiet = 0.0
            try:
                await asyncio.wait_for(closing.wait(), poll)
            except TimeoutError:
                pass
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response
