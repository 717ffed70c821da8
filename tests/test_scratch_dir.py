"""The default scratch directory of StateStoreProviders cannot shadow the package.

A directory ``<tmp>/stateengine`` made Python started in the temp directory import it as a
namespace package in place of an editable install (which resolves after the path search);
the default is now ``<tmp>/stateengine-scratch-<uid>``, a name no import statement can reach.
"""

import os
import subprocess
import sys

from stateengine import StateStoreProvider, ValueStateDescriptor
from stateengine.store import default_local_dir


def test_default_scratch_dir_name_is_not_importable_and_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("STATEENGINE_LOCAL_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    path = default_local_dir()
    assert os.path.dirname(path) == str(tmp_path)
    assert not os.path.basename(path).isidentifier()
    assert str(os.getuid()) in os.path.basename(path)
    monkeypatch.setenv("STATEENGINE_LOCAL_DIR", str(tmp_path / "mine"))
    assert default_local_dir() == str(tmp_path / "mine")


def test_python_started_in_the_temp_dir_still_imports_the_package(tmp_path):
    """A provider leaves its scratch directory behind in the temp dir; a Python started
    there (no PYTHONPATH, as a user's shell would) must find the installed package, not a
    namespace package made of that directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STATEENGINE_LOCAL_DIR")}
    env["TMPDIR"] = str(tmp_path)
    writer = ("import sys; sys.path.insert(0, sys.argv[1]);"
              "from stateengine import StateStoreProvider, ValueStateDescriptor;"
              "p = StateStoreProvider(sys.argv[2], 'op', 0, 1,"
              " descriptors=[ValueStateDescriptor('v')]); p.get_store(0); p.close()")
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-c", writer, project, str(tmp_path / "cp")], env=env,
                   check=True, cwd=str(tmp_path / ".."))
    scratch = [n for n in os.listdir(tmp_path) if n.startswith("stateengine")]
    assert scratch and all(n.startswith("stateengine-scratch-") for n in scratch), scratch
    probe = ("import importlib.util as u; s = u.find_spec('stateengine');"
             "print(s.origin if s else None, list(s.submodule_search_locations or []) if s else [])")
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, check=True).stdout
    assert str(tmp_path) not in out, f"the scratch directory shadows the package: {out}"
    assert StateStoreProvider and ValueStateDescriptor  # the package under test imports
