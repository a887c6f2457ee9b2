"""A tiny OpenAI-compatible streaming server on loopback, emitting tokens at a known pace.

`/v1/completions` with `stream: true` answers with server-sent events the way vLLM and
llama-server do: one `data: {...}` event a token (choices[0].text), a last event with `usage`
(and llama-server's `timings`), then `data: [DONE]`. The first token comes `first_s` after the
request, each next one `every_s` after the last; `max_tokens` tokens in all. `/v1/models` names
the model. Modes for failures: `status` (an HTTP error with an OpenAI-style error body),
`stall` (headers, then silence), `cut` (the stream ends without a token).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Pace:
    """How the fake server answers."""

    first_s: float = 0.100
    every_s: float = 0.020
    status: int = 200
    stall: bool = False
    cut: bool = False
    model: str = "fake-model"
    bodies: list[dict[str, Any]] = field(default_factory=list)  # the requests it received


def _handler(pace: Pace) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass  # quiet: the tests read what came back, not the server's log

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            if self.path.rstrip("/") != "/v1/models":
                self.send_error(404)
                return
            body = json.dumps({"object": "list", "data": [{"id": pace.model}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802 - the base class's name
            try:
                self._answer()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client cut the stream (its time limit): nothing more to say

        def _answer(self) -> None:
            started = time.perf_counter()
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length))
            pace.bodies.append(request)
            if pace.status != 200:
                body = json.dumps({"error": {"message": "the fake server failed on purpose",
                                             "code": pace.status}}).encode()
                self.send_response(pace.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
            if pace.stall:
                time.sleep(30)
                return
            if pace.cut:
                self._event({"choices": [{"text": "", "index": 0}]})
                return
            tokens = int(request.get("max_tokens", 16))
            prompt = request.get("prompt")
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            for i in range(tokens):
                due = started + pace.first_s + i * pace.every_s
                time.sleep(max(0.0, due - time.perf_counter()))
                self._event({"choices": [{"text": f" t{i}", "index": 0,
                                          "finish_reason": None}]})
            self._event({"choices": [], "usage": {
                "prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                "total_tokens": prompt_tokens + tokens},
                "timings": {"prompt_ms": pace.first_s * 1000.0,
                            "predicted_per_token_ms": pace.every_s * 1000.0}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _event(self, data: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

    return Handler


@contextmanager
def serving(pace: Pace | None = None) -> Iterator[tuple[str, Pace]]:
    """Run the fake server on a free loopback port; yield its base URL and its pace."""
    pace = pace or Pace()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(pace))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", pace
    finally:
        server.shutdown()
        server.server_close()
