"""MkDocs hook: the benchmark charts in bench/results/ become part of the site.

Pages link the charts where they lie in the repository (``../bench/results/latest.png`` from
docs/performance.md), so the same Markdown shows them on GitHub. MkDocs only serves files under
docs/, so this hook adds every ``bench/results/*.png`` to the site as ``assets/bench/<name>``
and points such links there; no copy of a chart is kept in docs/.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

RESULTS = "bench/results"
SITE_DIR = "assets/bench"


def _results_dir(config) -> Path:
    return Path(config["docs_dir"]).resolve().parent / RESULTS


def on_files(files: Files, config) -> Files:
    for chart in sorted(_results_dir(config).glob("*.png")):
        files.append(File.generated(config, f"{SITE_DIR}/{chart.name}",
                                    abs_src_path=str(chart)))
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    page_dir = posixpath.dirname(page.file.src_uri)
    up = "../" * (page_dir.count("/") + 1 if page_dir else 0)
    # from docs/<page_dir>/, the repository root is one level above docs/
    repo_prefix = up + "../"
    site_prefix = posixpath.relpath(SITE_DIR, page_dir or ".") + "/"
    pattern = re.compile(r"\]\(" + re.escape(repo_prefix + RESULTS + "/") + r"([\w.-]+\.png)\)")
    return pattern.sub(lambda m: f"]({site_prefix}{m.group(1)})", markdown)
