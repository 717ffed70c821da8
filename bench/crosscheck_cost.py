"""What the cross-checks and the stale-commit checks cost (docs/reliability/cross-checks.md).

Every check is a function of its own, so its cost is timed on the inputs of a real restore or
commit, next to that whole operation, on one build:

* restore of a StateStore version (incremental): ``check_options`` (RocksDB's OPTIONS file
  against the manifest's metas) and ``check_data_layout`` (the first and last entry of every
  column family decoded), against the whole ``get_store``;
* restore of half the key groups of a full snapshot: the section before the range, decoded
  (not restored) to check where it ends, against the whole restore;
* commit: ``check_base`` before and after publishing (the base manifest's existence, then its
  content) against the whole ``commit()``, and retention's ``_second_look`` against the whole
  ``prune``;
* with ``--s3``: the same commit against moto's S3 server on 127.0.0.1 behind the counting
  proxy of tests/s3_proxy.py, with the requests each check sends.

    python bench/crosscheck_cost.py                    # 300,000 keys, local disk
    python bench/crosscheck_cost.py --keys 100000 --s3

Reports medians over ``--repeat`` runs, writes bench/results/crosscheck-cost-latest.json and
appends the report to bench/results/history.jsonl.
"""

from __future__ import annotations

import argparse
import json
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

from stateengine import (KeyedStateBackend, KeyGroupRange, ListStateDescriptor,  # noqa: E402
                         MapStateDescriptor, StateStoreProvider, ValueStateDescriptor,
                         load_handle)
from stateengine import _native  # noqa: E402
from stateengine.checkpoint import crosscheck, full, incremental  # noqa: E402
from stateengine.checkpoint.storage import forget_verifications  # noqa: E402

STATES = [ValueStateDescriptor("value", int), ListStateDescriptor("events", int),
          MapStateDescriptor("attrs", str, int)]


def _fill(get_state, keys: np.ndarray, round_: int) -> None:
    value, events, attrs = (get_state(d) for d in STATES)
    value.put_many(keys, keys * 3 + round_)
    events.add_many(keys, keys + round_)
    attrs.put_many(keys, [f"a{k % 7}" for k in keys.tolist()], keys)


def _timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def store_case(uri: str, work: str, keys: int, repeat: int, proxy=None) -> dict:
    """Commits and restores of one partition; the checks timed on their real inputs."""
    rng = np.random.default_rng(1)
    prov = StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=STATES,
                              local_dir=os.path.join(work, "writer"), min_versions_to_retain=2)
    store = prov.get_store(0)
    _fill(store.get_state, np.arange(keys, dtype=np.int64), 0)
    version = store.commit()
    rows = {"commit": [], "check_before": [], "check_after": [], "second_look": [],
            "restore": [], "check_options": [], "check_data_layout": []}
    requests = {}
    for r in range(repeat + 2):  # the first commits fill the retention window
        store = prov.get_store(version)
        changed = np.sort(rng.choice(keys, keys // 100, replace=False)).astype(np.int64)
        _fill(store.get_state, changed, r + 1)
        version, secs = _timed(store.commit)
        new = prov.catalog.manifest_handles(version)[0][2]
        previous = {f.path for f in prov.catalog.manifest_handles(version - 1)[0][2].shared}
        base = prov.catalog.manifest_path(version - 1, 0, 1)
        reused = [f for f in new.shared if f.path in previous]
        if proxy is not None:
            proxy.reset_counts()
        _, before = _timed(lambda: incremental.check_base(prov.storage, version, reused, base,
                                                          read=False))
        if proxy is not None:
            requests["check_before"] = len(proxy.snapshot())
            proxy.reset_counts()
        _, after = _timed(lambda: incremental.check_base(prov.storage, version, reused, base))
        if proxy is not None:
            requests["check_after"] = len(proxy.snapshot())
        cutoff = version - 2 + 1
        old = [v for v in prov.catalog.version_dirs() if v < cutoff]
        if proxy is not None:
            proxy.reset_counts()
        _, look = _timed(lambda: prov.catalog._second_look(old, cutoff))
        if proxy is not None:
            requests["second_look"] = len(proxy.snapshot())
        if r >= 2:
            rows["commit"].append(secs)
            rows["check_before"].append(before)
            rows["check_after"].append(after)
            rows["second_look"].append(look)
    prov.close()
    for r in range(repeat):
        forget_verifications()
        reader = StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=STATES,
                                    local_dir=os.path.join(work, f"reader-{r}"))
        st, secs = _timed(lambda: reader.get_store(version))
        handle = reader.catalog.manifest_handles(version)[0][2]
        db_dir = os.path.join(st.backend.path, "db")
        _, opt = _timed(lambda: crosscheck.check_options(handle, db_dir))
        _, layout = _timed(lambda: crosscheck.check_data_layout(handle, st.backend))
        rows["restore"].append(secs)
        rows["check_options"].append(opt)
        rows["check_data_layout"].append(layout)
        st.abort()
        reader.close()
    out = {k: round(statistics.median(v) * 1e3, 3) for k, v in rows.items() if v}
    out = {f"{k}_ms": v for k, v in out.items()}
    out["files_reused"] = len(reused)
    if requests:
        out["requests"] = requests
    return out


def full_case(work: str, keys: int, repeat: int) -> dict:
    """A full snapshot restored into half its key groups: the boundary section's decode."""
    b = KeyedStateBackend(os.path.join(work, "full-src"), key_type=int)
    _fill(b.get_state, np.arange(keys, dtype=np.int64), 0)
    h = b.snapshot(os.path.join(work, "snaps"), "s").result()
    b.close()
    handle = load_handle(os.path.join(work, "snaps"), "s.handle.json")
    half = KeyGroupRange(64, 127)
    boundary = [s for s in full.section_plan(handle, half, "s") if s[3]]
    totals, decodes = [], []
    for r in range(repeat):
        forget_verifications()
        target = os.path.join(work, f"full-{r}")
        restored, secs = _timed(lambda: KeyedStateBackend.restore(target, [handle], half))
        totals.append(secs)
        # the boundary section alone, decoded (nothing written) as the restore did
        local = os.path.join(work, "snaps", "s")
        cfs = [cf for _, cf in restored.column_families()]
        _, d = _timed(lambda: _native.restore_sections(
            restored, [(local, True, cfs)], [(0, *boundary[0])], ""))
        decodes.append(d)
        restored.dispose()
    return {"restore_half_ms": round(statistics.median(totals) * 1e3, 3),
            "boundary_decode_ms": round(statistics.median(decodes) * 1e3, 3),
            "sections": len(handle.offsets), "snapshot_bytes": h.file.size}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--s3", action="store_true", help="also against moto's S3 server")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="crosscheck-bench-")
    report = {"keys": args.keys, "load_average": os.getloadavg()}
    try:
        report["local_store"] = store_case(os.path.join(work, "ck"), os.path.join(work, "l"),
                                           args.keys, args.repeat)
        report["local_full"] = full_case(work, args.keys, args.repeat)
        if args.s3:
            from stateengine.local_s3 import LocalS3Server
            from tests.s3_proxy import FaultProxy

            server = LocalS3Server(log_path=os.path.join(work, "moto.log")).start()
            os.environ.update({k: v for k, v in server.env().items()
                               if k != "AWS_ENDPOINT_URL"})
            proxy = FaultProxy(server.port).start()
            try:
                report["s3_store"] = store_case(server.uri("bench", endpoint=proxy.endpoint),
                                                os.path.join(work, "s"), args.keys,
                                                args.repeat, proxy)
            finally:
                proxy.stop()
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    import history

    print(f"wrote {history.record(args.out, 'crosscheck_cost', report)} and its line in "
          f"history.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
