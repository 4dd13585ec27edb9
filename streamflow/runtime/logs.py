"""Structured logs: every line names the app, the streamlet and the replica.

Two formats: ``text`` (logfmt-like, for people and ``streamflow run``) and
``json`` (one object a line, for log collectors in a cluster).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["configure_logging"]

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class _Formatter(logging.Formatter):
    def __init__(self, *, fmt: str, fields: dict[str, Any]) -> None:
        super().__init__()
        self.json = fmt == "json"
        self.fields = fields

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in record.__dict__.items() if k not in _RESERVED}
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if self.json:
            return json.dumps(
                {
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
                    "level": record.levelname.lower(),
                    **self.fields,
                    "logger": record.name,
                    "message": message,
                    **extra,
                },
                default=str,
            )
        pairs = " ".join(f"{k}={v}" for k, v in {**self.fields, **extra}.items())
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        return f"{stamp} {record.levelname:<7} {message}  {pairs}"


def configure_logging(*, fmt: str, level: str = "INFO", **fields: Any) -> None:
    """Route the root logger to stderr with the given format and fixed fields."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(fmt=fmt, fields=fields))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO: one line per model-server call is noise
    # (httpx2 is the fork that confluent-kafka's schema registry client uses)
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
