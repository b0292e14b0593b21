"""Validation helpers: every error names the offending field and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any


def check_int(owner: Any, name: str, minimum: int | None = None) -> None:
    """Require ``owner.<name>`` to be an integer (not a bool) that is >= ``minimum``."""
    value = getattr(owner, name)
    if (
        isinstance(value, bool)
        or not isinstance(value, Integral)
        or (minimum is not None and value < minimum)
    ):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an integer{bound}; got {value!r}")
    setattr(owner, name, int(value))


def check_float(
    owner: Any,
    name: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    exclusive_minimum: bool = False,
) -> None:
    """Require ``owner.<name>`` to be a finite real number within the given bounds."""
    value = getattr(owner, name)
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and minimum is not None:
        ok = value > minimum if exclusive_minimum else value >= minimum
    if ok and maximum is not None:
        ok = value <= maximum
    if not ok:
        low = (
            "" if minimum is None else (f" > {minimum}" if exclusive_minimum else f" >= {minimum}")
        )
        high = "" if maximum is None else f" <= {maximum}"
        joiner = " and" if low and high else ""
        raise ValueError(f"{name} must be a finite number{low}{joiner}{high}; got {value!r}")
    setattr(owner, name, float(value))


def check_bool(owner: Any, name: str) -> None:
    value = getattr(owner, name)
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")


def check_choice(owner: Any, name: str, choices: Iterable[str]) -> None:
    value = getattr(owner, name)
    allowed = tuple(choices)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def check_hidden_sizes(owner: Any, name: str) -> None:
    """Require a non-empty tuple of positive layer widths (a list is converted to a tuple)."""
    value = getattr(owner, name)
    if isinstance(value, list):
        value = tuple(value)
    if (
        not isinstance(value, tuple)
        or not value
        or any(isinstance(w, bool) or not isinstance(w, Integral) or w < 1 for w in value)
    ):
        raise ValueError(
            f"{name} must be a non-empty tuple of positive integers (hidden layer widths); "
            f"got {value!r}"
        )
    setattr(owner, name, tuple(int(w) for w in value))
