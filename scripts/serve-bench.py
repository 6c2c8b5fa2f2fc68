#!/usr/bin/env python3
"""scripts/serve-bench.py — throughput of `weft serve` under concurrent clients.

Starts `weft serve` (or uses --url), sends one request not counted (to warm the server up), then
for each concurrency level C runs C clients at once, each sending --requests streamed completion
requests one after another (--no-stream: whole answers), and reports aggregate generated tokens/s,
time to first token (TTFT; a whole answer's is its latency), request latency percentiles, and the
client's own CPU time per token (run beside the server, the client takes CPU from it). Standard
library only.

    scripts/serve-bench.py -m /tmp/weft-bench/tl-q4_0.gguf --clients 1,4,16 --np 16 --max-tokens 64

The "x 1 client" column is how much faster C clients are served than one client sending the same
requests one by one, e.g. 16 greedy requests of 48 tokens, whole answers, 4 slots:

    scripts/serve-bench.py -m small.gguf --np 4 --ctx 4096 --clients 1,16 --requests 16 \
        --max-tokens 48 --temperature 0 --ignore-eos --no-stream
"""
import argparse
import http.client
import json
import os
import re
import resource
import socket
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
    cmd += args.serve_args
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


class _Dechunk:
    """Incremental HTTP/1.1 chunked transfer decoding: feed() raw bytes, get the payload bytes."""

    def __init__(self):
        self.buf = bytearray()
        self.left = 0          # payload bytes left in the current chunk
        self.crlf = False      # the CRLF after a chunk's payload is still to come
        self.done = False

    def feed(self, data):
        self.buf += data
        out = bytearray()
        while not self.done:
            if self.left:
                take = min(self.left, len(self.buf))
                out += self.buf[:take]
                del self.buf[:take]
                self.left -= take
                if self.left:
                    break
                self.crlf = True
            if self.crlf:
                if len(self.buf) < 2:
                    break
                del self.buf[:2]
                self.crlf = False
            end = self.buf.find(b"\r\n")
            if end < 0:
                break
            size = int(bytes(self.buf[:end]).split(b";")[0], 16)
            del self.buf[:end + 2]
            if size == 0:
                self.done = True
            self.left = size
        return out


def one_request(host, prompt, max_tokens, seed, opts):
    """A completion, streamed unless opts.no_stream; returns (ttft_s, latency_s, completion_tokens).

    Reads the socket itself and parses only what it needs (the events up to the first text, and the
    usage at the end): the client shares the machine with the server, so it must stay cheap per token
    (http.client's line iterator and a JSON parse per event took about twice the CPU per token)."""
    h, p = host.split(":")
    request = {"prompt": prompt, "max_tokens": max_tokens, "temperature": opts.temperature, "seed": seed}
    if opts.ignore_eos:
        request["ignore_eos"] = True
    if not opts.no_stream:
        request.update({"stream": True, "stream_options": {"include_usage": True}})
    body = json.dumps(request).encode()
    t0 = time.perf_counter()
    sock = socket.create_connection((h, int(p)), timeout=600)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: " + host.encode() +
                     b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\nConnection: close\r\n\r\n" + body)
        raw = bytearray()
        while b"\r\n\r\n" not in raw:
            data = sock.recv(65536)
            if not data:
                raise RuntimeError("connection closed before the response headers")
            raw += data
        head, _, rest = bytes(raw).partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {rest[:200]!r}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        dechunk = _Dechunk()
        if opts.no_stream:  # one JSON object (after the spaces a long wait sends), then the end
            answer = bytearray(dechunk.feed(rest) if chunked else rest)
            while not (chunked and dechunk.done):
                data = sock.recv(65536)
                if not data:
                    break
                answer += dechunk.feed(data) if chunked else data
            tokens = (json.loads(answer).get("usage") or {}).get("completion_tokens", 0)
            latency = time.perf_counter() - t0
            return latency, latency, tokens
        events = bytearray()
        ttft = None
        tokens = 0
        data = rest
        finished = False
        while not finished:
            events += dechunk.feed(data) if chunked else data
            while True:  # complete events ("data: ...\n\n")
                end = events.find(b"\n\n")
                if end < 0:
                    break
                ev = bytes(events[:end]).strip()
                del events[:end + 2]
                if not ev.startswith(b"data: "):
                    continue
                payload = ev[6:]
                if payload == b"[DONE]":
                    finished = True
                    break
                if ttft is None and b'"text"' in payload:
                    chunk = json.loads(payload)
                    if chunk.get("choices") and chunk["choices"][0].get("text"):
                        ttft = time.perf_counter() - t0
                if b'"completion_tokens"' in payload:
                    usage = json.loads(payload).get("usage") or {}
                    tokens = usage.get("completion_tokens", tokens)
            if finished or (chunked and dechunk.done):
                break
            data = sock.recv(65536)
            if not data:
                break
    finally:
        sock.close()
    latency = time.perf_counter() - t0
    return (ttft if ttft is not None else latency), latency, tokens


def level(host, clients, requests, max_tokens, opts):
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        time.sleep(i * opts.stagger_ms / 1000.0)  # arrivals spread out: steady state rather than one burst
        for r in range(requests):
            prompt = f"Once upon a time, client {i} request {r} told a story about"
            try:
                out = one_request(host, prompt, max_tokens, 1000 * i + r, opts)
                with lock:
                    results.append(out)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
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
            "latency_p99_ms": 1000 * pct(lat, 0.99),
            # this client's own CPU time (it shares the machine with the server when run beside it)
            "client_cpu_us_per_token": 1e6 * client_cpu / tokens if tokens else float("nan"),
            "first_error": errors[0] if errors else None}


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
    ap.add_argument("--serve-arg", dest="serve_args", action="append", default=[],
                    help="one more argument for `weft serve` (repeat it: --serve-arg=--http-nice --serve-arg=19)")
    ap.add_argument("--stagger-ms", type=float, default=0,
                    help="client i starts i x this many ms after the first (0: all at once)")
    ap.add_argument("--temperature", type=float, default=0.8, help="of every request (0: greedy)")
    ap.add_argument("--ignore-eos", action="store_true",
                    help="requests generate --max-tokens tokens whatever they sample (random-weight models)")
    ap.add_argument("--no-stream", action="store_true", help="whole answers instead of streamed events")
    ap.add_argument("--json", action="store_true", help="one JSON object per level instead of the table")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    proc = None
    host = args.url
    if not host:
        proc, host = start_server(args)
    try:
        # one request first, not counted: the first after a start pays for page faults in the weights
        # and the first graphs, which would be charged to the first level alone
        one_request(host, "Once upon a time", args.max_tokens, 0, args)
        rows = []
        for c in [int(x) for x in args.clients.split(",")]:
            row = level(host, c, args.requests, args.max_tokens, args)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"clients {c}: {row['tokens_per_s']:.1f} tokens/s, ttft mean {row['ttft_mean_ms']:.0f} ms",
                      file=sys.stderr, flush=True)
        if not args.json:
            base = rows[0]
            print("| clients | requests | errors | generated tokens/s | x 1 client | TTFT mean ms | TTFT p90 ms "
                  "| latency p50 ms | latency p90 ms | latency p99 ms | client CPU us/token |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for r in rows:
                print(f"| {r['clients']} | {r['requests']} | {r['errors']} | {r['tokens_per_s']:.1f} | "
                      f"{r['tokens_per_s'] / base['tokens_per_s']:.2f} | {r['ttft_mean_ms']:.0f} | "
                      f"{r['ttft_p90_ms']:.0f} | {r['latency_p50_ms']:.0f} | {r['latency_p90_ms']:.0f} | "
                      f"{r['latency_p99_ms']:.0f} | {r['client_cpu_us_per_token']:.0f} |")
        failed = [r for r in rows if r["errors"] or not r["tokens"]]
        for r in failed:
            print(f"clients {r['clients']}: {r['errors']} failed requests, {r['tokens']} tokens; first error: "
                  f"{r['first_error']}", file=sys.stderr)
        if failed:
            sys.exit(1)  # a level with failed requests is not a measurement
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
