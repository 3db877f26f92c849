"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies.

Implements ``POST /v1/chat/completions`` (streaming SSE and not) and
``GET /v1/models``.  Replies come from a queue you fill before (or while) the
code under test talks to it, so tests exercise the real ``openai`` SDK, real
sockets, real retries and real timeouts — no mocks.

Usage::

    from tests.openai_server import ScriptedServer, Reply

    with ScriptedServer() as srv:
        srv.add(Reply(status=429))                 # first request: rate limited
        srv.add("<<<<<<< SEARCH ...")              # second: a patch
        srv.add(Reply(content="plan text"), role="planner")   # only for planner calls
        srv.add(Reply(content="slow", chunk_chars=1, chunk_delay_s=1.0))  # a token a second
        srv.add(Reply(content="half", finish_reason=None))   # a stream without its finish reason
        srv.add(Reply(content="half", cut=True))             # the connection drops mid-stream
        srv.add(Reply(content="x" * 5_000_000, chunk_chars=4096))  # a 5 MB reply
        client = OpenAI(base_url=srv.base_url, api_key="sk-test")
        ...
        srv.requests  # every request: {"path", "headers", "body", "role"}

A reply tagged with ``role`` is served only to requests of that role (the
l2tui client sends the header ``X-L2tui-Role``; otherwise the role is read from
a ``ROLE: <name>`` line in the messages).  ``defaults[role]`` answers when the
queue holds nothing for a role; with no default a queue miss returns the text
``(script exhausted)`` so a run never hangs.

Also a pytest fixture ``scripted_server`` (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer."""

    content: str = ""
    status: int = 200              # non-200: an error response (429, 500, ...)
    delay_s: float = 0.0           # sleep before answering (timeouts)
    retry_after: float | None = None  # Retry-After header for error statuses
    raw: bytes | None = None       # send these bytes as the body verbatim (garbage replies)
    chunk_chars: int = 7           # streaming: characters per SSE chunk
    chunk_delay_s: float = 0.0     # streaming: sleep between chunks
    usage: dict | None = None      # override the computed usage
    finish_reason: str | None = "stop"   # None: the stream ends (with [DONE]) but no chunk names a finish reason
    cut: bool = False              # streaming: drop the connection after the content (no finish chunk, no [DONE])


@dataclass
class _Entry:
    reply: Reply
    role: str | None


def _role_of(body: dict, headers: dict) -> str | None:
    r = headers.get("x-l2tui-role")
    if r:
        return r
    for m in body.get("messages", []) or []:
        c = m.get("content")
        if isinstance(c, str):
            mm = re.search(r"^ROLE:\s*(\w+)", c, re.M)
            if mm:
                return mm.group(1)
    return None


class ScriptedServer:
    """Thread-backed HTTP server; use as a context manager or call start()/stop()."""

    def __init__(self, model: str = "scripted-model"):
        self.model = model
        self._queue: list[_Entry] = []
        self._lock = threading.Lock()
        self.requests: list[dict] = []
        self.defaults: dict[str, Reply | str] = {}
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ script
    def add(self, reply: Reply | str, role: str | None = None) -> "ScriptedServer":
        if isinstance(reply, str):
            reply = Reply(content=reply)
        with self._lock:
            self._queue.append(_Entry(reply, role))
        return self

    def extend(self, replies: list[Reply | str], role: str | None = None) -> "ScriptedServer":
        for r in replies:
            self.add(r, role)
        return self

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _next(self, role: str | None) -> Reply:
        with self._lock:
            for i, e in enumerate(self._queue):
                if e.role is None or e.role == role:
                    return self._queue.pop(i).reply
            d = self.defaults.get(role or "") or self.defaults.get("*")
        if d is None:
            return Reply(content="(script exhausted)")
        return Reply(content=d) if isinstance(d, str) else d

    # ------------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ScriptedServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json", extra: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": server.model, "object": "model"}]}).encode())
                else:
                    self._send(404, b'{"error":{"message":"not found"}}')

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                role = _role_of(body, headers)
                with server._lock:
                    server.requests.append({"path": self.path, "headers": headers, "body": body, "role": role, "time": time.time()})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error":{"message":"not found"}}')
                    return
                reply = server._next(role)
                try:
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    if reply.status != 200:
                        extra = {"Retry-After": str(reply.retry_after)} if reply.retry_after is not None else {}
                        err = {"error": {"message": f"scripted status {reply.status}", "type": "scripted", "code": reply.status}}
                        self._send(reply.status, json.dumps(err).encode(), extra=extra)
                        return
                    if reply.raw is not None:
                        self._send(200, reply.raw, ctype="application/json")
                        return
                    usage = reply.usage or {
                        "prompt_tokens": max(1, len(json.dumps(body.get("messages", []))) // 4),
                        "completion_tokens": max(1, len(reply.content) // 4),
                    }
                    usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
                    cid = "chatcmpl-" + uuid.uuid4().hex[:12]
                    model = body.get("model") or server.model
                    if body.get("stream"):
                        self._stream(cid, model, reply, usage, bool((body.get("stream_options") or {}).get("include_usage")))
                    else:
                        doc = {
                            "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                                         "finish_reason": reply.finish_reason, "logprobs": None}],
                            "usage": usage,
                        }
                        self._send(200, json.dumps(doc).encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): fine

            def _stream(self, cid: str, model: str, reply: Reply, usage: dict, include_usage: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

                def chunk(delta: dict, finish: str | None, extra: dict | None = None) -> None:
                    doc = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
                    if extra:
                        doc.update(extra)
                    self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
                    self.wfile.flush()

                chunk({"role": "assistant", "content": ""}, None)
                text = reply.content
                step = max(1, reply.chunk_chars)
                for i in range(0, len(text), step):
                    chunk({"content": text[i:i + step]}, None)
                    if reply.chunk_delay_s:
                        time.sleep(reply.chunk_delay_s)
                if reply.cut:
                    self.wfile.flush()
                    self.connection.shutdown(2)  # SHUT_RDWR: the reply just stops mid-stream
                    return
                if reply.finish_reason is not None:
                    chunk({}, reply.finish_reason)
                if include_usage:
                    doc = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                           "choices": [], "usage": usage}
                    self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:  # pragma: no cover - manual use: python -m tests.openai_server
    """Serve forever with a fixed default reply (handy for poking the TUI by hand)."""
    import sys

    srv = ScriptedServer().start()
    srv.defaults["*"] = sys.argv[1] if len(sys.argv) > 1 else "Plan: keep going."
    print(srv.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
