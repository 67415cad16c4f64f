"""HTTP/1.1 POSTs over kept-alive connections: the few things the reproducer asks of HTTP.

Why not httpx or aiohttp's client: measured against the same local server on this 2-core
machine (200 sessions, one JSON POST each in a loop), httpx gave 45 requests/s (its pool
serialises under that many waiters), aiohttp's client 2 750 requests/s with its process
at 100 % of a core (about 360 µs of client CPU a request), and this module, on
`httptools` (the HTTP parser uvicorn uses), 5 400 requests/s with the server saturated
and the client at 65 % (about 90 µs a request). The harness must not be the bottleneck
of the load it makes, so it keeps this one: plain HTTP/1.1 or TLS, Content-Length or
chunked bodies, no redirects, no proxies, no retries.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

# A kept-alive connection idle longer than this is not reused: servers close idle ones
# (uvicorn, which SGLang runs, after 5 s), and a request written into a connection the
# server is closing would fail for no fault of the server being measured.
IDLE_REUSE_S = 3.0


class TransportError(Exception):
    """No complete HTTP response: the connection failed, closed early, or sent garbage."""

    def __init__(self, message: str, unanswered: bool = False) -> None:
        super().__init__(message)
        self.unanswered = unanswered  # closed before a byte of the response came back


@dataclass
class Response:
    status: int
    body: bytes
    first_byte: float | None = None  # perf_counter of the first body byte
    complete: bool = True  # False: the connection ended inside the body


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.served = 0  # responses read on this connection
        self.last_used = time.perf_counter()
        self._waiter: asyncio.Future[Response] | None = None
        self._body: list[bytes] = []
        self._on_body: Callable[[bytes], None] | None = None
        self._first_byte: float | None = None
        self._framed = False  # Content-Length or chunked: the body's end is known
        self._headers_done = False
        self._until_eof = False  # a body with neither length nor chunks ends at close

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(TransportError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(TransportError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self._waiter
        if w is None or w.done():
            return
        if self._headers_done and self._until_eof:
            self.on_message_complete()
            return
        if self._headers_done:
            # The body was cut: the caller decides whether a partial stream is a result.
            self._waiter = None
            w.set_result(self._response(complete=False))
            return
        why = f": {exc}" if exc else ""
        self._fail(TransportError(f"connection closed before a response{why}", unanswered=True))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        # Only how the body is framed matters here: nothing else is kept, or decoded.
        name = name.lower()
        if name == b"content-length" or (
            name == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._framed = True

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._until_eof = not self._framed

    def on_body(self, body: bytes) -> None:
        if self._first_byte is None:
            self._first_byte = time.perf_counter()
        # Only a 200's body streams to the caller: an error's body is kept for its message.
        if self._on_body is not None and self.parser.get_status_code() == 200:
            self._on_body(body)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        w = self._waiter
        self._waiter = None
        self.served += 1
        if not self.parser.should_keep_alive():
            self.close()
        if w is not None and not w.done():
            w.set_result(self._response(complete=True))

    # ours
    def _response(self, complete: bool) -> Response:
        return Response(
            self.parser.get_status_code(), b"".join(self._body), self._first_byte, complete
        )

    def _fail(self, exc: Exception) -> None:
        w = self._waiter
        self._waiter = None
        self.close()
        if w is not None and not w.done():
            w.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def send(self, data: bytes, on_body: Callable[[bytes], None] | None) -> asyncio.Future:
        assert self._waiter is None, "one request at a time on a connection"
        self._waiter = asyncio.get_running_loop().create_future()
        self._body, self._on_body, self._first_byte = [], on_body, None
        self._framed, self._headers_done, self._until_eof = False, False, False
        assert self.transport is not None
        self.transport.write(data)
        return self._waiter


class Client:
    """POSTs to one server, at most `max_connections` at once, each on a kept-alive
    connection of its own (a pool, most recently used first)."""

    def __init__(
        self, base_url: str, *, max_connections: int = 256, headers: dict[str, str] | None = None
    ) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        default_port = self.port == (443 if u.scheme == "https" else 80)
        host_header = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not default_port:
            host_header = f"[{self.host}]:{self.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._fixed = f"Host: {host_header}\r\nUser-Agent: pd-forensics-repro\r\n{extra}"
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def _connection(self, fresh: bool = False) -> _Connection:
        now = time.perf_counter()
        while self._idle and not fresh:
            conn = self._idle.pop()
            if not conn.closed and now - conn.last_used < IDLE_REUSE_S:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        except OSError as exc:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        return conn

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        content_type: str = "application/json",
        on_body: Callable[[bytes], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One request (`headers`: this one's own). `on_body` receives the body as it
        arrives (then `Response.body` is empty). Cancelling (a timeout) closes the
        connection: it is not reused."""
        own = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        head = (
            f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed}{own}"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        async with self._slots:
            conn = await self._connection()
            try:
                resp = await conn.send(head + body, on_body)
            except TransportError as exc:
                conn.close()
                if not (exc.unanswered and conn.served):
                    raise
                # A kept-alive connection the server had closed before it read this
                # request (the race every HTTP/1.1 client meets at the server's idle
                # timeout): the request was never received, so it goes once more on a
                # fresh connection. Not a retry of a request the server failed.
                conn = await self._connection(fresh=True)
                try:
                    resp = await conn.send(head + body, on_body)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                conn.close()
                raise
            conn.last_used = time.perf_counter()
            if not conn.closed and resp.complete:
                self._idle.append(conn)
            return resp

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
