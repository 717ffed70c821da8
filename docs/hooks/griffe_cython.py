"""Griffe extension: the API reference of stateengine's Cython functions and classes.

Griffe reads the compiled extension ``stateengine._native`` by importing and inspecting it. Its
functions carry the signature Cython embeds (``embedsignature=True``) as the first line of the
docstring, which griffe has already turned into the signature it shows: this extension drops
that line so the signature does not appear twice, and drops the ``method descriptor`` /
``builtin`` labels inspection puts on C functions (to a reader they are plain functions and
methods).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_C_LABELS = {"method descriptor", "builtin", "classmethod descriptor", "getset descriptor"}


def _strip_embedded_signature(obj: griffe.Object) -> None:
    if obj.docstring is None:
        return
    text = obj.docstring.value
    first, _, rest = text.partition("\n")
    name = re.escape(obj.name)
    if re.match(rf"^[\w.]*\b{name}\(.*\)( -> .+)?$", first.strip()) or \
            re.match(rf"^[\w.]*\b{name}: \S.*$", first.strip()):
        obj.docstring.value = rest.strip("\n")


class CythonDocstrings(griffe.Extension):
    """Cleans what inspection reports for objects of compiled modules."""

    def on_function_instance(self, *, func: griffe.Function, agent: Any, **kwargs: Any) -> None:
        if isinstance(agent, griffe.Inspector):
            _strip_embedded_signature(func)
            func.labels -= _C_LABELS

    def on_attribute_instance(self, *, attr: griffe.Attribute, agent: Any,
                              **kwargs: Any) -> None:
        if isinstance(agent, griffe.Inspector):
            _strip_embedded_signature(attr)
            attr.labels -= _C_LABELS
