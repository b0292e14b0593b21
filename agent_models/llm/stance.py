"""The stance labeller (Eq. 1) and its check against known stances.

Labels are **scored**, not decoded greedily, where the backend can score (hf computes the
log-likelihood of each label as the completion; an OpenAI-compatible server returns the
first answer token's ``top_logprobs``): each prompt lists the labels in an order drawn from
the round's generator (a label listed first is not favoured everywhere), and with
``stance_calibration="contextual"`` the scores are divided by those the model gives a
content-free input ("N/A", same label order), the contextual calibration of Zhao et al.
(2021), so the model's prior over the label words drops out. A backend that cannot score
falls back to decoding a JSON answer under the stance schema.

At reset the brain labels the history posts of (a sample of) the users and compares the
labels with the scenario's seed stances (:func:`labeller_check`): the agreement and the
confusion matrix go to every round's ``info["brain"]``; below
``LLMConfig.stance_min_agreement`` the brain warns once, or refuses with ``strict=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    Backend,
    Generation,
    LLMBackendError,
    Sampling,
    ScoringUnsupported,
    fold_system,
)
from agent_models.llm.prompts import STANCE_LABELS, Messages, stance_messages
from agent_models.llm.schema import parse_stance, stance_schema

#: Content-free input of the contextual calibration (Zhao et al., 2021).
CONTENT_FREE: tuple[str, ...] = ("N/A",)


@dataclass
class StanceLabels:
    """The labels of one labelling call.

    Attributes:
        value: (n,) −1/0/+1, or None where the answer could not be used.
        probs: (n, 3) label probabilities in :data:`STANCE_LABELS` order (after calibration;
            NaN rows where decoded).
        method: ``"scored"`` or ``"decoded"``.
    """

    value: list[int | None]
    probs: np.ndarray
    method: str


def label_orders(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 3) a random permutation of the label indices per prompt."""
    return np.argsort(rng.random((n, len(STANCE_LABELS))), axis=1)


def stance_prompts(
    topic: str,
    names: Sequence[str],
    texts: Sequence[Sequence[str]],
    orders: np.ndarray,
    text_chars: int,
    scored: bool,
) -> list[Messages]:
    return [
        stance_messages(
            topic, name, list(t), text_chars, order=[STANCE_LABELS[j] for j in order], scored=scored
        )
        for name, t, order in zip(names, texts, orders, strict=True)
    ]


def _normalise(logp: np.ndarray) -> np.ndarray:
    """Rows of log-scores → probabilities (a row of -inf only stays NaN)."""
    top = np.max(logp, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        p = np.exp(logp - top)
        return p / p.sum(axis=1, keepdims=True)


def score_stances(
    backend: Backend,
    topic: str,
    names: Sequence[str],
    texts: Sequence[Sequence[str]],
    rng: np.random.Generator,
    *,
    text_chars: int,
    calibrate: bool,
    fold: bool = False,
) -> StanceLabels:
    """Score the three labels for each user (one backend scoring call, content-free
    calibration prompts included; ``fold``: system message folded into the user message);
    raises :class:`ScoringUnsupported` where the backend cannot."""
    n = len(names)
    orders = label_orders(rng, n)
    prompts = stance_prompts(topic, names, texts, orders, text_chars, scored=True)
    cal_keys: list[tuple[int, ...]] = []
    if calibrate:
        cal_keys = sorted({tuple(o) for o in orders.tolist()})
        prompts += stance_prompts(
            topic,
            ["user"] * len(cal_keys),
            [CONTENT_FREE] * len(cal_keys),
            np.array(cal_keys, np.int64).reshape(-1, 3),
            text_chars,
            scored=True,
        )
    if fold:
        prompts = [fold_system(m) for m in prompts]
    score = getattr(backend, "score_labels", None)  # duck-typed backends may lack it
    if score is None:
        raise ScoringUnsupported(f"{type(backend).__name__} cannot score labels")
    logp = np.asarray(score(prompts, list(STANCE_LABELS)), np.float64)
    if logp.shape != (len(prompts), len(STANCE_LABELS)):
        raise LLMBackendError(
            f"score_labels returned shape {logp.shape} for "
            f"{len(prompts)} prompts and {len(STANCE_LABELS)} labels"
        )
    user_logp = logp[:n]
    if calibrate:
        # p(label | x) / p(label | content-free), in log space, per label order
        cal = _normalise(logp[n:])
        row = {k: i for i, k in enumerate(cal_keys)}
        index = np.array([row[tuple(o)] for o in orders.tolist()], np.int64)
        with np.errstate(divide="ignore"):
            user_logp = np.log(_normalise(user_logp)) - np.log(np.maximum(cal[index], 1e-12))
    probs = _normalise(user_logp)
    value: list[int | None] = [
        None if not np.isfinite(p).all() else int(np.argmax(p)) - 1 for p in probs
    ]
    return StanceLabels(value, probs.astype(np.float32), "scored")


def decode_stances(
    generate: Callable[[list[Messages], Any, Sampling], Generation],
    topic: str,
    names: Sequence[str],
    texts: Sequence[Sequence[str]],
    rng: np.random.Generator,
    *,
    text_chars: int,
    sampling: Sampling,
) -> StanceLabels:
    """The fallback: decode a JSON answer under the stance schema (label order randomised
    in the prompt); ``generate(prompts, schema, sampling)`` is the brain's backend call."""
    orders = label_orders(rng, len(names))
    prompts = stance_prompts(topic, names, texts, orders, text_chars, scored=False)
    gen = generate(prompts, stance_schema(), sampling)
    value = [
        None if f == "error" else parse_stance(t)
        for t, f in zip(gen.texts, gen.finish_reasons, strict=True)
    ]
    return StanceLabels(value, np.full((len(names), 3), np.nan, np.float32), "decoded")


__all__ = [
    "CONTENT_FREE",
    "ScoringUnsupported",
    "StanceLabels",
    "confusion_matrix",
    "decode_stances",
    "label_orders",
    "labeller_check",
    "score_stances",
    "stance_prompts",
]


def labeller_check(labelled: Sequence[int | None], truth: Sequence[int]) -> dict[str, float]:
    """Agreement of the labels with the known stances, flat for ``info["brain"]``:
    ``stance_check_users``, ``stance_check_agreement`` (unusable answers count as wrong),
    ``stance_check_majority`` (the share of the most common true label: what a labeller that
    always answers it would reach), ``stance_check_unusable`` and the confusion matrix
    ``stance_check_<true>_as_<labelled>`` (counts)."""
    out: dict[str, float] = {"stance_check_users": float(len(truth))}
    if not len(truth):
        return out
    t = np.asarray(truth, np.int64)
    ok = np.array([v is not None for v in labelled])
    lab = np.array([v if v is not None else 9 for v in labelled], np.int64)
    out["stance_check_agreement"] = float(np.mean(lab == t))
    out["stance_check_majority"] = float(np.bincount(t + 1, minlength=3).max() / len(t))
    out["stance_check_unusable"] = float((~ok).sum())
    for ti, tn in enumerate(STANCE_LABELS):
        for li, ln in enumerate(STANCE_LABELS):
            out[f"stance_check_{tn}_as_{ln}"] = float(np.sum((t == ti - 1) & (lab == li - 1)))
    return out


def confusion_matrix(check: dict[str, Any]) -> np.ndarray:
    """(3, 3) counts, rows = known stance, columns = label (against, neutral, favor)."""
    return np.array(
        [
            [check.get(f"stance_check_{t}_as_{label}", 0.0) for label in STANCE_LABELS]
            for t in STANCE_LABELS
        ]
    )
