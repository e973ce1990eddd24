"""A scripted stand-in for the Anthropic Messages API (streaming SSE) on 127.0.0.1, for the real Claude Code CLI.

A model fake only: the CLI, its plugin loader, its hooks and its tools are all real. Requests that
offer a Bash tool are the session's turns and get the scripted tool calls, one per request, then a
closing text; any other request (titles, topic checks) gets a short text. Every request body is kept.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(blocks: list[dict[str, Any]], stop: str) -> bytes:
    out = [_sse("message_start", {"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            out.append(_sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            out.append(_sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


class FakeMessagesAPI:
    """``with FakeMessagesAPI(["rm -rf src", "git clean -fdx"]) as api: ... api.url``"""

    def __init__(self, commands: list[str]) -> None:
        self.commands = commands
        self.requests: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                api.requests.append({"path": self.path, "body": body})
                if "count_tokens" in self.path:
                    return self._json({"input_tokens": 10})
                payload = api.answer(body)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(payload)
                else:
                    self._json({"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})

            def do_GET(self) -> None:  # noqa: N802
                self._json({})

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.end_headers()

            def _json(self, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, body: dict[str, Any]) -> bytes:
        if not any(t.get("name") == "Bash" for t in body.get("tools") or []):
            return _stream([{"type": "text", "text": "Cleanup"}], "end_turn")
        done = sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                   for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
        if done < len(self.commands):
            call = {"type": "tool_use", "id": f"toolu_fake{done + 1:02d}", "name": "Bash", "input": {"command": self.commands[done], "description": "cleanup"}}
            return _stream([{"type": "text", "text": "Running it."}, call], "tool_use")
        return _stream([{"type": "text", "text": "Done."}], "end_turn")

    def __enter__(self) -> FakeMessagesAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
