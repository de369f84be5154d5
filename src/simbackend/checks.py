"""Scalar arguments checked one way everywhere: integers, reals, flags and choices.

Every public entry point, config dataclass and engine option block checks its
scalar arguments with these functions, so that the same mistake gets the same
one-line message wherever it is made:

- a value of the wrong Python type (a float or ``True`` for an integer, a string
  for a number) raises :class:`~simbackend.errors.ScalarTypeError` (both an
  ``ArgumentTypeError`` and an ``InvalidArgumentError``);
- a value out of range (or a real that is NaN or infinite) raises
  :class:`~simbackend.errors.InvalidArgumentError`;
- the message is ``"<argument>: expected <what>, got <value>"``, ``<what>`` naming the
  accepted range (``an integer >= 1``, ``a finite number in (0, 1]``, ...).

``bool`` is never an integer or a number here, and ``numpy`` integer and float
scalars are accepted like Python's. Each function returns the value converted to
a Python ``int``, ``float``, ``bool`` or ``str``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simbackend.errors import InvalidArgumentError, ScalarTypeError

__all__ = ["boolean", "choice", "integer", "real", "short_repr"]


def short_repr(x: Any, limit: int = 60) -> str:
    """``repr(x)`` cut to ``limit`` characters (a message stays one readable line)."""
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _got(value: Any) -> str:
    return f"{type(value).__name__} {short_repr(value)}"


def _interval(minimum: float | None, maximum: float | None, above: bool, fmt: Callable[[Any], str]) -> str:
    if minimum is not None and maximum is not None:
        return f"in {'(' if above else '['}{fmt(minimum)}, {fmt(maximum)}]"
    if minimum is not None:
        return f"{'>' if above else '>='} {fmt(minimum)}"
    if maximum is not None:
        return f"<= {fmt(maximum)}"
    return ""


def integer(
    value: Any, argument: str, *, minimum: int | None = None, maximum: int | None = None, allow_none: bool = False
) -> Any:
    """An integer in ``[minimum, maximum]`` (either bound optional); ``None`` passes when ``allow_none``."""
    if value is None and allow_none:
        return None
    bound = _interval(minimum, maximum, False, str)
    what = f"an integer{' ' + bound if bound else ''}{' or None' if allow_none else ''}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ScalarTypeError(f"{argument}: expected {what}, got {_got(value)}")
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise InvalidArgumentError(f"{argument}: expected {what}, got {v}")
    return v


def real(
    value: Any,
    argument: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: bool = False,
    allow_none: bool = False,
) -> Any:
    """A finite real number ``>= minimum`` (``> minimum`` when ``above``) and ``<= maximum``
    (either bound optional); ``None`` passes when ``allow_none``."""
    if value is None and allow_none:
        return None
    bound = _interval(minimum, maximum, above, lambda x: f"{x:g}")
    what = f"a finite number{' ' + bound if bound else ''}{' or None' if allow_none else ''}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ScalarTypeError(f"{argument}: expected {what}, got {_got(value)}")
    v = float(value)
    low_ok = minimum is None or (v > minimum if above else v >= minimum)
    if not (math.isfinite(v) and low_ok and (maximum is None or v <= maximum)):
        raise InvalidArgumentError(f"{argument}: expected {what}, got {short_repr(value)}")
    return v


def boolean(value: Any, argument: str) -> bool:
    """``True`` or ``False`` (numbers and strings refused: ``"false"`` is truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ScalarTypeError(f"{argument}: expected True or False, got {_got(value)}")
    return bool(value)


def choice(value: Any, argument: str, choices: Sequence[str], *, case_sensitive: bool = True) -> str:
    """One of the strings ``choices`` (compared case-insensitively unless ``case_sensitive``);
    returns the matching entry of ``choices``."""
    if not isinstance(value, str):
        raise ScalarTypeError(f"{argument}: expected one of {list(choices)}, got {_got(value)}")
    for c in choices:
        if value == c or (not case_sensitive and value.lower() == c.lower()):
            return c
    raise InvalidArgumentError(f"{argument}: expected one of {list(choices)}, got {short_repr(value)}")
