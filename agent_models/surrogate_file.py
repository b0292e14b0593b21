"""Fitted surrogate files (``policysim fit --out fitted.json``) as a :class:`SurrogateConfig`.

The file is JSON: ``{"format": "policysim-surrogate-fit", "version": 1, "parameters":
{name: {"value": v, "se": s | null, "status": ...}}, "provenance": {...}}``. Every
parameter must be a field of :class:`SurrogateConfig` with a finite number as its value;
missing fields keep their defaults. A bad file gets a ``ValueError`` naming the file and
the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from agent_models.surrogate import SurrogateConfig

FIT_FORMAT = "policysim-surrogate-fit"
FIT_VERSION = 1

#: SurrogateConfig fields limited to [0, 1] and to >= 0 (mirrors SurrogateConfig.__post_init__).
UNIT_FIELDS = (
    "post_rate",
    "follow_prob",
    "unfollow_prob",
    "assimilation_rate",
    "backfire_rate",
    "anchor_rate",
    "reinforcement_rate",
    "news_decay",
    "misinfo_adoption",
    "misinfo_post_share",
    "misinfo_recovery",
    "exposure_assimilation",
    "toxic_threshold",
    "civility_threshold",
    "confidence_bound",
    "backfire_gap",
)
NONNEGATIVE_FIELDS = (
    "post_noise",
    "stance_noise",
    "misinfo_steepness",
    "reply_toxicity_base",
    "reply_toxicity_gap",
    "post_toxicity_scale",
    "interest_weight",
)


def clip_to_limits(values: dict[str, float]) -> dict[str, float]:
    """``values`` with each field clipped into SurrogateConfig's allowed range (an estimate
    may fall a rounding error outside it)."""
    out = {}
    for name, value in values.items():
        value = float(value)
        if name in UNIT_FIELDS:
            value = min(max(value, 0.0), 1.0)
        elif name in NONNEGATIVE_FIELDS:
            value = max(value, 0.0)
        out[name] = value
    return out


def load_surrogate_file(path: str | Path) -> SurrogateConfig:
    """The SurrogateConfig a fitted file holds; ``ValueError`` naming file and field otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"surrogate={str(path)!r} is not allowed: no such file (a fitted JSON from "
            "`policysim fit`, a dict of SurrogateConfig fields or None)"
        )
    try:
        data: Any = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON file: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON object is required")
    if data.get("format") != FIT_FORMAT:
        raise ValueError(
            f"{path}: field 'format'={data.get('format')!r} is not allowed: {FIT_FORMAT!r}"
        )
    if data.get("version") != FIT_VERSION:
        raise ValueError(
            f"{path}: field 'version'={data.get('version')!r} is not allowed: {FIT_VERSION}"
        )
    params = data.get("parameters")
    if not isinstance(params, dict):
        raise ValueError(f"{path}: field 'parameters' must be an object of SurrogateConfig fields")
    allowed = {f.name for f in fields(SurrogateConfig)}
    values: dict[str, float] = {}
    for name, entry in params.items():
        if name not in allowed:
            raise ValueError(
                f"{path}: field 'parameters.{name}' is not allowed: a SurrogateConfig field "
                f"({sorted(allowed)})"
            )
        value = entry.get("value") if isinstance(entry, dict) else None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(
                f"{path}: field 'parameters.{name}.value'={value!r} is not allowed: a finite number"
            )
        values[name] = float(value)
    try:
        return SurrogateConfig(**values)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err
