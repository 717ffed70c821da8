"""SIGKILL loop over committing writers and running snapshots.

A writer process commits StateStore versions as fast as it can (partition 0 also runs
retention, keeping 3 versions), and after some commits takes an incremental checkpoint and a
full snapshot of the committed state, printing each version, checkpoint and snapshot once it
is complete. The campaign kills it with SIGKILL at a random moment (during an upload, a
manifest publish, retention, a snapshot...), then checks:

* no committed version is lost: the latest version is the last one the writer acknowledged,
  or the one after it (published, killed before it could say so);
* the latest version, and every published checkpoint and snapshot, restore to exactly the
  state a model of the writer's deterministic operations gives for that version;
* ``stateengine verify --all`` finds nothing damaged (an unfinished commit is incomplete);
* the next commit on top of it works and restores exactly.

Then the next round starts a writer again from there. Outcomes per round: ``ok``, ``lost``
(a committed version is gone), ``wrong`` (a restore differs from the model), ``error`` (a
restore, verify or the next commit failed), ``early-exit`` (the writer died by itself).

    python -m tests.campaigns.sigkill --rounds 300 --seed 1   # full size
    python -m tests.campaigns.sigkill --rounds 2 --seed 7     # what the test suite runs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
KEYS = 3000
RETAIN = 3
OPERATOR = "op"


def _descriptors():
    from stateengine import ListStateDescriptor, ValueStateDescriptor

    return [ValueStateDescriptor("value", bytes), ListStateDescriptor("log", int)]


def operations(version: int, seed: int) -> list[tuple[str, int, object]]:
    """What the writer does to make ``version`` from ``version - 1``: deterministic."""
    rng = random.Random(f"{seed}-{version}")
    if version == 1:  # every key, with a payload large enough for snapshots to take time
        return [("put", k, rng.randbytes(100)) for k in range(KEYS)] + \
               [("log", k, 1) for k in range(0, KEYS, 7)]
    ops: list[tuple[str, int, object]] = [("put", k, rng.randbytes(rng.randint(1, 120)))
                                          for k in rng.sample(range(KEYS), 60)]
    ops += [("clear", k, None) for k in rng.sample(range(KEYS), 5)]
    ops += [("log", k, version) for k in rng.sample(range(KEYS), 20)]
    return ops


def apply(backend, version: int, seed: int) -> None:
    value, log = (backend.get_state(d) for d in _descriptors())
    for op, key, arg in operations(version, seed):
        backend.set_current_key(key)
        if op == "put":
            value.update(arg)
        elif op == "clear":
            value.clear()
        else:
            log.add(arg)
    backend.operator_state.get_list_state("versions").add(version)


def model(version: int, seed: int) -> dict:
    values: dict[int, bytes] = {}
    logs: dict[int, list[int]] = {}
    for v in range(1, version + 1):
        for op, key, arg in operations(v, seed):
            if op == "put":
                values[key] = arg
            elif op == "clear":
                values.pop(key, None)
            else:
                logs.setdefault(key, []).append(arg)
    return {"value": values, "log": logs, "versions": list(range(1, version + 1))}


def contents(backend) -> dict:
    value, log = (backend.get_state(d) for d in _descriptors())
    values, logs = {}, {}
    for k in backend.get_keys("value"):
        backend.set_current_key(k)
        values[k] = value.value()
    for k in backend.get_keys("log"):
        backend.set_current_key(k)
        logs[k] = log.get()
    ops = backend.operator_state
    versions = ops.get_list_state("versions").get() if "versions" in ops.state_names else []
    return {"value": values, "log": logs, "versions": versions}


# ---- the writer (child process) ---------------------------------------------------------------

def writer(root: str, seed: int) -> None:
    sys.path.insert(0, PROJECT)
    from stateengine import StateStoreProvider

    prov = StateStoreProvider(os.path.join(root, "store"), OPERATOR, 0, 1, key_type=int,
                              descriptors=_descriptors(), local_dir=os.path.join(root, "local"),
                              min_versions_to_retain=RETAIN)
    version = prov.latest_version()
    print(f"READY {version}", flush=True)
    while True:
        store = prov.get_store(version)
        apply(store.backend, version + 1, seed)
        version = store.commit()
        print(f"COMMITTED {version}", flush=True)
        if version % 2 == 0:
            store.backend.checkpoint(version, os.path.join(root, "checkpoints"),
                                     private_dir=f"chk-{version}",
                                     manifest_path=f"chk-{version}.handle.json").result()
            print(f"CHECKPOINT {version}", flush=True)
        if version % 3 == 0:
            store.backend.snapshot(os.path.join(root, "snapshots"), f"snap-{version}").result()
            print(f"SNAPSHOT {version}", flush=True)


# ---- the campaign -----------------------------------------------------------------------------

class Campaign:
    def __init__(self, workdir: str, seed: int) -> None:
        sys.path.insert(0, PROJECT)
        self.workdir, self.seed, self.rng = workdir, seed, random.Random(seed)
        self.results: Counter = Counter()
        self.bad: list[dict] = []
        self.acked = 0  # newest version any writer acknowledged (or the campaign committed)
        self.kill_points: Counter = Counter()
        self.checked = Counter()

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [PROJECT, os.environ.get("PYTHONPATH")])))
        return subprocess.Popen(
            [sys.executable, "-m", "tests.campaigns.sigkill", "--writer", self.workdir,
             "--seed", str(self.seed)], cwd=PROJECT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

    def round(self, i: int) -> None:
        proc = self._start()
        ready = proc.stdout.readline()
        if not ready.startswith("READY"):
            proc.kill()
            self._record(i, "early-exit", f"no READY: {ready!r} {proc.stderr.read()[-1500:]}")
            return
        time.sleep(self.rng.uniform(0.0, 1.2))
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        if proc.returncode != -signal.SIGKILL:
            self._record(i, "early-exit", f"status {proc.returncode}: {err[-1500:]}")
            return
        lines = out.split()
        said = [(lines[j], int(lines[j + 1])) for j in range(0, len(lines) - 1, 2)]
        committed = [v for what, v in said if what == "COMMITTED"]
        self.kill_points[said[-1][0] if said else "before the first commit"] += 1
        acked = max(committed, default=self.acked)
        try:
            outcome, detail = self._check(acked)
        except Exception as e:  # noqa: BLE001 - classified and reported
            outcome, detail = "error", f"{type(e).__name__}: {e}"
        self._record(i, outcome, detail)

    def _record(self, i: int, outcome: str, detail: str) -> None:
        self.results[outcome] += 1
        if outcome != "ok":
            self.bad.append({"round": i, "outcome": outcome, "detail": detail[:2000]})

    def _restore(self, handle, scratch: str) -> dict:
        from stateengine import KeyedStateBackend

        b = KeyedStateBackend.restore(os.path.join(scratch, "r"), [handle])
        try:
            return contents(b)
        finally:
            b.dispose()

    def _check(self, acked: int) -> tuple[str, str]:
        from stateengine import StateStoreProvider, load_handle
        from stateengine.cli import main as cli

        root = self.workdir
        scratch = tempfile.mkdtemp(dir=root, prefix="check-")
        try:
            prov = StateStoreProvider(os.path.join(root, "store"), OPERATOR, 0, 1,
                                      key_type=int, descriptors=_descriptors(),
                                      local_dir=scratch, min_versions_to_retain=RETAIN)
            latest = prov.latest_version()
            if latest < acked:
                return "lost", f"latest version {latest}, but {acked} was committed"
            if latest > acked + 1:
                return "wrong", f"latest version {latest} was never committed (acked {acked})"
            store = prov.get_store(latest)
            if contents(store.backend) != model(latest, self.seed):
                return "wrong", f"version {latest} does not hold what was committed"
            self.checked["versions"] += 1
            for kind, folder in (("checkpoint", "checkpoints"), ("snapshot", "snapshots")):
                base = os.path.join(root, folder)
                for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
                    if not name.endswith(".handle.json"):
                        continue
                    v = int(name.split("-")[1].split(".")[0])
                    if self._restore(load_handle(base, name), scratch) != model(v, self.seed):
                        return "wrong", f"{kind} {name} does not hold version {v}"
                    self.checked[kind + "s"] += 1
                shutil.rmtree(base, ignore_errors=True)  # checked: keep the disk small
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()) as errors:
                # (a writer killed before its first commit leaves no checkpoint to verify)
                code = cli(["verify", os.path.join(root, "store"), "--operator", OPERATOR,
                            "--all"]) if latest else 0
            if code != 0:
                return "error", f"stateengine verify --all exited {code}: {errors.getvalue()}"
            apply(store.backend, latest + 1, self.seed)
            if store.commit() != latest + 1:
                return "error", "the next commit did not publish the next version"
            prov.close()
            again = StateStoreProvider(os.path.join(root, "store"), OPERATOR, 0, 1,
                                       key_type=int, descriptors=_descriptors(),
                                       local_dir=scratch)
            try:
                if again.latest_version() != latest + 1 or \
                        contents(again.get_store(latest + 1).backend) != model(latest + 1, self.seed):
                    return "wrong", f"the commit after the kill (version {latest + 1}) differs"
            finally:
                again.close()
            self.acked = latest + 1
            return "ok", ""
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def run(self, rounds: int, progress: bool = False) -> dict:
        started = time.monotonic()
        for i in range(rounds):
            self.round(i)
            if progress and (i + 1) % 20 == 0:
                print(f"{i + 1} rounds, {dict(self.results)}, version {self.acked}, "
                      f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        return {"rounds": rounds, "seed": self.seed, "outcomes": dict(self.results),
                "killed_after": dict(self.kill_points), "restored": dict(self.checked),
                "last_version": self.acked, "seconds": round(time.monotonic() - started, 1),
                "bad": self.bad}


def run(rounds: int, seed: int, workdir: str | None = None, progress: bool = False) -> dict:
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stateengine-sigkill-")
    try:
        return Campaign(workdir, seed).run(rounds, progress)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--writer", metavar="WORKDIR", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.writer:
        writer(args.writer, args.seed)
        return 0
    report = run(args.rounds, args.seed, progress=True)
    print(json.dumps(report, indent=1))
    return 1 if report["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
