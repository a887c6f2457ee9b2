"""A bounded load generator: a load's requests against a running OpenAI-compatible endpoint.

It plays the same `Load` the model simulates (serving/load.py `draw()`: lengths, and Poisson,
constant or traced arrivals, or a closed loop of users), sends each request as a streaming
`/v1/completions` call and times it on the client:

- TTFT: from sending the request to the first streamed chunk that carries text;
- ITL: every gap between two text chunks after it (one sample a chunk, as `vllm bench serve`
  counts them; a chunk that carries several tokens is one longer gap);
- request latency: from sending to the end of the stream.

A prompt of exactly P tokens is sent as P token ids (`prompt` as a list of ints: vLLM, SGLang
and llama-server take it), or as P random words when asked (then the server's own count is the
only one). Its tokens are new in every run (lengths and arrivals repeat with the seed, the text
does not): vLLM's and SGLang's prefix caches and llama-server's host prompt cache would serve a
prompt seen before from memory, and the run would time a cache hit where the plan has a prefill.
The load's `prefix_share` is played as one prefix every prompt of the run starts with.
`max_tokens` is the output length, with `ignore_eos` (vLLM, SGLang, llama-server) and
`min_tokens` (vLLM) so the model cannot stop early, and `stream_options.include_usage` so
the server reports the tokens it really counted. llama-server's own `timings` (prompt_ms,
predicted_per_token_ms), when the stream carries them, are kept as the engine's cross-check.

Bounded on every side: at most `requests` requests, a wall-clock limit for the whole run, a
timeout per request (a watchdog closes the connection of a request past it), at most
`max_in_flight` requests open at once. It talks to the one URL it is given and nothing else.
Standard library only: http.client in threads (one connection a request); the figures come
from serving/figures.py, the one function a prediction's figures come from too.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from hwadvisor.errors import UserError
from hwadvisor.models.serving import Load, ServingFigures
from hwadvisor.serving.figures import figures, percentile
from hwadvisor.serving.load import SEED, Requests, draw

Progress = Callable[[str, int, int], None]  # (what, done, in all), as the trials report it
PromptKind = Literal["ids", "words"]

# Token ids a prompt is drawn from: above the special and byte tokens of the usual vocabularies
# (Llama 3's specials sit at 128000+, SmolLM2's and GPT-2's at the start, Qwen's at 151643+) and
# below the size of the smallest common one (32000, Llama 2 / Mistral).
TOKEN_IDS = (1000, 30000)
WORDS = ("time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child",
         "world", "school", "state", "family", "student", "group", "country", "problem", "hand",
         "part", "place", "case", "week", "company", "system", "program", "question", "work")
WATCH_EVERY_S = 0.05  # how often the watchdog looks for requests past their time
READ_ERROR_BYTES = 2000  # of an error response's body, kept in the message


@dataclass(frozen=True)
class Endpoint:
    """Where the requests go: the server's scheme, host, port and completions path."""

    scheme: str
    host: str
    port: int
    path: str  # the completions path, e.g. /v1/completions

    @property
    def url(self) -> str:
        """Return the completions URL."""
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"

    @property
    def models_path(self) -> str:
        """Return the path of the model list beside the completions path."""
        return self.path.rsplit("/", 1)[0] + "/models"

    @property
    def loopback(self) -> bool:
        """Tell whether the endpoint is on this machine."""
        return self.host in ("localhost", "127.0.0.1", "::1") or self.host.startswith("127.")


def parse_endpoint(url: str) -> Endpoint:
    """Read --endpoint: http(s)://host[:port][/v1[/completions]]; a UserError when not one."""
    hint = "e.g. --endpoint http://127.0.0.1:8080 (the server's base URL; /v1 is optional)"
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UserError(f"--endpoint {url!r} is not an http(s) URL with a host", hint=hint)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise UserError(f"--endpoint {url!r} has a port that is not a number", hint=hint) \
            from None
    if parsed.query or parsed.fragment:
        raise UserError(f"--endpoint {url!r} has a query or fragment", hint=hint)
    path = parsed.path.rstrip("/")
    if path.endswith("/completions"):
        pass
    elif path.endswith("/v1"):
        path += "/completions"
    else:
        path += "/v1/completions"
    return Endpoint(parsed.scheme, parsed.hostname, port, path)


@dataclass(frozen=True)
class Limits:
    """The bounds of one run: requests, the whole run's wall clock, each request's time."""

    time_limit_s: float = 300.0
    request_timeout_s: float = 120.0
    max_in_flight: int = 256  # open loop: past it the generator waits (and says so)


@dataclass
class Sample:
    """One request as the client saw it (times from its sending, in seconds)."""

    index: int
    prompt_len: int  # asked
    output_len: int  # asked
    sent_s: float = 0.0  # from the run's start
    ttft_s: float | None = None
    latency_s: float | None = None
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    prompt_tokens: int | None = None  # the server's count (usage)
    output_tokens: int | None = None
    engine_prompt_s: float | None = None  # llama-server timings.prompt_ms
    engine_tpot_s: float | None = None  # llama-server timings.predicted_per_token_ms
    ended: bool = False  # the stream said it was done (data: [DONE])
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Tell whether the request completed with at least one token."""
        return self.error is None and self.ttft_s is not None and self.latency_s is not None

    @property
    def tokens(self) -> int:
        """Return the output tokens: the server's count, else the chunks received."""
        return self.output_tokens if self.output_tokens is not None else self.chunks


Stop = Literal["done", "time limit", "interrupted"]


@dataclass
class Run:
    """What one run gave: every request sent, how long it took and why it stopped."""

    endpoint: Endpoint
    model: str | None
    load: Load
    prompt: PromptKind
    limits: Limits
    samples: list[Sample]
    duration_s: float
    stopped: Stop
    waited_for_slots: int = 0  # open loop: requests sent late for want of a free slot

    @property
    def completed(self) -> list[Sample]:
        """Return the requests that completed."""
        return [s for s in self.samples if s.ok]

    @property
    def failed(self) -> list[Sample]:
        """Return the requests that failed or were cut."""
        return [s for s in self.samples if not s.ok]

    def errors(self) -> list[str]:
        """Return the distinct failures with their counts, most frequent first."""
        counts: dict[str, int] = {}
        for s in self.failed:
            text = s.error or "no token came back"
            counts[text] = counts.get(text, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [f"{n} x {text}" if n > 1 else text for text, n in ranked]

    def figures(self) -> ServingFigures | None:
        """Return the measured figures over the completed requests (None when none did)."""
        done = self.completed
        if not done:
            return None
        start = min(s.sent_s for s in done)
        end = max(s.sent_s + (s.latency_s or 0.0) for s in done)
        itl = [(g, 1.0) for s in done for g in s.gaps]
        return figures([s.ttft_s or 0.0 for s in done], [s.latency_s or 0.0 for s in done],
                       [s.tokens for s in done], itl, end - start, self.saturated())

    def saturated(self) -> bool:
        """Tell whether the queue grew through an open-loop run (the server fell behind).

        The sign: the last third's median TTFT is more than twice the first third's and
        longer than a second. A closed loop cannot outrun its server.
        """
        done = sorted(self.completed, key=lambda s: s.sent_s)
        if self.load.rate_rps is None or len(done) < 9:
            return False
        third = len(done) // 3
        first = percentile([s.ttft_s or 0.0 for s in done[:third]], 50)
        last = percentile([s.ttft_s or 0.0 for s in done[-third:]], 50)
        return last > 2.0 * first and last > 1.0


def prompt_tokens(kind: PromptKind, length: int, rng: random.Random) -> list[int] | list[str]:
    """Return `length` random prompt tokens: token ids, or words."""
    if kind == "ids":
        low, high = TOKEN_IDS
        return [rng.randrange(low, high) for _ in range(length)]
    return [rng.choice(WORDS) for _ in range(length)]


def prompt_body(kind: PromptKind, length: int, rng: random.Random,
                prefix: list[int] | list[str] | None = None, shared: int = 0) -> list[int] | str:
    """Return a prompt of `length` tokens, its first `shared` from `prefix`, the rest random."""
    shared = min(shared, length, len(prefix or []))
    tokens = [*(prefix or [])[:shared], *prompt_tokens(kind, length - shared, rng)]
    if kind == "ids":
        return [int(t) for t in tokens]
    return " ".join(str(t) for t in tokens)


def request_body(model: str | None, prompt: list[int] | str, output_len: int) -> dict[str, Any]:
    """Return the JSON body of one streaming completion that generates exactly output_len."""
    body: dict[str, Any] = {
        "prompt": prompt, "max_tokens": output_len, "stream": True,
        "stream_options": {"include_usage": True},
        # the model must not stop early: vLLM honours both, SGLang and llama-server ignore_eos
        "ignore_eos": True, "min_tokens": output_len, "temperature": 0.0,
    }
    if model:
        body["model"] = model
    return body


def _connection(endpoint: Endpoint, timeout_s: float) -> http.client.HTTPConnection:
    cls = http.client.HTTPSConnection if endpoint.scheme == "https" else http.client.HTTPConnection
    return cls(endpoint.host, endpoint.port, timeout=timeout_s)


def _failure(exc: BaseException) -> str:
    """Say what went wrong with a request in a few words."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):  # the socket's timeout is the request's
        return "timed out (--request-timeout)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def server_model(endpoint: Endpoint, timeout_s: float = 10.0) -> str | None:
    """Ask the server which model it serves (GET /v1/models); None when it does not say.

    A refused connection or an unresolvable host is a UserError: nothing answers there.
    """
    conn = _connection(endpoint, timeout_s)
    try:
        conn.request("GET", endpoint.models_path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        raw = resp.read(1_000_000)
        status = resp.status
    except (ConnectionRefusedError, socket.gaierror, TimeoutError) as exc:
        raise UserError(f"nothing answers at {endpoint.url}: {_failure(exc)}",
                        hint="start the server first (e.g. llama-server --port 8080, vllm serve "
                        "MODEL), and pass its base URL with --endpoint") from None
    except (OSError, http.client.HTTPException) as exc:
        raise UserError(f"{endpoint.url} did not answer as an HTTP server: {_failure(exc)}",
                        hint="pass the server's base URL, e.g. http://127.0.0.1:8000") from None
    finally:
        conn.close()
    if status != 200:
        return None
    try:
        data = json.loads(raw)
        models = data.get("data") if isinstance(data, dict) else None
        first = models[0].get("id") if models and isinstance(models[0], dict) else None
    except (ValueError, AttributeError):
        return None
    return str(first) if first else None


class _Watchdog:
    """Closes the connection of any request past its deadline, or all of them on stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, tuple[float, socket.socket]] = {}
        self._cut: set[int] = set()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def open(self, index: int, deadline: float, sock: socket.socket) -> None:
        """Watch a request's socket until its deadline."""
        with self._lock:
            self._open[index] = (deadline, sock)

    def close(self, index: int) -> bool:
        """Forget a request; return whether the watchdog cut it."""
        with self._lock:
            self._open.pop(index, None)
            return index in self._cut

    def _watch(self) -> None:
        while True:
            stopping = self.stop.wait(WATCH_EVERY_S)
            now = time.perf_counter()
            with self._lock:
                late = [(i, c) for i, (d, c) in self._open.items() if stopping or now > d]
                self._cut.update(i for i, _ in late)
            for _, sock in late:
                _shut(sock)
            if stopping:
                return

    def finish(self) -> None:
        self.stop.set()
        self._thread.join()


def _shut(sock: socket.socket) -> None:
    """Wake a thread blocked reading the socket, by shutting it down."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class _Player:
    """Plays one load: sends the requests, times them, keeps the samples."""

    def __init__(self, endpoint: Endpoint, model: str | None, load: Load, prompt: PromptKind,
                 limits: Limits, progress: Progress | None, seed: int) -> None:
        self.endpoint, self.model, self.load = endpoint, model, load
        self.prompt, self.limits, self.progress = prompt, limits, progress
        self.requests: Requests = draw(load, seed=seed)
        # Fresh text each run, so no server's prefix cache holds it from an earlier run (the
        # module's docstring); only the load's own shared prefix repeats, within the run.
        self.rng = random.Random(os.urandom(16))
        prefix = prompt_tokens(prompt, max(self.requests.prompt, default=0), self.rng)
        self.bodies = [json.dumps(request_body(
            model, prompt_body(prompt, p, self.rng, prefix, round(load.prefix_share * p)),
            g)).encode()
            for p, g in zip(self.requests.prompt, self.requests.output, strict=True)]
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self.watchdog = _Watchdog()
        self._told = -1
        self.start = time.perf_counter()
        self.deadline = self.start + limits.time_limit_s

    def over(self) -> bool:
        """Tell whether the run must stop sending (its time is up or it was stopped)."""
        return self.watchdog.stop.is_set() or time.perf_counter() >= self.deadline

    def send(self, index: int) -> None:
        """Send request `index` and time its stream; the sample records whatever happened."""
        sample = Sample(index, self.requests.prompt[index], self.requests.output[index])
        sent = time.perf_counter()
        sample.sent_s = sent - self.start
        deadline = min(sent + self.limits.request_timeout_s, self.deadline)
        conn = _connection(self.endpoint, self.limits.request_timeout_s)
        try:
            conn.connect()
            # the socket itself is watched: http.client lets go of it once an HTTP/1.0 response
            # (one that ends when the connection closes) has begun, but keeps reading from it
            if conn.sock is not None:
                self.watchdog.open(index, deadline, conn.sock)
            _stream(conn, self.endpoint, self.bodies[index], sample, sent)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            sample.error = sample.error or _failure(exc)
        finally:
            if self.watchdog.close(index) and not sample.ended:
                sample.error = ("cut at the run's time limit" if time.perf_counter()
                                >= self.deadline else "timed out (--request-timeout)")
            conn.close()
        with self._lock:
            self.samples.append(sample)

    def tick(self) -> None:
        """Report progress when more requests are done; called from the main thread only.

        The callback may raise (the CLI's Ctrl-C check does): only the main thread can take it.
        """
        done = len(self.samples)
        if self.progress is not None and done != self._told:
            self._told = done
            self.progress("requests", done, len(self.requests))

    def pause(self, seconds: float) -> bool:
        """Wait up to `seconds` (reporting progress); return whether the run was stopped."""
        end = time.perf_counter() + seconds
        while True:
            self.tick()
            left = end - time.perf_counter()
            if left <= 0:
                return self.watchdog.stop.is_set()
            if self.watchdog.stop.wait(min(left, WATCH_EVERY_S)):
                return True

    def open_loop(self, arrivals: tuple[float, ...]) -> int:
        """Send each request at its arrival time; return how many waited for a free slot."""
        slots = threading.BoundedSemaphore(self.limits.max_in_flight)
        waited = 0

        def run(i: int) -> None:
            try:
                self.send(i)
            finally:
                slots.release()

        pool = ThreadPoolExecutor(max_workers=self.limits.max_in_flight)
        futures = []
        try:
            for i, at in enumerate(arrivals):
                delay = min(self.start + at, self.deadline) - time.perf_counter()
                if (delay > 0 and self.pause(delay)) or self.over():
                    break
                if not slots.acquire(blocking=False):
                    waited += 1
                    if not self._wait_for_slot(slots):
                        break
                futures.append(pool.submit(run, i))
            while not all(f.done() for f in futures):
                self.pause(WATCH_EVERY_S)
        except BaseException:  # Ctrl-C: cut what is open before the pool waits for it
            self.watchdog.stop.set()
            raise
        finally:
            pool.shutdown(wait=True)
        self.tick()
        return waited

    def _wait_for_slot(self, slots: threading.BoundedSemaphore) -> bool:
        """Wait for a request to end and free its slot; False when the run ends first."""
        while not slots.acquire(timeout=WATCH_EVERY_S):
            self.tick()
            if self.over():
                return False
        return True

    def closed_loop(self, users: int) -> None:
        """Run `users` users, each sending its next request when its last one ends."""
        counter = iter(range(len(self.requests)))

        def user() -> None:
            while not self.over():
                with self._lock:
                    i = next(counter, None)
                if i is None:
                    return
                self.send(i)

        threads = [threading.Thread(target=user, daemon=True) for _ in range(users)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(WATCH_EVERY_S)
                    self.tick()
        except BaseException:  # Ctrl-C: cut what is open, let the users see the stop
            self.watchdog.stop.set()
            raise


def _stream(conn: http.client.HTTPConnection, endpoint: Endpoint, body: bytes, sample: Sample,
            sent: float) -> None:
    """POST one streaming completion and read its server-sent events into the sample."""
    conn.request("POST", endpoint.path, body=body, headers={
        "Content-Type": "application/json", "Accept": "text/event-stream"})
    resp = conn.getresponse()
    if resp.status != 200:
        sample.error = f"HTTP {resp.status}: {_error_text(resp.read(READ_ERROR_BYTES))}"
        return
    last: float | None = None
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            if line.startswith(b"error:"):  # llama-server's in-stream error event
                sample.error = _error_text(line[6:])
                return
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            sample.ended = True
            break
        now = time.perf_counter()
        event = json.loads(payload)
        if not isinstance(event, dict):
            continue
        if "error" in event:
            sample.error = _error_text(json.dumps(event["error"]).encode())
            return
        _read_usage(event, sample)
        choices = event.get("choices") or []
        text = choices[0].get("text") if choices and isinstance(choices[0], dict) else None
        if not text:
            continue
        sample.chunks += 1
        if last is None:
            sample.ttft_s = now - sent
        else:
            sample.gaps.append(now - last)
        last = now
    if last is not None:
        sample.latency_s = last - sent
    else:
        sample.error = "the stream ended without a token"


def _read_usage(event: dict[str, Any], sample: Sample) -> None:
    """Keep the server's token counts (usage) and llama-server's timings when an event has them."""
    usage = event.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            sample.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            sample.output_tokens = usage["completion_tokens"]
    timings = event.get("timings")
    if isinstance(timings, dict):
        prompt_ms, per_token_ms = timings.get("prompt_ms"), timings.get("predicted_per_token_ms")
        if isinstance(prompt_ms, (int, float)):
            sample.engine_prompt_s = prompt_ms / 1000.0
        if isinstance(per_token_ms, (int, float)) and per_token_ms > 0:
            sample.engine_tpot_s = per_token_ms / 1000.0


def _error_text(raw: bytes) -> str:
    """Return a server's error message: the JSON's message when it has one, else the text."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200] or "no message"
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:200]
        if isinstance(inner, str):
            return inner[:200]
    return text[:200]


def play(endpoint: Endpoint, load: Load, model: str | None = None, prompt: PromptKind = "ids",
         limits: Limits | None = None, progress: Progress | None = None,
         seed: int = SEED) -> Run:
    """Play the load against the endpoint; return every request's timings.

    Open loop when the load has a rate (each request at its drawn arrival time, whatever the
    server's pace), a closed loop of `load.concurrency` users otherwise. Stops by itself after
    `load.requests` requests or `limits.time_limit_s`; Ctrl-C stops it early with what it has.
    """
    limits = limits or Limits()
    player = _Player(endpoint, model, load, prompt, limits, progress, seed)
    stopped: Stop = "done"
    waited = 0
    try:
        if player.requests.arrivals is not None:
            waited = player.open_loop(player.requests.arrivals)
        else:
            player.closed_loop(load.concurrency or 1)
    except KeyboardInterrupt:
        stopped = "interrupted"
        player.watchdog.stop.set()
    finally:
        player.watchdog.finish()
    if stopped == "done" and (len(player.samples) < len(player.requests)
                              or time.perf_counter() >= player.deadline):
        stopped = "time limit"
    duration = time.perf_counter() - player.start
    samples = sorted(player.samples, key=lambda s: s.index)
    return Run(endpoint, model, load, prompt, limits, samples, duration, stopped, waited)
