"""python-telegram-bot networking on aiohttp instead of httpx.

PTB's default ``HTTPXRequest`` (httpx + httpcore + anyio) costs a large share of the CPU of a
reply; aiohttp is already in the process (the webhook server, the fakes) and is cheaper per
request. :class:`AiohttpRequest` keeps the contract of PTB's ``BaseRequest``; status codes
are mapped to ``TelegramError`` subclasses by PTB itself (``BaseRequest._request_wrapper``).

TLS trusts the system's CA store (which honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``) plus
certifi's bundle, so hosts that worked with httpx (certifi) keep working, including slim images
without system CAs.

Not supported, on purpose: proxies (the session ignores ``HTTP(S)_PROXY``) and HTTP/2. A
deployment that needs either sets ``[channels.telegram] http_backend = "httpx"``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from typing import Literal

import aiohttp
import certifi
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, HTTPXRequest, RequestData

__all__ = ["AiohttpRequest", "HttpBackend", "build_request"]

HttpBackend = Literal["aiohttp", "httpx"]

_JSON_HEADERS = {"Content-Type": "application/json"}


class AiohttpRequest(BaseRequest):
    """PTB's ``BaseRequest`` on one ``aiohttp.ClientSession``.

    The session is created by :meth:`initialize` and closed by :meth:`shutdown`; the pair can
    be repeated. Timeouts follow ``HTTPXRequest`` (same defaults; ``None`` means no limit),
    mapped onto ``aiohttp.ClientTimeout``:

    * ``read_timeout`` → ``sock_read``: the longest gap between bytes of the response, as in
      httpx. aiohttp starts it once the request body is written.
    * ``connect_timeout`` → ``sock_connect``; ``connect_timeout + pool_timeout`` →
      ``connect`` (aiohttp's single budget for waiting for a pooled connection *and* opening
      a new one; no limit if either is ``None``).
    * ``write_timeout``: aiohttp has no per-write timeout. A body without files fits in the
      socket buffer, so it is not enforced there; an upload (files) is instead bounded as a
      whole by ``total = pool + connect + write + read`` when all four are finite. As in
      ``HTTPXRequest``, uploads default to ``media_write_timeout``.

    Proxies and HTTP/2 are not supported (use ``HTTPXRequest``).

    Args:
        connection_pool_size: the most connections open at once (``TCPConnector(limit=...)``).
        read_timeout: default seconds; see above.
        write_timeout: default seconds for requests without files.
        connect_timeout: default seconds to open a connection.
        pool_timeout: default seconds to wait for a free connection when all are busy.
        media_write_timeout: default write timeout for requests that upload files.
    """

    __slots__ = (
        "_connect_timeout",
        "_media_write_timeout",
        "_pool_size",
        "_pool_timeout",
        "_read_timeout",
        "_session",
        "_write_timeout",
    )

    def __init__(
        self,
        *,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        if connection_pool_size < 1:
            raise ValueError("connection_pool_size must be at least 1")
        self._pool_size = connection_pool_size
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        """The default read timeout (see :attr:`BaseRequest.read_timeout`)."""
        return self._read_timeout

    async def initialize(self) -> None:
        """Open the session (a no-op while one is open)."""
        ssl_context = await asyncio.to_thread(_ssl_context)  # reads CA files: off the loop
        # No await between the check and the assignment: concurrent calls open one session.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, ssl=ssl_context),
                headers={"User-Agent": self.USER_AGENT},
                timeout=aiohttp.ClientTimeout(),  # per request, see _timeout
                trust_env=False,  # no proxies from the environment: not supported here
            )

    async def shutdown(self) -> None:
        """Close the session and its connections (a no-op when closed)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """See :meth:`BaseRequest.do_request`.

        Raises:
            TimedOut: a timeout, including waiting for a pooled connection.
            NetworkError: the connection failed.
            RuntimeError: not initialized (PTB reports it as a ``NetworkError``).
        """
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data is not None and request_data.contains_files
        timeout = self._timeout(
            read_timeout, write_timeout, connect_timeout, pool_timeout, files=files
        )
        data: aiohttp.FormData | bytes | None = None
        headers = None
        if request_data is not None:
            if files:
                data = _multipart(request_data)
            elif params := request_data.parameters:
                # One JSON body (the Bot API takes application/json): a single dumps instead
                # of PTB's per-value encoding plus URL-encoding of the form HTTPXRequest sends.
                data = json.dumps(params, ensure_ascii=False).encode()
                headers = _JSON_HEADERS
        try:
            async with session.request(
                method, url, data=data, headers=headers, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise TimedOut(
                "Connect or pool timeout: no connection within the connect + pool timeouts "
                "(all pooled connections busy, or the host did not answer). The request was "
                "*not* sent to Telegram."
            ) from exc
        except TimeoutError as exc:  # includes aiohttp.ServerTimeoutError (a socket read)
            raise TimedOut(f"Timed out ({exc.__class__.__name__}: {exc})") from exc
        except aiohttp.ClientError as exc:
            # The class name helps when the message is empty (as in HTTPXRequest).
            raise NetworkError(f"aiohttp.{exc.__class__.__name__}: {exc}") from exc

    def _timeout(
        self,
        read: ODVInput[float],
        write: ODVInput[float],
        connect: ODVInput[float],
        pool: ODVInput[float],
        *,
        files: bool,
    ) -> aiohttp.ClientTimeout:
        read_s = self._read_timeout if isinstance(read, DefaultValue) else read
        connect_s = self._connect_timeout if isinstance(connect, DefaultValue) else connect
        pool_s = self._pool_timeout if isinstance(pool, DefaultValue) else pool
        write_s: float | None
        if isinstance(write, DefaultValue):
            write_s = self._media_write_timeout if files else self._write_timeout
        else:
            write_s = write
        acquire = None if connect_s is None or pool_s is None else connect_s + pool_s
        total = None
        if files and acquire is not None and write_s is not None and read_s is not None:
            total = acquire + write_s + read_s
        return aiohttp.ClientTimeout(
            total=total, connect=acquire, sock_connect=connect_s, sock_read=read_s
        )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


def _multipart(request_data: RequestData) -> aiohttp.FormData:
    # Fields first, then files, as httpx orders them. quote_fields=False: names and file names
    # go out as UTF-8 with quotes escaped, like httpx (aiohttp would %-encode file names).
    form = aiohttp.FormData(quote_fields=False, default_to_multipart=True)
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (filename, content, mime) in request_data.multipart_data.items():
        form.add_field(name, content, filename=filename, content_type=mime)
    return form


def build_request(
    backend: HttpBackend,
    *,
    connection_pool_size: int,
    read_timeout: float | None = 5.0,
    write_timeout: float | None = 5.0,
    connect_timeout: float | None = 5.0,
    pool_timeout: float | None = 1.0,
) -> BaseRequest:
    """The ``BaseRequest`` for ``[channels.telegram] http_backend``, same timeouts either way."""
    if backend == "httpx":
        return HTTPXRequest(
            connection_pool_size=connection_pool_size, read_timeout=read_timeout,
            write_timeout=write_timeout, connect_timeout=connect_timeout,
            pool_timeout=pool_timeout,
        )
    return AiohttpRequest(
        connection_pool_size=connection_pool_size, read_timeout=read_timeout,
        write_timeout=write_timeout, connect_timeout=connect_timeout, pool_timeout=pool_timeout,
    )
