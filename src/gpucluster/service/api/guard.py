"""The ASGI guard in front of every route: size and identity are checked before a body is read.

In order, for each HTTP request:

1. a body longer than :data:`~gpucluster.service.limits.MAX_BODY_BYTES` is refused with 413 from its
   ``Content-Length`` alone, before a byte of it is read (a body sent without a length is read up to the cap
   and refused the moment it passes it);
2. on ``/api/`` and ``/metrics`` the bearer token is checked (401 with the reason), so an anonymous caller
   never gets its body parsed; the caller is left in the scope for the routes (``deps.principal``);
3. every answer carries the security headers: a Content-Security-Policy that allows scripts only from this
   origin and framing by nobody, ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``, no referrer,
   and ``Cache-Control: no-store`` on API answers (they may hold tokens).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gpucluster.service.api.deps import PRINCIPAL_KEY
from gpucluster.service.auth import authenticate
from gpucluster.service.core import Service
from gpucluster.service.errors import ApiError, error_body
from gpucluster.service.limits import MAX_BODY_BYTES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROTECTED = ("/api/", "/metrics")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


async def _answer(send: Send, status: int, where: str, why: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(error_body(status, where, why)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"connection", b"close")]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """Wraps the FastAPI app (see the module docstring); ``service`` gives the token store."""

    def __init__(self, app: ASGIApp, service: Service, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.service = service
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        api = path.startswith(PROTECTED)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += SECURITY_HEADERS
                if api:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        length: str | None = None
        chunked = False
        authorization = ""
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                length = value.decode("latin-1")
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"authorization":
                authorization = value.decode("latin-1")
        if length is not None:
            if not length.strip().isdigit():
                await _answer(send_with_headers, 400, "headers.Content-Length", "not a number")
                return
            if int(length) > self.max_body:
                await _answer(send_with_headers, 413, "body",
                              f"request body of {int(length):,} bytes is larger than the limit of {self.max_body:,}")
                return
        if api:
            try:
                who = authenticate(self.service.store, authorization)
            except ApiError as exc:
                await _answer(send_with_headers, exc.status, exc.where, exc.why, exc.headers)
                return
            scope[PRINCIPAL_KEY] = who
        if chunked and length is None:
            buffered = await self._buffered(receive, send_with_headers)
            if buffered is None:
                return
            receive = buffered
        await self.app(scope, receive, send_with_headers)

    async def _buffered(self, receive: Receive, send: Send) -> Receive | None:
        """Read a body without a length up to the cap; answer 413 (and return None) past it."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _answer(send, 413, "body", f"request body is larger than the limit of {self.max_body:,} bytes")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay


__all__ = ["CSP", "PROTECTED", "SECURITY_HEADERS", "Guard"]
