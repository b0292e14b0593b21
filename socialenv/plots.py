"""PNG plots of a run folder (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

OBJECTIVE_METRICS = (
    ("reward", "mean arm reward"),
    ("cross_interaction_ratio", "cross-stance interaction ratio"),
    ("toxicity", "toxicity"),
    ("misinformation_ratio", "misinformation ratio"),
    ("echo_chamber_index", "echo-chamber index"),
    ("exposure_removed", "exposure removed"),
)


def _by_round(rows: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds, mean and std over seeds of ``key`` in the last episode."""
    last = max(r["episode"] for r in rows)
    rounds = sorted({r["round"] for r in rows if r["episode"] == last})
    values = [[r[key] for r in rows if r["episode"] == last and r["round"] == t] for t in rounds]
    return np.asarray(rounds), np.array([np.mean(v) for v in values]), np.array([np.std(v) for v in values])


def plot_run(rows: list[dict[str, Any]], out_dir: Path, title: str = "") -> list[Path]:
    """Write ``stance.png`` (stance mean ± std over rounds) and ``objectives.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    rounds, mean, _ = _by_round(rows, "stance_mean")
    _, std, _ = _by_round(rows, "stance_std")
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(rounds, mean, marker="o", label="stance mean")
    ax.fill_between(rounds, mean - std, mean + std, alpha=0.25, label="± stance std")
    ax.set_xlabel("round")
    ax.set_ylabel("smoothed stance S")
    ax.set_ylim(-1.05, 1.05)
    ax.set_title(f"Stance over rounds {title}".strip())
    ax.legend()
    fig.tight_layout()
    path = Path(out_dir) / "stance.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    present = [(k, label) for k, label in OBJECTIVE_METRICS
               if k in rows[0] and any(r[k] != 0 for r in rows)]
    fig, axes = plt.subplots(2, (len(present) + 1) // 2, figsize=(4 * ((len(present) + 1) // 2), 6))
    for ax, (key, label) in zip(np.ravel(axes), present, strict=False):
        rounds, mean, std = _by_round(rows, key)
        ax.plot(rounds, mean, marker="o")
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.25)
        ax.set_title(label)
        ax.set_xlabel("round")
    for ax in np.ravel(axes)[len(present):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(out_dir) / "objectives.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written
