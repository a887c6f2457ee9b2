"""Start llama-server with a given flag list, send B concurrent requests, record what happens.

Loopback only (127.0.0.1); every wait and request is bounded. Each request sends P random token
ids as the prompt and asks for exactly G tokens (ignore_eos), so the prompt and output lengths are
the workload's. Recorded per request: success or the server's error, wall time, and the server's
own timings (prompt_per_second, predicted_per_second); per run: /props and /slots (the context per
slot the server actually gives), and the server's log tail.

Usage: python serve_bench.py --server BIN --model GGUF --batch B --prompt-len P --gen-len G
       --flags "<flags after -m MODEL, as hwadvisor emits them>" --out RESULT.json [--port N]
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def get_json(url: str, timeout: float = 5.0) -> Any:
    """GET url and decode its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
        return json.loads(r.read())


def wait_health(base: str, proc: subprocess.Popen, limit_s: float) -> bool:
    """Poll /health until it answers 200, the process dies, or the limit passes."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    return False


def one_request(base: str, prompt: list[int], gen: int, timeout: float) -> dict[str, Any]:
    """POST one /completion and return success, wall time, timings or the error."""
    body = json.dumps(
        {
            "prompt": prompt,
            "n_predict": gen,
            "ignore_eos": True,
            "temperature": 0.0,
            "cache_prompt": False,
        }
    ).encode()
    req = urllib.request.Request(
        base + "/completion", data=body, headers={"Content-Type": "application/json"}
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback only
            d = json.loads(r.read())
        return {
            "ok": True,
            "wall_s": time.monotonic() - t0,
            "timings": d.get("timings"),
            "tokens_predicted": d.get("tokens_predicted"),
            "tokens_evaluated": d.get("tokens_evaluated"),
        }
    except urllib.error.HTTPError as e:
        return {
            "ok": False,
            "wall_s": time.monotonic() - t0,
            "status": e.code,
            "error": e.read().decode(errors="replace")[:400],
        }
    except (urllib.error.URLError, OSError) as e:
        return {"ok": False, "wall_s": time.monotonic() - t0, "error": repr(e)[:400]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the server, send the batch, stop the server, return the record."""
    flags = shlex.split(args.flags)
    cmd = [args.server, "-m", args.model, *flags, "--host", HOST, "--port", str(args.port)]
    base = f"http://{HOST}:{args.port}"
    log = Path(args.out).with_suffix(".log")
    rec: dict[str, Any] = {
        "command": cmd,
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "gen_len": args.gen_len,
    }
    with log.open("w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
        try:
            t0 = time.monotonic()
            up = wait_health(base, proc, args.start_timeout)
            rec["started"] = up
            rec["start_s"] = time.monotonic() - t0
            if up:
                for ep in ("/props", "/slots"):
                    try:
                        rec[ep.strip("/")] = get_json(base + ep)
                    except (urllib.error.URLError, OSError, ValueError) as e:
                        rec[ep.strip("/")] = {"error": repr(e)[:300]}
                rng = random.Random(0)
                results: list[dict[str, Any]] = [{} for _ in range(args.batch)]

                def worker(i: int) -> None:
                    prompt = [rng.randrange(259, args.vocab) for _ in range(args.prompt_len)]
                    results[i] = one_request(base, prompt, args.gen_len, args.request_timeout)

                t1 = time.monotonic()
                threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.batch)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(args.request_timeout + 5)
                rec["batch_wall_s"] = time.monotonic() - t1
                rec["requests"] = results
                rec["ok"] = sum(1 for r in results if r.get("ok"))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            rec["exit_code"] = proc.returncode
    lines = log.read_text(errors="replace").splitlines()
    rec["log_tail"] = [
        ln
        for ln in lines
        if any(
            k in ln
            for k in (
                "n_ctx",
                "n_slots",
                "error",
                "warn",
                "ngram",
                "spec",
                "unified",
                "flash",
                "graph",
            )
        )
    ][-40:]
    return rec


def main() -> None:
    """Parse arguments, run, write the JSON record."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--flags", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt-len", type=int, required=True)
    ap.add_argument("--gen-len", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--start-timeout", type=float, default=90.0)
    ap.add_argument("--request-timeout", type=float, default=90.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rec = run(args)
    Path(args.out).write_text(json.dumps(rec, indent=1))
    ok = rec.get("ok", 0)
    tim = [r["timings"] for r in rec.get("requests", []) if r.get("ok") and r.get("timings")]
    pps = sum(t.get("prompt_per_second", 0) for t in tim) / max(len(tim), 1)
    tps = sum(t.get("predicted_per_second", 0) for t in tim) / max(len(tim), 1)
    print(
        f"server B={args.batch} P={args.prompt_len} G={args.gen_len}: started={rec.get('started')} "
        f"ok={ok}/{args.batch} mean prompt {pps:.0f} t/s, mean decode {tps:.1f} t/s per request, "
        f"wall {rec.get('batch_wall_s', 0):.2f} s"
    )


if __name__ == "__main__":
    main()
