"""PNG plots of a run folder (matplotlib, headless).

Every plot marks the news rounds (dotted verticals), draws the Origin (no intervention)
reference when one is given (dashed, same seeds), and labels each band: the population's
stance std, or the spread of a metric across seeds (only drawn with several seeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

OBJECTIVE_METRICS = (
    ("reward", "step reward"),
    ("cross_interaction_ratio", "cross-stance interaction ratio"),
    ("toxicity", "toxicity"),
    ("misinformation_ratio", "misinformation ratio"),
    ("echo_chamber_index", "echo-chamber index"),
    ("exposure_removed", "exposure removed"),
)


def _by_round(
    rows: list[dict[str, Any]], key: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Rounds, mean and std over seeds of ``key`` in the last episode, and the seed count."""
    last = max(r["episode"] for r in rows)
    episode = [r for r in rows if r["episode"] == last and key in r]
    rounds = sorted({r["round"] for r in episode})
    values = [[r[key] for r in episode if r["round"] == t] for t in rounds]
    seeds = len({r["seed"] for r in episode})
    return (
        np.asarray(rounds),
        np.array([np.mean(v) for v in values]),
        np.array([np.std(v) for v in values]),
        seeds,
    )


def _decorate(ax: Any, news_rounds: Sequence[int], rounds: np.ndarray) -> None:
    shown = [t for t in news_rounds if len(rounds) and rounds.min() <= t <= rounds.max()]
    for i, t in enumerate(shown):
        ax.axvline(t, color="grey", linestyle=":", linewidth=1, label="news" if i == 0 else None)


def plot_run(
    rows: list[dict[str, Any]],
    out_dir: Path,
    title: str = "",
    *,
    news_rounds: Sequence[int] = (),
    origin_rows: list[dict[str, Any]] | None = None,
) -> list[Path]:
    """Write ``stance.png`` (stance over rounds) and ``objectives.png`` (each objective over
    rounds). ``news_rounds``: rounds with a news event; ``origin_rows``: rows of the Origin
    policy on the same seeds (the no-intervention reference)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    rounds, mean, across, seeds = _by_round(rows, "stance_mean")
    _, population_std, _, _ = _by_round(rows, "stance_std")
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(
        rounds,
        mean,
        marker="o",
        label="stance mean" + (f" (mean of {seeds} seeds)" if seeds > 1 else ""),
    )
    ax.fill_between(
        rounds,
        mean - population_std,
        mean + population_std,
        alpha=0.15,
        label="± stance std within the population",
    )
    if seeds > 1:
        ax.fill_between(
            rounds,
            mean - across,
            mean + across,
            alpha=0.35,
            label=f"± std of the stance mean across {seeds} seeds",
        )
    if origin_rows:
        o_rounds, o_mean, _, _ = _by_round(origin_rows, "stance_mean")
        ax.plot(o_rounds, o_mean, linestyle="--", color="black", label="Origin (no intervention)")
    _decorate(ax, news_rounds, rounds)
    ax.set_xlabel("round")
    ax.set_ylabel("smoothed stance S")
    ax.set_ylim(-1.05, 1.05)
    ax.set_title(f"Stance over rounds {title}".strip())
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(out_dir) / "stance.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    present = [
        (k, label)
        for k, label in OBJECTIVE_METRICS
        if k in rows[0] and any(r[k] != 0 for r in rows)
    ]
    fig, axes = plt.subplots(2, (len(present) + 1) // 2, figsize=(4 * ((len(present) + 1) // 2), 6))
    for ax, (key, label) in zip(np.ravel(axes), present, strict=False):
        rounds, mean, across, seeds = _by_round(rows, key)
        ax.plot(rounds, mean, marker="o", label="this policy")
        if seeds > 1:
            ax.fill_between(
                rounds,
                mean - across,
                mean + across,
                alpha=0.25,
                label=f"± std across {seeds} seeds",
            )
        if origin_rows and key in origin_rows[0]:
            o_rounds, o_mean, _, _ = _by_round(origin_rows, key)
            ax.plot(o_rounds, o_mean, linestyle="--", color="black", label="Origin")
        _decorate(ax, news_rounds, rounds)
        ax.set_title(label)
        ax.set_xlabel("round")
    handles: dict[str, Any] = {}
    for ax in np.ravel(axes)[: len(present)]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, handle)
    for ax in np.ravel(axes)[len(present) :]:
        ax.axis("off")
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="lower center",
            ncol=len(handles),
            fontsize="small",
        )
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(out_dir) / "objectives.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written
