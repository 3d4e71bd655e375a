"""Structured logs of ``gpucluster up``: one line per thing that happened, as JSON or logfmt.

Every line has ``ts`` (ISO 8601, UTC), ``level``, ``logger`` and ``msg``, plus the fields of its kind
(``event``):

- ``http``: the access log, one line per request: ``method``, ``path``, ``status``, ``ms``, ``actor`` (``admin``,
  ``tenant:NAME`` or ``-``), ``client``. Never the token or a body.
- ``job``: a user job's lifecycle and every scheduling decision: ``job``, ``name``, ``tenant``, ``kind``
  (``submitted``, ``running``, ``unschedulable``, ``evicted``, ``migrated``, ``succeeded`` ...), ``status``,
  ``t`` (runtime clock) and the message (where it runs, or the counted reasons why it cannot).
- ``remediation``: ``action``, ``target``, ``outcome`` (``done``, ``dry-run``, ``skipped``, ``failed``), ``alert``.
- ``alert``: ``alert``, ``target``, ``severity``, ``state`` (``firing`` or ``resolved``), ``silenced``.

Anything else the process logs (warnings, errors with their traceback in ``exc``) comes out in the same format.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import logging
import sys
import time
from typing import Any, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

FIELDS_KEY = "fields"
"""``logger.info(msg, extra={FIELDS_KEY: {...}})``: the structured fields of a line."""
ACCESS_LOGGER = "gpucluster.access"
EVENTS_LOGGER = "gpucluster.events"


class LogFormat(enum.StrEnum):
    JSON = "json"
    LOGFMT = "logfmt"


def _base(record: logging.LogRecord) -> dict[str, Any]:
    ts = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
    out: dict[str, Any] = {"ts": ts.replace("+00:00", "Z"), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()}
    fields = getattr(record, FIELDS_KEY, None)
    if isinstance(fields, dict):
        out.update(fields)
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_base(record), default=str, separators=(",", ":"))


def _logfmt_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    text = str(v)
    if text and all(c.isalnum() or c in "-_./:@+" for c in text):
        return text
    return json.dumps(text)  # quoted, with quotes, backslashes and newlines escaped


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs, values quoted when they hold spaces or quotes (Heroku's logfmt)."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _base(record).items())


def configure(fmt: LogFormat, level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send every log record of the process to ``stream`` (stderr) as ``fmt`` lines at ``level``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == LogFormat.JSON else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):  # uvicorn's own lines in the same format
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # replaced by AccessLog


def log_event(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={FIELDS_KEY: fields})


class AccessLog:
    """ASGI middleware writing one ``http`` line per request after it is answered (outside the guard, so
    refused requests are logged too, with the caller the guard identified)."""

    def __init__(self, app: ASGIApp, principal_key: str) -> None:
        self.app = app
        self.principal_key = principal_key
        self.log = logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            who = scope.get(self.principal_key)
            actor = getattr(who, "actor", "-")
            client = scope.get("client") or ("", 0)
            path = str(scope.get("path", ""))[:300]
            log_event(self.log, f"{scope.get('method', '')} {path} {status}", event="http",
                      method=scope.get("method", ""), path=path, status=status,
                      ms=round(1000 * (time.perf_counter() - start), 2), actor=actor, client=client[0])


__all__ = ["ACCESS_LOGGER", "EVENTS_LOGGER", "FIELDS_KEY", "AccessLog", "JsonFormatter", "LogFormat",
           "LogfmtFormatter", "configure", "log_event"]
