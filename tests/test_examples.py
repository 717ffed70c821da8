"""The documentation builds and its code runs as written (so the docs cannot drift from the API).

The site (mkdocs.yml, docs/) is built with warnings as errors: a broken link or anchor, a page
left out of the navigation, an API reference entry mkdocstrings cannot render. Every
```python block of every page under docs/ and of README.md runs, in one namespace per page, in
order, as a reader would run them; blocks that would need a cluster or a network define
functions instead of calling them.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]

# An opening fence of exactly ```python (the info string alone), at any indentation, up to its
# closing fence at the same indentation.
_PYTHON_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                           re.S | re.M)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block, the block's indentation removed."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for m in _PYTHON_BLOCK.finditer(text):
        indent = len(m.group("indent"))
        code = "".join(line[indent:] for line in m.group("code").splitlines(keepends=True))
        blocks.append((text.count("\n", 0, m.start()) + 2, code))
    return blocks


def test_pages_have_python_blocks_and_every_fence_is_found():
    # A python fence the pattern misses would silently go untested: count them another way.
    total = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        fences = len(re.findall(r"^[ \t]*```python[ \t]*$", text, re.M))
        assert len(python_blocks(page)) == fences, page
        total += fences
    assert total >= 20  # a floor: an extractor that finds nothing must not pass


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_page_python_blocks_run(page, tmp_path, monkeypatch):
    blocks = python_blocks(page)
    monkeypatch.chdir(tmp_path)  # anything a block writes by a relative path stays here
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    rel = page.relative_to(ROOT)
    for line, code in blocks:  # one namespace: later blocks use earlier imports and names
        exec(compile("\n" * (line - 1) + code, str(rel), "exec"), namespace)


def test_site_builds_strict(tmp_path):
    """mkdocs build --strict: links and anchors resolve, every page is in the navigation, and
    every API reference entry renders (the Cython functions by inspection of the built
    extension)."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1",
                 PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                          os.environ.get("PYTHONPATH")]))))
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-6000:]}"
    assert "WARNING" not in result.stderr, result.stderr[-6000:]
    site = tmp_path / "site"
    # the benchmark chart is part of the site and the performance page shows it
    assert (site / "assets" / "bench" / "latest.png").stat().st_size > 0
    assert 'src="../assets/bench/latest.png"' in (site / "performance" / "index.html").read_text()
    # the Cython functions render with their docstrings
    config = (site / "reference" / "configuration" / "index.html").read_text()
    assert "Sets the process-wide budget shared by every backend" in config
    assert "Bytes the shared budget holds now" in config
    # the README is no page of the site: its links into docs/ are checked against the build
    broken = [link for link in _readme_links() if not _resolves(link, site)]
    assert not broken, f"README.md links that lead nowhere: {broken}"


def _readme_links() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [m for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m]


def _resolves(link: str, site: Path) -> bool:
    """A relative README link: the file exists, and a page's anchor is an id of its page."""
    path, _, anchor = link.partition("#")
    if not (ROOT / path).exists():
        return False
    if not anchor:
        return True
    rel = Path(path).relative_to("docs").with_suffix("")
    page = site / (rel.parent if rel.name == "index" else rel) / "index.html"
    return f'id="{anchor}"' in page.read_text(encoding="utf-8")


def _documented_names() -> set[str]:
    names = set()
    for page in (DOCS / "reference").glob("*.md"):
        names.update(re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M))
    return names


def _public_modules() -> tuple:
    """The modules whose ``__all__`` is the public API."""
    import stateengine
    import stateengine.spark
    import stateengine.testing

    return stateengine, stateengine.spark, stateengine.testing


def test_api_reference_covers_every_public_name():
    documented = _documented_names()
    modules = _public_modules()
    for module in modules:
        missing = [f"{module.__name__}.{n}" for n in module.__all__
                   if f"{module.__name__}.{n}" not in documented]
        assert not missing, f"add these to a page under docs/reference/: {missing}"
    by_name = {m.__name__: m for m in modules}
    unknown = [n for n in documented if n.rsplit(".", 1)[1] not in
               getattr(by_name.get(n.rsplit(".", 1)[0], modules[0]), "__all__")]
    assert not unknown, f"reference entries that are not public names: {unknown}"


def test_every_public_name_has_a_docstring():
    undocumented = []
    for module in _public_modules():
        for name in module.__all__:
            obj = getattr(module, name)
            doc = inspect.getdoc(obj) or ""
            if inspect.isclass(obj) and obj.__doc__ is None:
                doc = ""
            if not doc.strip():
                undocumented.append(f"{module.__name__}.{name}")
    assert not undocumented, undocumented


def _signature_only(doc: str, name: str) -> bool:
    """A Cython docstring that is only the signature embedsignature writes (no words)."""
    lines = [line for line in doc.strip().splitlines() if line.strip()]
    return len(lines) == 1 and re.match(rf"^[\w.]*\b{re.escape(name)}\b *[(:]", lines[0]) is not None


def test_every_public_member_has_a_docstring():
    """The methods, properties and attributes the API reference lists for each public class
    (inherited ones included, the Cython base classes' too) say what they do."""
    import enum

    undocumented = []
    for module in _public_modules():
        for name in module.__all__:
            cls = getattr(module, name)
            if not inspect.isclass(cls) or issubclass(cls, (BaseException, enum.Enum)):
                continue
            for member in dir(cls):
                if member.startswith("_"):
                    continue
                owner = next((c for c in cls.__mro__ if member in c.__dict__), object)
                if owner is object:
                    continue
                raw = owner.__dict__[member]
                if not (callable(raw) or isinstance(raw, (property, classmethod, staticmethod))
                        or type(raw).__name__ == "getset_descriptor"):
                    continue  # plain class attributes (constants, dataclass defaults)
                doc = getattr(raw, "__doc__", None) or ""
                if not doc.strip() or _signature_only(doc, member):
                    undocumented.append(f"{module.__name__}.{name}.{member} "
                                        f"(defined in {owner.__module__}.{owner.__qualname__})")
    assert not undocumented, "\n".join(undocumented)


def test_native_counter_example_agrees_with_its_plain_python_reference():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "native_counter.py"), "--events", "4000",
         "--users", "50"], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every user's state agrees" in result.stdout
    assert "operator 1 KeyGroupRange{start=64, end=127}" in result.stdout
