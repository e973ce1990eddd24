"""The ``agentsnap ui`` web server: the standard library's threading HTTP server, read-only, on loopback.

Every request must carry the random token printed in the page's URL (``?token=`` or the
``X-Agentsnap-Token`` header) and a ``Host`` naming this loopback address; anything else gets 403.
Only GET and HEAD are served. Routes take snapshot ids and layer names, never file-system paths:
the page's own assets come from a fixed list inside the package.
"""

from __future__ import annotations

import hmac
import json
import secrets
import sys
import threading
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentsnap_core.errors import (
    AgentSnapError,
    AmbiguousId,
    InvalidInput,
    InvalidRefName,
    ObjectMissing,
    UnknownSnapshot,
)
from agentsnap_core.repository.repo import Repo
from agentsnap_core.repository.retention import SnapshotGone
from agentsnap_core.ui import api

HOST = "127.0.0.1"
TOKEN_HEADER = "X-Agentsnap-Token"
#: the page's assets: URL name -> content type (nothing else under /static/ exists)
STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


def _asset(name: str) -> bytes:
    return (resources.files("agentsnap_core.ui") / "static" / name).read_bytes()


class UIServer(ThreadingHTTPServer):
    """Serves one repository's snapshots to the page; ``url`` carries the token."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, repo: Repo, port: int = 0, token: str | None = None, quiet: bool = True) -> None:
        self.repo = repo
        self.token = token or secrets.token_urlsafe(24)
        self.quiet = quiet
        self.lock = threading.Lock()  # one store call at a time: the page is a single reader
        super().__init__((HOST, port), _Handler)
        self.port = int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def allowed_hosts(self) -> set[str]:
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}


def make_server(repo: Repo, port: int = 0, token: str | None = None, quiet: bool = True) -> UIServer:
    """A server bound to 127.0.0.1:``port`` (0: any free port); call ``serve_forever()`` to run it."""
    return UIServer(repo, port, token, quiet)


def _int(q: dict[str, list[str]], name: str, default: int | None) -> int | None:
    values = q.get(name)
    if not values or values[-1] == "":
        return default
    try:
        value = int(values[-1])
    except ValueError:
        raise InvalidInput(f"{name} must be an integer") from None
    if abs(value) > 10**12:
        raise InvalidInput(f"{name} is out of range")
    return value


def _text(q: dict[str, list[str]], name: str) -> str:
    value = (q.get(name) or [""])[-1]
    if len(value) > 200:
        raise InvalidInput(f"{name} is too long")
    return value


class _Handler(BaseHTTPRequestHandler):
    server: UIServer
    server_version = "agentsnap-ui"
    sys_version = ""

    # ------------------------------------------------------------------ plumbing
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if not self.server.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str, head_only: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in _SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def _json(self, status: int, data: Any, head_only: bool = False) -> None:
        body = json.dumps(data, sort_keys=True, default=str).encode()
        self._send(status, body, "application/json; charset=utf-8", head_only)

    def _error(self, status: HTTPStatus, message: str, head_only: bool = False) -> None:
        self._json(status, {"v": api.API_VERSION, "error": message, "status": int(status)}, head_only)

    def _authorised(self, query: dict[str, list[str]]) -> bool:
        host = self.headers.get("Host", "")
        if host not in self.server.allowed_hosts():
            return False
        given = self.headers.get(TOKEN_HEADER) or (query.get("token") or [""])[-1]
        return hmac.compare_digest(given.encode(), self.server.token.encode())

    # ------------------------------------------------------------------ verbs
    def do_GET(self) -> None:
        self._handle(head_only=False)

    def do_HEAD(self) -> None:
        self._handle(head_only=True)

    def _read_only(self) -> None:
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "agentsnap ui is read-only")

    do_POST = do_PUT = do_DELETE = do_PATCH = _read_only

    def _handle(self, head_only: bool) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        if not self._authorised(query):
            self._error(HTTPStatus.FORBIDDEN, "missing or wrong token: open the URL 'agentsnap ui' printed", head_only)
            return
        segments = parts.path.split("/")[1:]  # never unquoted: '%2e%2e' stays a literal that no route matches
        try:
            route = self._route(segments, query)
            if route is None:
                self._error(HTTPStatus.NOT_FOUND, "no such page", head_only)
                return
            status, body, ctype = route()
        except (InvalidInput, InvalidRefName, AmbiguousId) as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc), head_only)
            return
        except SnapshotGone as exc:  # expired, pruned or deleted: its layers were reclaimed on purpose
            self._error(HTTPStatus.GONE, str(exc), head_only)
            return
        except (UnknownSnapshot, ObjectMissing) as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc), head_only)
            return
        except AgentSnapError as exc:
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, str(exc), head_only)
            return
        except Exception:  # a bug or an unreadable object: say so, keep serving, details on stderr only
            traceback.print_exc(file=sys.stderr)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (details on the server's stderr)", head_only)
            return
        self._send(status, body, ctype, head_only)

    def _route(self, seg: list[str], q: dict[str, list[str]]) -> Callable[[], tuple[int, bytes, str]] | None:
        repo = self.server.repo
        n = len(seg)
        if seg in ([""], ["index.html"]):
            return self._index
        if n == 2 and seg[0] == "static" and seg[1] in STATIC:
            name = seg[1]
            return lambda: (200, _asset(name), STATIC[name])
        if n < 2 or seg[0] != "api":
            return None
        call: Callable[[], Any] | None = None
        if seg[1:] == ["refs"]:
            call = lambda: api.refs(repo)  # noqa: E731
        elif seg[1:] == ["graph"]:
            call = lambda: api.graph(  # noqa: E731
                repo,
                limit=_int(q, "limit", None),
                cursor=_int(q, "cursor", 0) or 0,
                agent=_text(q, "agent"),
                branch=_text(q, "branch"),
                thread=_text(q, "thread"),
                undo=_text(q, "undo") in ("1", "true"),
            )
        elif n == 3 and seg[1] == "snapshots":
            call = lambda: api.detail(repo, seg[2])  # noqa: E731
        elif n == 5 and seg[1] == "snapshots" and seg[3] == "layers":
            call = lambda: api.layer(  # noqa: E731
                repo, seg[2], seg[4], offset=_int(q, "offset", 0) or 0, limit=_int(q, "limit", None)
            )
        elif n == 4 and seg[1] == "diff":
            call = lambda: api.diff(repo, seg[2], seg[3])  # noqa: E731
        if call is None:
            return None
        found = call

        def run() -> tuple[int, bytes, str]:
            with self.server.lock:
                data = found()
            return 200, json.dumps(data, sort_keys=True, default=str).encode(), "application/json; charset=utf-8"

        return run

    def _index(self) -> tuple[int, bytes, str]:
        page = _asset("index.html").decode().replace("{{TOKEN}}", self.server.token)
        return 200, page.encode(), "text/html; charset=utf-8"
