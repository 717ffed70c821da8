"""Sweeping the working directories that processes ended without closing left in a local root.

A provider's working directory is ``<op>-p<P>-of-<N>-<pid>-<12 hex>``; a process killed with
its providers open leaves it behind. The first provider that opens a backend in a local root
in a process sweeps it once (on a daemon thread): a directory goes only if its owner is gone
and its RocksDB is not open anywhere (``db/LOCK`` can be locked), or it has no LOCK and is
old. Real RocksDB, real child processes killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from stateengine import (KeyedStateBackend, ReducingStateDescriptor, StateStoreProvider,
                         ValueStateDescriptor, cli, reducers, workdirs)

COUNT = ValueStateDescriptor("count", int, default=0)
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOUR = 3600

# argv: provider CHECKPOINT LOCAL_ROOT  -> commits version 1, opens it, prints its directory
#       backend PATH                    -> a KeyedStateBackend open at PATH
#       lock FILE                       -> prints whether FILE can be locked (RocksDB's lock)
# then waits for stdin to close (or for SIGKILL)
CHILD = r"""
import fcntl, os, sys
from stateengine import KeyedStateBackend, StateStoreProvider, ValueStateDescriptor
mode = sys.argv[1]
if mode == "provider":
    d = ValueStateDescriptor("count", int, default=0)
    p = StateStoreProvider(sys.argv[2], "op", 0, 1, key_type=int, descriptors=[d],
                           local_dir=sys.argv[3])
    s = p.get_store(0)
    s.backend.set_current_key(1)
    s.get_state(d).update(7)
    s.commit()
    p.get_store(1)
    print(p._backend.path, flush=True)
elif mode == "backend":
    b = KeyedStateBackend(sys.argv[2], key_type=int)
    print("open", flush=True)
else:
    fd = os.open(sys.argv[2], os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("locked", flush=True)
    except OSError:
        print("busy", flush=True)
    sys.exit(0)
sys.stdin.read()
"""


def child(*args: str) -> tuple[subprocess.Popen, str]:
    """A Python process running CHILD with args, and the first line it printed."""
    env = dict(os.environ, STATEENGINE_SWEEP_LOCAL_DIR="0")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=PROJECT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line, f"child {args} printed nothing (exit {proc.wait()})"
    return proc, line


def finish(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(30)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL, then reap it (a zombie still answers kill(pid, 0))."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def lockable_elsewhere(workdir: str) -> bool:
    proc, answer = child("lock", os.path.join(workdir, "db", "LOCK"))
    proc.wait(30)
    return answer == "locked"


def age(path: str, seconds: float) -> None:
    """Sets the mtime of path, its entries and its RocksDB LOCK ``seconds`` into the past."""
    then = time.time() - seconds
    lock = os.path.join(path, "db", "LOCK")
    for p in [e.path for e in os.scandir(path)] + ([lock] if os.path.exists(lock) else []):
        os.utime(p, (then, then), follow_symlinks=False)
    os.utime(path, (then, then))


def killed(proc: subprocess.Popen, workdir: str) -> None:
    """SIGKILL, reaped, its directory's LOCK a minute old (a fresh one is left a few seconds
    to RocksDB, which creates it and then locks it)."""
    kill(proc)
    age(workdir, 60)


def reasons(report: workdirs.SweepReport) -> dict[str, tuple[bool, str]]:
    return {e.name: (e.removed, e.reason) for e in report.entries}


@pytest.fixture
def sweeping(monkeypatch):
    monkeypatch.delenv(workdirs.SWEEP_ENV, raising=False)


def provider(tmp_path, root) -> StateStoreProvider:
    return StateStoreProvider(str(tmp_path / "cp-mine"), "mine", 0, 1, key_type=int,
                              descriptors=[COUNT], local_dir=str(root))


def test_names_carry_the_pid_and_old_names_still_match():
    name = workdirs.workdir_name("my-op", 3, 8)
    m = workdirs.WORKDIR_NAME.fullmatch(name)
    assert m and (m["operator"], m["partition"], m["partitions"], m["pid"]) == \
        ("my-op", "3", "8", str(os.getpid()))
    old = workdirs.WORKDIR_NAME.fullmatch("agg-p0-of-1-4e2e636fd287")
    assert old and old["operator"] == "agg" and old["pid"] is None
    for other in ("remote-files", "checked-tables", "agg-p0-of-1-4E2E636FD287",
                  "agg-p0-of-1-4e2e636fd28", "agg-p0-of-1-4e2e636fd287.bak"):
        assert not workdirs.WORKDIR_NAME.fullmatch(other), other


def test_a_killed_process_directory_goes_at_the_next_provider_open(tmp_path, sweeping):
    root = tmp_path / "local"
    proc, left = child("provider", str(tmp_path / "cp"), str(root))
    assert os.path.basename(left).split("-")[-2] == str(proc.pid)
    killed(proc, left)
    assert os.path.isdir(os.path.join(left, "db"))  # what a killed worker leaves behind
    with provider(tmp_path, root) as mine:
        mine.get_store(0)
        report = workdirs.wait_for_sweep(str(root), timeout=30)
        assert report is not None
        assert reasons(report)[os.path.basename(left)] == \
            (True, f"owner pid {proc.pid} is gone, database not open")
        assert report.bytes_removed > 0
        assert not os.path.exists(left)
        assert os.path.isdir(mine._backend.path)  # its own, opened meanwhile
        # once per process and root: a second provider does not sweep again
        assert workdirs.sweep_in_background(str(root)) is None
    # the killed child's committed version is intact (the checkpoint is not the local root)
    with StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int, descriptors=[COUNT],
                            local_dir=str(tmp_path / "other")) as again:
        store = again.get_store(1)
        store.backend.set_current_key(1)
        assert store.get_state(COUNT).value() == 7


def test_a_database_open_in_a_live_process_is_kept(tmp_path):
    root = tmp_path / "local"
    live, live_dir = child("provider", str(tmp_path / "cp"), str(root))
    # a dead pid in the name, its database open elsewhere (another PID namespace sharing /tmp)
    foreign = root / f"op-p1-of-2-{dead_pid()}-0123456789ab"
    holder, _ = child("backend", str(foreign))
    try:
        age(str(foreign), 2 * HOUR)
        report = workdirs.sweep_local_dir(str(root))
        assert reasons(report) == {
            os.path.basename(live_dir): (False, f"owner pid {live.pid} is running"),
            foreign.name: (False, f"owner pid {foreign.name.split('-')[-2]} is gone, but its "
                                  f"database is open in another process (LOCK held)")}
        assert os.path.isdir(live_dir) and foreign.is_dir()
        assert not lockable_elsewhere(live_dir) and not lockable_elsewhere(str(foreign))
    finally:
        finish(live)
        finish(holder)


def test_this_process_keeps_its_own_directories_and_their_locks(tmp_path, sweeping):
    root = tmp_path / "local"
    mine = provider(tmp_path, root)
    store = mine.get_store(0)
    workdirs.wait_for_sweep(str(root), timeout=30)
    # this process's database under a name whose pid is dead: only the registry protects it
    # (a lock taken and dropped here would silently drop RocksDB's own)
    disguised = root / f"mine-p0-of-1-{dead_pid()}-0123456789ab"
    backend = KeyedStateBackend(str(disguised), key_type=int)
    try:
        age(str(disguised), 2 * HOUR)
        (tmp_path / "link").symlink_to(root)  # the same root spelled another way
        for spelling in (root, tmp_path / "link"):
            report = workdirs.sweep_local_dir(str(spelling))
            assert reasons(report) == {os.path.basename(store.backend.path):
                                       (False, "in use by this process"),
                                       disguised.name: (False, "in use by this process")}
        store.backend.set_current_key(5)
        store.get_state(COUNT).update(11)
        store.commit()
        backend.set_current_key(5)
        backend.get_state(COUNT).update(12)
        assert backend.get_state(COUNT).value() == 12
        # RocksDB's locks are still held: another process can neither lock nor open them
        assert not lockable_elsewhere(mine._backend.path)
        assert not lockable_elsewhere(str(disguised))
        again = mine.get_store(1)  # the committed, reused backend
        again.backend.set_current_key(5)
        assert again.get_state(COUNT).value() == 11
    finally:
        backend.close()
        mine.close()
    # closed: nothing of this process holds it any more, and its pid is dead
    age(str(disguised), 60)
    report = workdirs.sweep_local_dir(str(root))
    assert reasons(report) == {disguised.name: (True, f"owner pid {disguised.name.split('-')[-2]}"
                                                      f" is gone, database not open")}


def test_old_names_without_a_pid(tmp_path):
    root = tmp_path / "local"
    held, closed = root / "op-p0-of-1-aaaaaaaaaaaa", root / "op-p0-of-1-bbbbbbbbbbbb"
    just_closed = root / "op-p0-of-1-eeeeeeeeeeee"  # as if RocksDB had only created its LOCK
    old_bare, young_bare = root / "op-p0-of-1-cccccccccccc", root / "op-p0-of-1-dddddddddddd"
    holder, _ = child("backend", str(held))
    try:
        for d in (closed, just_closed):
            KeyedStateBackend(str(d), key_type=int).close()  # leaves db/LOCK, unlocked
        for bare in (old_bare, young_bare):
            (bare / "checkpoints").mkdir(parents=True)  # a backend killed while being made
        for d in (held, closed, old_bare):
            age(str(d), 2 * HOUR)
        report = workdirs.sweep_local_dir(str(root))
        got = reasons(report)
        assert got[held.name] == (False, "no owner pid in its name, but its database is open "
                                         "in another process (LOCK held)")
        assert got[closed.name] == (True, "no owner pid in its name, database not open")
        assert got[just_closed.name][0] is False and got[just_closed.name][1].startswith(
            "no owner pid in its name, LOCK file created ")
        assert got[old_bare.name][0] and got[old_bare.name][1].startswith(
            "no owner pid in its name, no LOCK file, unchanged for 2.0 h")
        assert got[young_bare.name][0] is False and "no LOCK file, changed" in \
            got[young_bare.name][1]
        assert sorted(os.listdir(root)) == [held.name, young_bare.name, just_closed.name]
        assert not lockable_elsewhere(str(held))
    finally:
        finish(holder)


def test_nothing_but_working_directories_is_touched(tmp_path):
    root = tmp_path / "local"
    gone = dead_pid()
    stale = root / f"op-p0-of-1-{gone}-0123456789ab"
    (stale / "db").mkdir(parents=True)
    others = {"remote-files": "dir", "checked-tables": "dir", "notes.txt": "file",
              f"op-p0-of-1-{gone}-0123456789ab.txt": "file",  # a file with such a name
              f"op-p0-of-1-{gone}-0123456789AB": "dir", "op-p0-of-1-0123456789a": "dir",
              f"user-p1-of-2-{gone}-fedcba987654": "dir+"}  # a matching name holding more
    for name, kind in others.items():
        if kind == "file":
            (root / name).write_text("mine")
        else:
            (root / name / "db").mkdir(parents=True)
            if kind == "dir+":
                (root / name / "thesis.tex").write_text("mine")
            age(str(root / name), 2 * HOUR)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "db").mkdir(parents=True)
    (root / f"op-p9-of-10-{gone}-abcdefabcdef").symlink_to(elsewhere)
    age(str(stale), 2 * HOUR)
    report = workdirs.sweep_local_dir(str(root))
    assert reasons(report) == {
        stale.name: (True, f"owner pid {gone} is gone, no LOCK file, unchanged for 2.0 h"),
        f"user-p1-of-2-{gone}-fedcba987654":
            (False, "holds thesis.tex: not a working directory")}
    assert sorted(os.listdir(root)) == sorted([*others, f"op-p9-of-10-{gone}-abcdefabcdef"])
    assert (elsewhere / "db").is_dir()


def test_the_switch_turns_the_automatic_sweep_off(tmp_path, monkeypatch):
    root = tmp_path / "local"
    stale = root / f"op-p0-of-1-{dead_pid()}-0123456789ab"
    (stale / "db").mkdir(parents=True)
    age(str(stale), 2 * HOUR)
    monkeypatch.setenv(workdirs.SWEEP_ENV, "0")
    assert not workdirs.sweep_enabled()
    with provider(tmp_path, root) as mine:
        mine.get_store(0)
        assert workdirs.wait_for_sweep(str(root), timeout=5) is None
    assert stale.is_dir()
    monkeypatch.setenv(workdirs.SWEEP_ENV, "1")
    assert workdirs.sweep_enabled()
    with provider(tmp_path, root) as mine:  # the same process, now on: it sweeps once
        mine.get_store(0)
        assert workdirs.wait_for_sweep(str(root), timeout=30) is not None
    assert not stale.exists()


def test_cli_dry_run_then_sweep(tmp_path, capsys):
    root = tmp_path / "local"
    proc, left = child("provider", str(tmp_path / "cp"), str(root))
    live, live_dir = child("provider", str(tmp_path / "cp2"), str(root))
    try:
        killed(proc, left)
        name, live_name = os.path.basename(left), os.path.basename(live_dir)
        assert cli.main(["sweep-local-dir", str(root), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 3 and out.splitlines()[-1].startswith(
            f"{root}: would remove 1 stale working directory (")
        assert f"would remove  {name}  " in out
        assert f"kept  {live_name}  (owner pid {live.pid} is running)" in out
        assert os.path.isdir(left) and os.path.isdir(live_dir)
        assert cli.main(["sweep-local-dir", str(root)]) == 0
        out = capsys.readouterr().out
        assert f"removed  {name}  " in out and f"kept  {live_name}  " in out
        assert not os.path.exists(left) and os.path.isdir(live_dir)
    finally:
        finish(live)
    assert cli.main(["sweep-local-dir", str(tmp_path / "nowhere")]) == 1
    assert "nowhere does not exist" in capsys.readouterr().err


def _total(user, rows, ctx):
    total = ctx.state("total")
    total.add(float(rows["amount"].sum()))
    return [(user, total.get())]


def test_a_spark_worker_sweeps_the_local_root_it_first_opens(spark, tmp_path):
    """What a Spark session's killed Python workers leave goes when the next worker opens
    state there; the workers' own directories (their providers stay open) stay."""
    from stateengine.spark import apply_with_state

    root = tmp_path / "local"
    proc, left = child("provider", str(tmp_path / "cp"), str(root))
    killed(proc, left)
    df = spark.createDataFrame([(u, 1.0) for u in range(8)], "user bigint, amount double")
    out = apply_with_state(df, "user", _total, "user bigint, total double",
                           states=[ReducingStateDescriptor("total", reducers.SUM,
                                                           value_type=float)],
                           checkpoint=str(tmp_path / "spark-cp"), batch_id=0, num_partitions=2,
                           local_dir=str(root))
    assert sorted(out.collect()) == [(u, 1.0) for u in range(8)]
    deadline = time.monotonic() + 30
    while os.path.exists(left) and time.monotonic() < deadline:
        time.sleep(0.1)  # the worker sweeps on a thread of its own
    assert not os.path.exists(left)
    workers = [n for n in os.listdir(root) if workdirs.WORKDIR_NAME.fullmatch(n)]
    assert workers and all(workdirs._alive(int(workdirs.WORKDIR_NAME.fullmatch(n)["pid"]))
                           for n in workers), workers
