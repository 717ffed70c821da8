"""Requests and bytes per StateStore commit on S3, for a 1% change of a large state.

Object stores bill per request (PUT/POST/LIST and GET/HEAD classes) and per byte out, so this
counts what a commit costs there: moto's S3 server on 127.0.0.1 with the counting proxy of
tests/s3_proxy.py in front of it; every request of the commit passes the proxy.

    python bench/s3_commit.py                       # 1,000,000 keys x 100 bytes, 1% changes
    python bench/s3_commit.py --keys 5000000 --commits 5
    python bench/s3_commit.py --latency-ms 20        # each request 20 ms late, as on S3
    STATEENGINE_TRANSFER_THREADS=1 python bench/s3_commit.py --latency-ms 20   # one file at a time

Reports, per commit: requests by HTTP method, bytes sent and received, the files and bytes
the commit uploaded; then the same for restoring the latest version in a fresh provider: a
task landing on another Python worker of the same machine, whose restore links the SST files
the first worker's database holds from the machine's file cache (``restore here``), and one
landing on another machine (``restore elsewhere``, no cache). Writes
bench/results/s3-commit-latest.json and appends its line to bench/results/history.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from stateengine import (StateStoreProvider, ValueStateDescriptor,  # noqa: E402
                         configure_file_cache, transfer_threads)
from stateengine.local_s3 import LocalS3Server  # noqa: E402
from tests.s3_proxy import FaultProxy, totals  # noqa: E402

STATE = ValueStateDescriptor("profile", value_type=bytes)


def measure(proxy: FaultProxy, fn):
    proxy.reset_counts()
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    ex = proxy.snapshot()
    row = totals(ex)
    row["seconds"] = round(seconds, 3)
    row["bytes_put"] = sum(e.body_bytes for e in ex if e.method in ("PUT", "POST"))
    return result, row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--change", type=float, default=0.01, help="fraction of keys changed per commit")
    ap.add_argument("--commits", type=int, default=3, help="commits after the first")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="added by the proxy to every request (a real object store answers in "
                         "tens of ms, moto on loopback in a few)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)

    work = tempfile.mkdtemp(prefix="s3-bench-")
    server = LocalS3Server(log_path=os.path.join(work, "moto.log")).start()
    os.environ.update({k: v for k, v in server.env().items() if k != "AWS_ENDPOINT_URL"})
    proxy = FaultProxy(server.port).start()
    if args.latency_ms > 0:
        proxy.delay(args.latency_ms / 1e3)
    uri = server.uri("bench", endpoint=proxy.endpoint)
    rng = np.random.default_rng(1)
    rows = []
    try:
        prov = StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=[STATE],
                                  local_dir=os.path.join(work, "local"))
        store = prov.get_store(0)
        keys = np.arange(args.keys, dtype=np.int64)
        state = store.get_state(STATE)
        for a in range(0, args.keys, 200_000):
            b = min(args.keys, a + 200_000)
            state.put_many(keys[a:b], [bytes(v) for v in rng.integers(
                0, 256, (b - a, args.value_bytes), dtype=np.uint8)])
        version, row = measure(proxy, store.commit)
        rows.append({"commit": version, "change": 1.0, **row, **_store_stats(store)})
        changed = int(args.keys * args.change)
        for _ in range(args.commits):
            store = prov.get_store(version)
            state = store.get_state(STATE)
            picked = np.sort(rng.choice(args.keys, changed, replace=False)).astype(np.int64)
            state.put_many(picked, [bytes(v) for v in rng.integers(
                0, 256, (changed, args.value_bytes), dtype=np.uint8)])
            version, row = measure(proxy, store.commit)
            rows.append({"commit": version, "change": args.change, **row, **_store_stats(store)})
        restores = {}
        for name in ("here", "elsewhere"):  # the first worker still holds the partition
            if name == "elsewhere":
                configure_file_cache(None)  # another machine: its own, empty cache
            fresh = StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=[STATE],
                                       local_dir=os.path.join(work, name))
            _, restores[name] = measure(proxy, lambda: fresh.get_store(version).abort())
            fresh.close()
        prov.close()
    finally:
        proxy.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"S3 commit cost: {args.keys:,} keys x {args.value_bytes} bytes, "
          f"{args.change:.0%} of keys changed per commit, {args.latency_ms:g} ms added per "
          f"request, {transfer_threads()} transfer threads")
    head = (f"{'':>17} {'requests':>8} {'PUT':>5} {'POST':>5} {'GET':>5} {'HEAD':>5} "
            f"{'DELETE':>6} {'MB up':>8} {'MB down':>8} {'files up':>8} {'reused':>6} {'s':>6}")
    print(head)
    for r in rows + [{"commit": f"restore {k}", **v} for k, v in restores.items()]:
        name = f"v{r['commit']}" if isinstance(r["commit"], int) else r["commit"]
        print(f"{name:>17} {r['requests']:>8} {r.get('PUT', 0):>5} {r.get('POST', 0):>5} "
              f"{r.get('GET', 0):>5} {r.get('HEAD', 0):>5} {r.get('DELETE', 0):>6} "
              f"{r['bytes_up'] / 1e6:>8.2f} {r['bytes_down'] / 1e6:>8.2f} "
              f"{r.get('files_uploaded', '-'):>8} {r.get('files_reused', '-'):>6} "
              f"{r['seconds']:>6.2f}")
    os.makedirs(args.out, exist_ok=True)
    import history

    path = history.record(args.out, "s3_commit", {
        "keys": args.keys, "value_bytes": args.value_bytes, "change": args.change,
        "latency_ms": args.latency_ms, "transfer_threads": transfer_threads(),
        "commits": rows, "restore_same_machine": restores["here"],
        "restore_other_machine": restores["elsewhere"]})
    print(f"wrote {path} and its line in history.jsonl")
    return 0


def _store_stats(store) -> dict:
    m = store.metrics
    return {k: m[k] for k in ("files_uploaded", "files_reused", "bytes_uploaded", "bytes",
                              "storage_retries") if k in m}


if __name__ == "__main__":
    sys.exit(main())
