"""Partition 0's commit against the others' when many partitions commit to object storage.

Retention runs in partition 0's commit (``VersionCatalog.prune``, after every commit on the
Spark path): it reads the manifest of every partition at every retained version it has not
read before (one per partition and batch once warm, all of them after the partition moved
to another worker), deletes the old version's manifests and the shared files only they named.
One request after another, that made partition 0's task the straggler of every batch.

Each of ``--partitions`` StateStoreProviders commits a small change per batch to moto's S3
server on 127.0.0.1, behind tests/s3_proxy.py's proxy adding ``--latency-ms`` to every request
(moto answers in a few milliseconds where a real object store takes tens). Reports, per batch
once retention has versions to delete: partition 0's commit, the median and the slowest of
the others', and partition 0's requests.

    python bench/prune_partitions.py                                   # 32 partitions, 20 ms
    python bench/prune_partitions.py --partitions 64 --latency-ms 30 --batches 16
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from stateengine import StateStoreProvider, ValueStateDescriptor  # noqa: E402
from stateengine.keygroups import assign_key_group, operator_for_key_group  # noqa: E402
from stateengine.local_s3 import LocalS3Server  # noqa: E402
from tests.s3_proxy import FaultProxy, totals  # noqa: E402

STATE = ValueStateDescriptor("v", value_type=int)
RETAIN = 10  # the Spark path's default min_versions_to_retain


def owned_keys(partitions: int, max_parallelism: int, per_partition: int) -> list[np.ndarray]:
    """per_partition int keys for each partition, by the engine's own routing."""
    own: list[list[int]] = [[] for _ in range(partitions)]
    k = 0
    while min(len(o) for o in own) < per_partition:
        p = operator_for_key_group(assign_key_group(k, max_parallelism), partitions,
                                   max_parallelism)
        if len(own[p]) < per_partition:
            own[p].append(k)
        k += 1
    return [np.array(o, dtype=np.int64) for o in own]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--batches", type=int, default=14, help=f"more than {RETAIN} to prune")
    ap.add_argument("--latency-ms", type=float, default=20.0,
                    help="added by the proxy to every request")
    args = ap.parse_args(argv)
    max_p = max(128, 1 << (args.partitions - 1).bit_length())
    work = tempfile.mkdtemp(prefix="prune-bench-")
    server = LocalS3Server(log_path=os.path.join(work, "moto.log")).start()
    os.environ.update({k: v for k, v in server.env().items() if k != "AWS_ENDPOINT_URL"})
    proxy = FaultProxy(server.port).start()
    if args.latency_ms > 0:
        proxy.delay(args.latency_ms / 1e3)
    uri = server.uri("bench", endpoint=proxy.endpoint)
    keys = owned_keys(args.partitions, max_p, 10)
    rows = []
    try:
        provs = [StateStoreProvider(uri, "op", p, args.partitions, key_type=int,
                                    descriptors=[STATE], max_parallelism=max_p,
                                    min_versions_to_retain=RETAIN,
                                    local_dir=os.path.join(work, f"p{p}"))
                 for p in range(args.partitions)]
        versions = [0] * args.partitions
        for b in range(args.batches):
            seconds, requests = [], 0
            for p, prov in enumerate(provs):
                store = prov.get_store(versions[p])
                store.get_state(STATE).put_many(keys[p], (keys[p] + b).tolist())
                proxy.reset_counts()
                t0 = time.perf_counter()
                versions[p] = store.commit()
                seconds.append(time.perf_counter() - t0)
                if p == 0:
                    requests = totals(proxy.snapshot())["requests"]
                    pruned = store.metrics.get("versions_pruned", 0)
            if pruned:
                rows.append((b, seconds[0], statistics.median(seconds[1:]), max(seconds[1:]),
                             requests))
        for prov in provs:
            prov.close()
    finally:
        proxy.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.partitions} partitions, {args.latency_ms:g} ms per request, "
          f"min_versions_to_retain {RETAIN}; batches that pruned:")
    print(f"{'batch':>5} {'p0 commit s':>11} {'others median':>13} {'others max':>10} "
          f"{'p0 requests':>11}")
    for b, p0, med, slowest, req in rows:
        print(f"{b:>5} {p0:>11.2f} {med:>13.3f} {slowest:>10.3f} {req:>11}")
    if len(rows) > 1:
        print(f"partition 0 after its first prune: median "
              f"{statistics.median(r[1] for r in rows[1:]):.2f} s per commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
