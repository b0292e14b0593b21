"""The one checker of the package's config dataclasses (env, recommender, reward, context,
surrogate, population, run and sweep configs all call :func:`check_fields`).

Each field is checked against its type annotation, then against the limits declared with it
(``num_users: Annotated[int, Limit(ge=10, le=1_000_000)] = 1000``; :func:`field_limits` lists
them, for docs and error messages):

- ``int``: an integer (Python or NumPy); a bool or a float is refused.
- ``float``: a finite real number (Python or NumPy int/float); a bool, NaN or inf is refused.
- ``bool``: True or False (or a NumPy bool). ``str``: a string.
- ``X | None``: None or an X. ``tuple[X, ...]``, ``list[X]``, ``Sequence[X]``: a sequence of
  X (not a string). ``dict[K, V]``: a dict of K to V. Other types (classes, ``Any``) are
  left to the config's own checks.

NumPy values are converted to Python values in place. Every error is a ValueError with one
template, naming the field (with its config prefix) and what is allowed::

    num_users=True is not allowed: an integer (not a bool) in [10, 1000000]

Code outside the config dataclasses (policy hyper-parameters, keyword arguments, command
line options) raises through the same template with :func:`config_error`, :func:`check` and
:func:`check_keys`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np


def config_error(name: str, value: Any, allowed: str) -> ValueError:
    """The package's error for a bad config value (one template everywhere)."""
    text = repr(value)
    if len(text) > 200:
        text = text[:200] + "..."
    return ValueError(f"{name}={text} is not allowed: {allowed}")


def check(condition: bool, name: str, allowed: str, value: Any) -> None:
    """Raise :func:`config_error` unless ``condition``."""
    if not condition:
        raise config_error(name, value, allowed)


class UnknownKeywordError(ValueError, TypeError):
    """Unknown keyword arguments. A ``ValueError`` in the package's template that is also the
    ``TypeError`` Python raises for a function call, worded as Python words it ("unexpected
    keyword argument 'x'"): wrappers that retry without an argument the env does not take
    (TorchRL's ``GymEnv`` drops ``frameskip`` that way) recognise it."""


def did_you_mean(name: Any, choices: Iterable[Any]) -> str:
    """``"; did you mean 'x'?"`` when ``choices`` holds names close to ``name`` (difflib),
    else ``""``: appended to the error for a misspelt name of any kind."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def check_keys(
    given: Iterable[str], allowed: Iterable[str], name: str, what: str, keyword: bool = False
) -> None:
    """Refuse keys of ``given`` outside ``allowed`` (keyword arguments, dict keys), in the
    one template, e.g. ``hyperparameters=['alhpa'] is not allowed: unknown hyper-parameter(s)
    of policy 'linucb'; allowed: alpha, fit_intercept; did you mean 'alpha'?``. With
    ``keyword=True`` (the keys are a call's keyword arguments) the error is an
    :class:`UnknownKeywordError`, also a ``TypeError`` that names the unexpected keyword."""
    allowed = list(allowed)
    unknown = sorted(set(given) - set(allowed))
    if not unknown:
        return
    hints = "".join(
        did_you_mean(key, allowed).replace("did you mean", f"{key!r}: did you mean")
        if len(unknown) > 1
        else did_you_mean(key, allowed)
        for key in unknown
    )
    error = config_error(
        name, unknown, f"unknown {what}; allowed: {', '.join(allowed) or '(none)'}{hints}"
    )
    if keyword:
        raise UnknownKeywordError(
            f"{error} (got an unexpected keyword argument {', '.join(repr(k) for k in unknown)})"
        )
    raise error


@dataclass(frozen=True)
class Limit:
    """Documented bounds of a numeric field (inclusive ``ge``/``le``, exclusive ``gt``/``lt``)
    or of a sequence's length (``max_len``)."""

    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    lt: float | None = None
    max_len: int | None = None

    def describe(self) -> str:
        low = (
            f"[{_num(self.ge)}"
            if self.ge is not None
            else (f"({_num(self.gt)}" if self.gt is not None else "(-inf")
        )
        high = (
            f"{_num(self.le)}]"
            if self.le is not None
            else (f"{_num(self.lt)})" if self.lt is not None else "inf)")
        )
        return f"in {low}, {high}"

    def holds(self, value: float) -> bool:
        return not (
            (self.ge is not None and value < self.ge)
            or (self.le is not None and value > self.le)
            or (self.gt is not None and value <= self.gt)
            or (self.lt is not None and value >= self.lt)
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


class _Skip(Exception):
    """The annotation is not one this checker handles."""


def _coerce(value: Any, annotation: Any, name: str, limit: Limit | None) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    bounds = f" {limit.describe()}" if limit is not None and limit.max_len is None else ""
    if annotation is Any or isinstance(annotation, typing.TypeVar):
        raise _Skip
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        if len(options) == 1:
            return _coerce(value, options[0], name, limit)
        raise _Skip
    if annotation is bool:
        check(isinstance(value, bool | np.bool_), name, "true or false", value)
        return bool(value)
    if annotation is int:
        check(
            not isinstance(value, bool | np.bool_), name, f"an integer (not a bool){bounds}", value
        )
        check(isinstance(value, int | np.integer), name, f"an integer{bounds}", value)
        value = int(value)
    elif annotation is float:
        check(not isinstance(value, bool | np.bool_), name, f"a number (not a bool){bounds}", value)
        check(
            isinstance(value, int | float | np.integer | np.floating),
            name,
            f"a number{bounds}",
            value,
        )
        value = float(value)
        check(math.isfinite(value), name, f"a finite number{bounds}", value)
    elif annotation is str:
        check(isinstance(value, str), name, "a string", value)
        return value
    elif origin in (tuple, list, Sequence) or annotation in (tuple, list):
        check(
            isinstance(value, list | tuple | np.ndarray) and not isinstance(value, str),
            name,
            f"a list of {_plural_name(args[0]) if args else 'values'}",
            value,
        )
        if limit is not None and limit.max_len is not None:
            check(len(value) <= limit.max_len, name, f"at most {limit.max_len} values", value)
        item_limit = limit if limit is not None and limit.max_len is None else None
        if origin is tuple and args and args[-1] is not Ellipsis:
            check(len(value) == len(args), name, f"{len(args)} values", value)
            items = [
                _coerce_or_keep(v, a, f"{name}[{i}]", item_limit)
                for i, (v, a) in enumerate(zip(value, args, strict=True))
            ]
        else:
            item = args[0] if args else Any
            items = [
                _coerce_or_keep(v, item, f"{name}[{i}]", item_limit) for i, v in enumerate(value)
            ]
        return list(items) if origin is list else tuple(items)
    elif origin in (dict, Mapping) or annotation is dict:
        check(isinstance(value, dict), name, "a dict", value)
        key_type, value_type = args if args else (Any, Any)
        return {
            _coerce_or_keep(k, key_type, f"{name} key", None): _coerce_or_keep(
                v, value_type, f"{name}[{k!r}]", None
            )
            for k, v in value.items()
        }
    else:
        raise _Skip
    if limit is not None and limit.max_len is None:
        check(limit.holds(value), name, f"{_type_name(annotation)} {limit.describe()}", value)
    return value


def _coerce_or_keep(value: Any, annotation: Any, name: str, limit: Limit | None) -> Any:
    try:
        return _coerce(value, annotation, name, limit)
    except _Skip:
        return value


def _plural_name(annotation: Any) -> str:
    return {int: "integers", float: "numbers", bool: "bools", str: "strings"}.get(
        annotation, "values"
    )


def _type_name(annotation: Any) -> str:
    return {int: "an integer", float: "a number", bool: "a bool", str: "a string"}.get(
        annotation, "a value"
    )


@cache
def _hints(cls: type) -> dict[str, tuple[Any, Limit | None]]:
    """Each field's type and its :class:`Limit` (from ``Annotated[type, Limit(...)]``)."""
    out: dict[str, tuple[Any, Limit | None]] = {}
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        limit = None
        if typing.get_origin(hint) is typing.Annotated:
            limit = next((m for m in hint.__metadata__ if isinstance(m, Limit)), None)
            hint = typing.get_args(hint)[0]
        out[name] = (hint, limit)
    return out


def field_limits(cls: type) -> dict[str, Limit]:
    """The limits a config class declares on its fields (``Annotated[int, Limit(ge=10)]``):
    field name -> :class:`Limit`."""
    return {name: limit for name, (_, limit) in _hints(cls).items() if limit is not None}


def check_fields(obj: Any, prefix: str = "") -> None:
    """Check every field of dataclass ``obj`` (see the module docstring); converts NumPy and
    int-for-float values in place (works on frozen dataclasses). ``prefix`` (e.g.
    ``"recommender."``) goes in front of field names in errors. A field's limits are
    declared with its type, ``num_users: Annotated[int, Limit(ge=10, le=1_000_000)]``
    (:func:`field_limits` lists a class's)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        annotation, limit = hints.get(f.name, (Any, None))
        new = _coerce_or_keep(value, annotation, prefix + f.name, limit)
        if new is not value:
            object.__setattr__(obj, f.name, new)


#: A name usable as one folder: letters, digits, ``.``, ``_``, ``-``, ``=``, ``+``; no ``/``.
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._=+-]{0,199}")


def check_path_segment(value: Any, name: str) -> str:
    """``value`` if it is a single safe path segment (a run or sweep name), else a ValueError:
    no separators, no ``..``, not absolute, at most 200 characters."""
    check(
        isinstance(value, str)
        and _SEGMENT.fullmatch(value) is not None
        and value not in (".", ".."),
        name,
        "one folder name: letters, digits, '.', '_', '-', '=', '+' (no '/', no '..', "
        "not starting with '.' or '-'), at most 200 characters",
        value,
    )
    return value


def strict_scalar(value: Any, annotation: Any, name: str) -> Any:
    """For pydantic ``mode="before"`` validators: refuse a bool, a string or a fractional
    float where ``annotation`` is an integer or number, and turn NumPy numbers into Python
    ones, so pydantic models follow the same rules as :func:`check_fields`."""
    options = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    numeric = [a for a in options if a in (int, float)]
    if not numeric or value is None or bool in options:
        return value
    wanted = "an integer" if numeric == [int] else "a number"
    if isinstance(value, bool | np.bool_ | str | bytes):
        raise ValueError(
            f"{name}={value!r} is not allowed: {wanted} (not a {type(value).__name__})"
        )
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        value = float(value)
    if numeric == [int] and isinstance(value, float):
        raise ValueError(f"{name}={value!r} is not allowed: an integer")
    return value
