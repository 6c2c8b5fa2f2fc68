#!/usr/bin/env python3
"""scripts/serve-bench.py — throughput of `weft serve` under concurrent clients.

Starts `weft serve` (or uses --url), then for each concurrency level C runs C clients at once, each
sending --requests streamed chat or completion requests one after another, and reports aggregate
generated tokens/s, time to first token (TTFT) and request latency percentiles. Standard library
only.

    scripts/serve-bench.py -m /tmp/weft-bench/tl-q4_0.gguf --clients 1,4,16 --np 16 --max-tokens 64
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time


def start_server(args):
    cmd = [args.weft, "serve", "--port", "0", "-np", str(args.np), "-t", str(args.threads)]
    if args.model:
        cmd += ["-m", args.model]
    if args.ctx:
        cmd += ["-c", str(args.ctx)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    port = None
    deadline = time.time() + 300
    for line in proc.stderr:
        if args.verbose:
            sys.stderr.write(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if port and "slots of" in line:
            break
        if time.time() > deadline:
            break
    if not port:
        proc.kill()
        sys.exit("weft serve did not start")
    # keep draining stderr so the server never blocks on a full pipe
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


def one_request(host, prompt, max_tokens, seed):
    """A streamed completion; returns (ttft_s, latency_s, completion_tokens)."""
    h, p = host.split(":")
    conn = http.client.HTTPConnection(h, int(p), timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:200]!r}")
    ttft = None
    tokens = 0
    for raw in res:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("choices") and chunk["choices"][0].get("text") and ttft is None:
            ttft = time.perf_counter() - t0
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    latency = time.perf_counter() - t0
    conn.close()
    return (ttft if ttft is not None else latency), latency, tokens


def level(host, clients, requests, max_tokens, stagger_ms=0):
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        time.sleep(i * stagger_ms / 1000.0)  # arrivals spread out: steady state rather than one burst
        for r in range(requests):
            prompt = f"Once upon a time, client {i} request {r} told a story about"
            try:
                out = one_request(host, prompt, max_tokens, 1000 * i + r)
                with lock:
                    results.append(out)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[2] for r in results)
    ttfts = sorted(r[0] for r in results)
    lat = sorted(r[1] for r in results)

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    return {"clients": clients, "requests": len(results), "errors": len(errors), "wall_s": wall,
            "tokens_per_s": tokens / wall if wall > 0 else 0.0, "tokens": tokens,
            "ttft_mean_ms": 1000 * statistics.mean(ttfts) if ttfts else float("nan"),
            "ttft_p50_ms": 1000 * pct(ttfts, 0.5), "ttft_p90_ms": 1000 * pct(ttfts, 0.9),
            "latency_p50_ms": 1000 * pct(lat, 0.5), "latency_p90_ms": 1000 * pct(lat, 0.9),
            "latency_p99_ms": 1000 * pct(lat, 0.99), "first_error": errors[0] if errors else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(__file__), "..", "build", "weft"))
    ap.add_argument("-m", "--model", help="GGUF model (default: the built-in stories260K)")
    ap.add_argument("--url", help="an already running server, host:port (then -m, --np ... are ignored)")
    ap.add_argument("--clients", default="1,4,16,64", help="concurrency levels, comma-separated")
    ap.add_argument("--requests", type=int, default=4, help="requests per client at each level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--np", type=int, default=16, help="server slots")
    ap.add_argument("--ctx", type=int, default=0, help="server -c (0: its default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stagger-ms", type=float, default=0,
                    help="client i starts i x this many ms after the first (0: all at once)")
    ap.add_argument("--json", action="store_true", help="one JSON object per level instead of the table")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    proc = None
    host = args.url
    if not host:
        proc, host = start_server(args)
    try:
        rows = []
        for c in [int(x) for x in args.clients.split(",")]:
            row = level(host, c, args.requests, args.max_tokens, args.stagger_ms)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"clients {c}: {row['tokens_per_s']:.1f} tokens/s, ttft mean {row['ttft_mean_ms']:.0f} ms",
                      file=sys.stderr, flush=True)
        if not args.json:
            base = rows[0]
            print("| clients | requests | errors | generated tokens/s | x 1 client | TTFT mean ms | TTFT p90 ms "
                  "| latency p50 ms | latency p90 ms | latency p99 ms |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for r in rows:
                print(f"| {r['clients']} | {r['requests']} | {r['errors']} | {r['tokens_per_s']:.1f} | "
                      f"{r['tokens_per_s'] / base['tokens_per_s']:.2f} | {r['ttft_mean_ms']:.0f} | "
                      f"{r['ttft_p90_ms']:.0f} | {r['latency_p50_ms']:.0f} | {r['latency_p90_ms']:.0f} | "
                      f"{r['latency_p99_ms']:.0f} |")
            for r in rows:
                if r["first_error"]:
                    print(f"clients {r['clients']}: first error: {r['first_error']}", file=sys.stderr)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
