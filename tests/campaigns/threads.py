"""Thread-abuse campaign: close a backend while other threads are inside every kind of call.

Each iteration opens a backend (or a StateStore's backend) holding value, list, map and
sorted-map state and timers, starts worker threads that run random batch calls, point calls,
scans (get_keys, map and sorted-map iteration, counts), full snapshots, incremental
checkpoints, timer firing and state registration, and closes the backend from another thread
after a random delay, some iterators still open. Every call must either succeed or raise one
of the documented errors below; the process must never crash or hang.

    python -m tests.campaigns.threads --iterations 2000          # the full campaign
    python -m tests.campaigns.threads --iterations 20 --json     # what the test suite runs

A crash shows as the process dying (tests/test_thread_model.py runs this in a child process);
any other exception, or a thread still running a minute after close, fails the campaign and
is printed with a traceback.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

from stateengine import (BackendClosedError, KeyedStateBackend, ListStateDescriptor,
                         MapStateDescriptor, SortedMapStateDescriptor, StateStoreProvider,
                         ValueStateDescriptor)
from stateengine.errors import SnapshotCancelledError

# What a call racing close() may raise: the backend was closed (at the call or at an iterator's
# next step), or a snapshot/checkpoint running at close() was cancelled.
ALLOWED = (BackendClosedError, SnapshotCancelledError)
KEYS = np.arange(2000, dtype=np.int64)
DESCRIPTORS = [ValueStateDescriptor("v", int, default=0), ListStateDescriptor("l", int),
               MapStateDescriptor("m", str, int), SortedMapStateDescriptor("s", int, str)]


class Tally:
    """Outcomes by (operation, outcome class), shared by all threads of the campaign."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.unexpected: list[str] = []

    def record(self, op: str, outcome: str, detail: str | None = None) -> None:
        with self.lock:
            self.counts[(op, outcome)] += 1
            if detail is not None and len(self.unexpected) < 20:
                self.unexpected.append(detail)


class Ids:
    """Unique ids (snapshot names, checkpoint ids, state names) across worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def __next__(self) -> int:
        with self._lock:
            self._next += 1
            return self._next


def populate(backend: KeyedStateBackend) -> dict:
    handles = {d.name: backend.get_state(d) for d in DESCRIPTORS}
    handles["v"].put_many(KEYS, KEYS)
    handles["l"].add_many(KEYS, KEYS)
    handles["m"].put_many(KEYS, [f"u{k % 7}" for k in KEYS], KEYS)
    handles["s"].put_many(KEYS, KEYS % 11, [str(k) for k in KEYS])
    for k in range(0, 2000, 10):
        backend.set_current_key(int(k))
        backend.timer_service.register_event_time_timer(int(k))
    return handles


def worker_ops(backend, h, rng: random.Random, root: str, ident: int, counter) -> dict:
    """The operations a worker picks from; each is one call (or one partial iteration)."""
    def keys():
        return KEYS[rng.randrange(0, 1500):][:rng.randrange(1, 500)]

    def scan_partly(it):
        for i, _ in enumerate(it):
            if i == 3:
                time.sleep(rng.random() * 0.002)  # an open iterator when close() comes
            if i > 50:
                break

    def point():
        k = int(rng.randrange(2000))
        backend.set_current_key(k)
        h["v"].update(h["v"].value() + 1)
        h["m"].put("p", k)
        h["m"].get("p")
        h["l"].add(k)

    def snapshot():
        backend.snapshot(root, f"snap-{ident}-{next(counter)}").result()

    def checkpoint():
        cid = next(counter)
        backend.checkpoint(cid, root).result()
        backend.notify_checkpoint_complete(cid)

    def timers():
        k = int(rng.randrange(2000))
        backend.set_current_key(k)
        backend.timer_service.register_event_time_timer(rng.randrange(100_000))
        for i, _ in enumerate(backend.timer_service.advance_watermark(rng.randrange(100_000))):
            if i > 20:
                break

    def sorted_map():
        backend.set_current_key(int(rng.randrange(2000)))
        scan_partly(h["s"].tail(rng.randrange(11)))
        h["s"].first_entry()

    def value_put():
        k = keys()
        h["v"].put_many(k, k)

    def list_add():
        k = keys()
        h["l"].add_many(k, k)

    def map_put():
        k = keys()
        h["m"].put_many(k, [f"b{x % 3}" for x in k], k)

    def map_get():
        k = keys()
        h["m"].get_many(k, [f"u{x % 7}" for x in k])

    def map_entries():
        backend.set_current_key(int(rng.randrange(2000)))
        scan_partly(h["m"].entries())

    return {
        "value.get_many": lambda: h["v"].get_many(keys()),
        "value.put_many": value_put,
        "list.add_many": list_add,
        "list.get_many": lambda: h["l"].get_many(keys()),
        "map.put_many": map_put,
        "map.get_many": map_get,
        "point": point,
        "get_keys": lambda: scan_partly(backend.get_keys("v")),
        "map.entries": map_entries,
        "sorted_map": sorted_map,
        "count": lambda: backend.num_state_entries(),
        "snapshot": snapshot,
        "checkpoint": checkpoint,
        "timers": timers,
        "register": lambda: backend.get_state(ValueStateDescriptor(f"dyn{ident}-{next(counter)}",
                                                                   int)),
    }


WEIGHTS = {"value.get_many": 4, "value.put_many": 4, "list.add_many": 2, "list.get_many": 2,
           "map.put_many": 2, "map.get_many": 2, "point": 6, "get_keys": 2, "map.entries": 3,
           "sorted_map": 2, "count": 1, "snapshot": 2, "checkpoint": 2, "timers": 2,
           "register": 1}


def run_worker(backend, h, seed: int, root: str, ident: int, counter, stop: threading.Event,
               tally: Tally) -> None:
    rng = random.Random(seed)
    ops = worker_ops(backend, h, rng, root, ident, counter)
    names = list(WEIGHTS)
    weights = [WEIGHTS[n] for n in names]
    while not stop.is_set():
        op = rng.choices(names, weights)[0]
        try:
            ops[op]()
        except ALLOWED as e:
            tally.record(op, type(e).__name__)
            if isinstance(e, BackendClosedError):
                return  # the backend is gone: nothing more to race
        except BaseException as e:  # noqa: BLE001 - every other outcome is a finding
            tally.record(op, f"unexpected {type(e).__name__}",
                         f"{op}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        else:
            tally.record(op, "ok")


def iteration(i: int, seed: int, workdir: str, tally: Tally, threads: int) -> bool:
    """One backend, `threads` workers, one closer. False if a thread hung."""
    rng = random.Random(seed)
    root = os.path.join(workdir, f"it{i}")
    store_variant = i % 4 == 3  # every fourth iteration closes a StateStore's backend
    if store_variant:
        provider = StateStoreProvider(os.path.join(root, "store"), "op", 0, 1, key_type=int,
                                      local_dir=os.path.join(root, "local"))
        backend = provider.get_store(0).backend
    else:
        backend = KeyedStateBackend(os.path.join(root, "b"), key_type=int)
    h = populate(backend)
    counter = Ids()
    stop = threading.Event()
    snaps = os.path.join(root, "snaps")
    workers = [threading.Thread(target=run_worker,
                                args=(backend, h, rng.randrange(1 << 30), snaps, w, counter,
                                      stop, tally), daemon=True)
               for w in range(threads)]
    for t in workers:
        t.start()
    time.sleep(rng.random() * 0.03)
    how = rng.choice(["close", "close", "dispose"])
    try:
        if store_variant:
            provider.close()  # disposes the store's backend
        elif how == "close":
            backend.close()
        else:
            backend.dispose()
        tally.record("close", "ok")
    except BaseException as e:  # noqa: BLE001
        tally.record("close", f"unexpected {type(e).__name__}",
                     f"close: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    # Calls after close must all raise BackendClosedError.
    for name, call in (("after.value", lambda: h["v"].get_many(KEYS[:3])),
                       ("after.scan", lambda: list(backend.get_keys("v")))):
        try:
            call()
            tally.record(name, "unexpected success", f"{name} succeeded after close")
        except BackendClosedError:
            tally.record(name, "BackendClosedError")
    stop.set()
    hung = False
    for t in workers:
        t.join(60)
        hung |= t.is_alive()
    if hung:
        tally.record("join", "hang", f"iteration {i}: a worker still runs 60 s after close")
    shutil.rmtree(root, ignore_errors=True)
    return not hung


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=4, help="worker threads per iteration")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    tally = Tally()
    started = time.time()
    workdir = tempfile.mkdtemp(prefix="se-threads-")
    ok = True
    try:
        for i in range(args.iterations):
            if not iteration(i, args.seed * 1_000_003 + i, workdir, tally, args.threads):
                ok = False
                break
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    outcomes: collections.Counter[str] = collections.Counter()
    by_op: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for (op, outcome), n in sorted(tally.counts.items()):
        outcomes[outcome] += n
        by_op[op][outcome] = n
    unexpected = sum(n for o, n in outcomes.items() if o.startswith("unexpected") or o == "hang")
    summary = {"iterations": args.iterations, "threads": args.threads, "seed": args.seed,
               "calls": sum(outcomes.values()), "outcomes": dict(outcomes),
               "by_operation": by_op, "unexpected": unexpected,
               "unexpected_samples": tally.unexpected, "seconds": round(time.time() - started, 1)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{args.iterations} iterations, {args.threads} workers each, "
              f"{summary['calls']} calls in {summary['seconds']} s")
        for outcome, n in outcomes.most_common():
            print(f"  {outcome:32s} {n}")
        for sample in tally.unexpected:
            print(sample, file=sys.stderr)
    sys.stdout.flush()
    if not ok:
        os._exit(3)  # a hung thread would keep the interpreter from exiting
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
