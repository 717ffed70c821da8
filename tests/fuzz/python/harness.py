"""What every atheris harness shares: the project on sys.path, instrumentation of the
Python modules under test, and the rule that decoders raise only stateengine's errors."""

from __future__ import annotations

import os
import sys
from typing import Callable

PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, PROJECT)

import atheris  # noqa: E402


def instrumented():
    """Context manager: modules imported inside get atheris' coverage instrumentation."""
    return atheris.instrument_imports(include=["stateengine"])


def main(test_one_input: Callable[[bytes], None]) -> None:
    """libFuzzer's command line (corpus directories, -max_total_time=, -runs=, ...)."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


class OracleFailure(AssertionError):
    """A decoder broke a promise the harness checks (a finding, like a crash)."""


def check(cond: bool, what: str) -> None:
    if not cond:
        raise OracleFailure(what)
