"""Validation of the policies' hyper-parameters, in the package's one error template
(:func:`policysim_infra.validation.config_error`: ``name=value is not allowed: what is``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any

from policysim_infra.validation import check


def check_int(owner: Any, name: str, minimum: int | None = None) -> None:
    """Require ``owner.<name>`` to be an integer (not a bool) that is >= ``minimum``."""
    value = getattr(owner, name)
    bound = f" >= {minimum}" if minimum is not None else ""
    check(
        not isinstance(value, bool)
        and isinstance(value, Integral)
        and (minimum is None or value >= minimum),
        name,
        f"an integer{bound}",
        value,
    )
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
    low = "" if minimum is None else (f" > {minimum}" if exclusive_minimum else f" >= {minimum}")
    high = "" if maximum is None else f" <= {maximum}"
    joiner = " and" if low and high else ""
    check(ok, name, f"a finite number{low}{joiner}{high}", value)
    setattr(owner, name, float(value))


def check_bool(owner: Any, name: str) -> None:
    value = getattr(owner, name)
    check(isinstance(value, bool), name, "True or False", value)


def check_choice(owner: Any, name: str, choices: Iterable[str]) -> None:
    value = getattr(owner, name)
    allowed = tuple(choices)
    check(value in allowed, name, f"one of {', '.join(map(repr, allowed))}", value)


def check_hidden_sizes(owner: Any, name: str) -> None:
    """Require a non-empty tuple of positive layer widths (a list is converted to a tuple)."""
    value = getattr(owner, name)
    if isinstance(value, list):
        value = tuple(value)
    check(
        isinstance(value, tuple)
        and bool(value)
        and all(not isinstance(w, bool) and isinstance(w, Integral) and w >= 1 for w in value),
        name,
        "a non-empty tuple of positive integers (hidden layer widths)",
        value,
    )
    setattr(owner, name, tuple(int(w) for w in value))
