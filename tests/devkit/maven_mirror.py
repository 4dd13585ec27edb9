"""A Maven repository on 127.0.0.1 for the fetch tests: real HTTP, with Range, offline.

It serves files from a mapping of URL path -> bytes (or a file on disk), honours
``Range: bytes=N-`` as Maven Central does (206 with Content-Range), or ignores it
when told to (200, as some proxies do), and records each request, so a test
can assert what the fetch asked for and how many bytes it was sent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from streamflow.devkit import kafka_jars

_RANGE = re.compile(r"bytes=(\d+)-$")


@dataclass
class Request:
    path: str
    range: str | None
    status: int
    sent: int


@dataclass
class Mirror:
    files: dict[str, bytes | Path]
    honour_range: bool = True
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def body(self, path: str) -> bytes | None:
        found = self.files.get(path)
        if isinstance(found, Path):
            return found.read_bytes()
        return found


def kafka_files(lib: Path) -> dict[str, bytes | Path]:
    """The pinned Kafka jars in Maven's layout, from a folder that has them all."""
    return {"/maven2" + jar.url(""): lib / jar.file_name for jar in kafka_jars.pins().jars}


@contextmanager
def serving(mirror: Mirror) -> Iterator[Mirror]:
    """Serve ``mirror`` until the block ends; ``mirror.url`` is its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = mirror.body(self.path)
            asked = self.headers.get("Range")
            if body is None:
                self._answer(404, b"", asked)
                return
            start = _RANGE.match(asked or "")
            if start and mirror.honour_range:
                offset = int(start.group(1))
                if offset >= len(body):
                    self._answer(416, b"", asked)
                    return
                self._answer(206, body[offset:], asked, first=offset, total=len(body))
            else:
                self._answer(200, body, asked)

        def _answer(
            self, status: int, body: bytes, asked: str | None, *, first: int = 0, total: int = 0
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {first}-{total - 1}/{total}")
            self.end_headers()
            self.wfile.write(body)
            mirror.requests.append(Request(self.path, asked, status, len(body)))

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    mirror.url = f"http://127.0.0.1:{server.server_address[1]}/maven2"
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()
