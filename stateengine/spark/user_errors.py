"""Exceptions from user code, told apart from stateengine's own.

An exception raised inside a user function (``apply_with_state``/``map_with_state``
functions, ``on_timer``, StatefulProcessor methods) is re-raised as ``UserFunctionError``
whose first line names the function, the original exception and where it ran::

    user function mymod.fn raised KeyError: 'b' (operator 'agg', key 'b', batch 0, partition 1)

The lines after it are the function's own traceback as text: Spark prints the worker's
exception without its ``__cause__``, so a chained original would be lost on the driver.
The runners catch per call of the user function (or per item of a generator it returns),
never per row, so a batch that raises nothing pays only for a ``try`` block.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Iterable, Iterator

from ..errors import OutputSchemaError, UserFunctionError

NO_KEY = object()
_MAX_TRACEBACK_CHARS = 8_000  # the tail is kept: the frames nearest the error
_MAX_FIELD_CHARS = 200


def function_name(fn: Any) -> str:
    """``module.qualname`` of a function or bound method (its repr if it has none)."""
    qualname = getattr(fn, "__qualname__", None)
    if qualname is None:  # a callable object: name its class
        qualname = getattr(type(fn), "__qualname__", repr(fn))
        module = type(fn).__module__
    else:
        module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


def _type_name(exc: BaseException) -> str:
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _short(text: str) -> str:
    return text if len(text) <= _MAX_FIELD_CHARS else text[:_MAX_FIELD_CHARS - 3] + "..."


class CallSite:
    """Where a task runs user code (operator, batch, partition), to name in its errors."""

    __slots__ = ("operator", "batch_id", "partition")

    def __init__(self, operator: str | None, batch_id: int | None,
                 partition: int | None) -> None:
        self.operator = operator
        self.batch_id = batch_id
        self.partition = partition

    def where(self, key: Any = NO_KEY) -> str:
        """``operator 'agg', key 'b', batch 0, partition 1``."""
        parts = []
        if self.operator is not None:
            parts.append(f"operator {self.operator!r}")
        if key is not NO_KEY:
            parts.append(f"key {_short(repr(key))}")
        if self.batch_id is not None:
            parts.append(f"batch {self.batch_id}")
        if self.partition is not None:
            parts.append(f"partition {self.partition}")
        else:
            parts.append("on the driver")
        return ", ".join(parts)

    def output_error(self, fn: Any, exc: OutputSchemaError,
                     key: Any = NO_KEY) -> OutputSchemaError:
        """exc (a result of fn that does not fit the output schema) naming fn and where."""
        return OutputSchemaError(f"the result of user function {function_name(fn)} does not "
                                 f"fit the output schema ({self.where(key)}): {exc}")

    def error(self, fn: Any, exc: Exception, key: Any = NO_KEY) -> Exception:
        """The exception to raise for exc, caught where fn was called (the first frame of
        its traceback, which is left out). A UserFunctionError passes through unchanged."""
        if isinstance(exc, UserFunctionError):
            return exc
        text = str(exc)
        first = _short(text.splitlines()[0]) if text.strip() else ""
        name = function_name(fn)
        head = (f"user function {name} raised {_type_name(exc)}"
                f"{': ' + first if first else ''} ({self.where(key)})")
        tb = exc.__traceback__
        lines = traceback.format_exception(type(exc), exc, tb.tb_next if tb else None)
        if lines and lines[0].startswith("Traceback"):
            lines[0] = "The function's traceback (most recent call last):\n"
        body = "".join(lines).rstrip("\n")
        if len(body) > _MAX_TRACEBACK_CHARS:
            body = "...\n" + body[-_MAX_TRACEBACK_CHARS:]
        return UserFunctionError(
            f"{head}\n{body}", function=name, operator=self.operator,
            key=None if key is NO_KEY else key, batch_id=self.batch_id,
            partition=self.partition)

    def call(self, fn: Callable[..., Any], key: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs); its exception re-raised as a UserFunctionError."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise self.error(fn, e, key) from e

    def results(self, fn: Callable[..., Any], *args: Any, key: Any = NO_KEY) -> Any:
        """fn(*args) as ``call``; a lazy result (a generator) comes back wrapped by
        ``iterate``, so user code that runs while it is consumed is guarded too. (``key`` is
        a keyword with this module's default: the runners' closures are pickled by value, so
        a sentinel they referenced would arrive as a copy.)"""
        result = self.call(fn, key, *args)
        return self.iterate(fn, key, result) if lazy_result(result) else result

    def iterate(self, fn: Any, key: Any, items: Iterable[Any]) -> Iterator[Any]:
        """The items of what fn returned (a generator runs fn's code on each ``next``), its
        exceptions re-raised as UserFunctionError."""
        it = iter(items)
        while True:
            try:
                item = next(it)
            except StopIteration:
                return
            except Exception as e:
                raise self.error(fn, e, key) from e
            yield item


def lazy_result(result: Any) -> bool:
    """True if running over result runs user code (a generator or another iterator), as
    opposed to a frame or a list that is already computed."""
    return result is not None and hasattr(result, "__next__")
