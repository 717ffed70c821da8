"""The README's code and the demo job run as written (so the docs cannot drift from the API)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:  # one namespace: later blocks use earlier imports, like a reader would
        exec(compile(block, "README.md", "exec"), namespace)


def test_native_counter_example_agrees_with_its_plain_python_reference():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "native_counter.py"), "--events", "4000",
         "--users", "50"], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every user's state agrees" in result.stdout
    assert "operator 1 KeyGroupRange{start=64, end=127}" in result.stdout
