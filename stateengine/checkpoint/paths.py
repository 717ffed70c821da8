"""Confinement: every path a checkpoint names stays inside its root.

Paths in manifests and handles are relative to the checkpoint root, '/'-separated, and made of
plain names: no absolute paths, no ``..`` or ``.``, no empty components, no backslashes, NUL
or other control characters. They are checked when a document is decoded and again when
storage resolves them, before any file is opened, copied, linked or deleted; on local storage
symlinks that lead out of the root are refused too.
"""

from __future__ import annotations

import os
import re

from ..errors import CorruptionError

# control characters, found in one C-level scan (names are checked on every storage call)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafePath(ValueError):
    """A path or file name that could leave its directory (the message says why)."""


def check_name(name: str, what: str = "file name") -> str:
    """A single plain name: no separators, not '.' or '..', no control characters."""
    if not isinstance(name, str) or not name:
        raise UnsafePath(f"{what} {name!r} is empty or not a string")
    if name in (".", "..") or "/" in name or "\\" in name:
        raise UnsafePath(f"{what} {name!r} is not a plain name")
    if _CONTROL.search(name):
        raise UnsafePath(f"{what} {name!r} holds control characters")
    return name


def check_relative(rel: str, what: str = "path") -> str:
    """A relative path of plain names joined by '/'."""
    if not isinstance(rel, str) or not rel:
        raise UnsafePath(f"{what} {rel!r} is empty or not a string")
    if rel.startswith("/"):
        raise UnsafePath(f"{what} {rel!r} is absolute; checkpoint paths are relative to the root")
    for part in rel.split("/"):
        check_name(part, f"{what} {rel!r} has a component that")
    return rel


def confine(rel: str, source: str) -> str:
    """check_relative, as a CorruptionError naming source."""
    try:
        return check_relative(rel)
    except UnsafePath as e:
        raise CorruptionError(f"{source}: {e}; refusing a path that could leave the checkpoint "
                              f"directory") from None


def check_inside(real_root: str, root: str, rel: str, source: str) -> None:
    """On local storage: root/rel must resolve, symlinks followed, to a place inside real_root
    (the root's own realpath). Only the components below the root are looked at (one lstat
    each); a symlink among them is resolved fully. A path that does not exist yet is checked
    through the part that does, so a symlinked parent is caught too."""
    path = root
    for part in rel.split("/"):
        path = f"{path}/{part}"
        if os.path.islink(path):
            break
    else:
        return
    real = os.path.realpath(f"{root}/{rel}")
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise CorruptionError(f"{source}: {root}/{rel} resolves to {real}, outside the "
                              f"checkpoint directory {real_root} (a symlink leaves the root); "
                              f"refusing it")
