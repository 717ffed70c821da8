"""Regenerates tests/legacy_fixtures/data: checkpoints written by stateengine before the native
container codec (snapshot format 1, pickling ANY codec), which today's code must still restore.

    python tests/legacy_fixtures/make_fixtures.py

builds commit 3e49f5c (the last commit of format 1) in a temporary git worktree, runs this
script inside it (``--child``) to write the ``mixed`` content of contents.py as a full
snapshot, an incremental checkpoint and a StateStore checkpoint with two versions (the second
reusing SST files of the first), and the ``primitive`` content as a full snapshot and a
one-version StateStore checkpoint (about 320 KB in all, mostly RocksDB OPTIONS files), and
replaces data/ with the result. ``data/fixture.json`` records the absolute root
the files were written under (old handles and manifests hold absolute roots; the test copies
data/ and rewrites that prefix).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

COMMIT = "3e49f5c"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def child(out: str) -> None:
    sys.path.insert(0, HERE)
    import contents
    from stateengine import KeyedStateBackend, StateStoreProvider

    for kind in contents.KINDS:
        base = os.path.join(out, kind)
        scratch = tempfile.mkdtemp()
        backend = KeyedStateBackend(os.path.join(scratch, "b"), key_type=str)
        contents.write(backend, kind)
        handles = {"full": backend.snapshot(os.path.join(base, "full"), "snapshot").result()}
        if kind == "mixed":
            handles["incremental"] = backend.checkpoint(1, os.path.join(base, "incremental")).result()
        for name, handle in handles.items():
            with open(os.path.join(base, name, "handle.json"), "w") as f:
                json.dump(handle.to_dict(), f, indent=1)
        backend.dispose()
        half = len(contents.KEYS) // 2
        batches = [contents.KEYS[:half], contents.KEYS[half:]] if kind == "mixed" else [None]
        with StateStoreProvider(os.path.join(base, "store"), "op", 0, 1, key_type=str,
                                descriptors=contents.descriptors(kind),
                                local_dir=scratch) as provider:
            for version, keys in enumerate(batches):
                store = provider.get_store(version)
                contents.write(store.backend, kind, keys)
                store.commit()
        shutil.rmtree(scratch, ignore_errors=True)
    with open(os.path.join(out, "fixture.json"), "w") as f:
        json.dump({"commit": COMMIT, "root": out, "format": 1}, f, indent=1)


def main() -> None:
    python = sys.executable
    tmp = tempfile.mkdtemp(prefix="stateengine-legacy-")
    tree = os.path.join(tmp, "src")
    out = os.path.join(tmp, "data")
    try:
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", tree, COMMIT], check=True)
        subprocess.run([python, "setup.py", "build_ext", "--inplace", "-j", "2"], cwd=tree,
                       check=True, stdout=subprocess.DEVNULL)
        env = dict(os.environ, PYTHONPATH=tree)
        subprocess.run([python, os.path.abspath(__file__), "--child", out], cwd=tmp, env=env,
                       check=True)
        dest = os.path.join(HERE, "data")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(out, dest)
        print(f"wrote {dest}")
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
