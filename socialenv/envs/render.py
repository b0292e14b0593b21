"""Frames of a PolicySim env for ``render_mode="rgb_array"`` (matplotlib Agg, no display).

A frame shows the population's stance histogram and the last round's key metrics; it is what
``gymnasium.wrappers.RecordVideo`` and SB3's ``VecVideoRecorder`` record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Width and height of a frame in pixels.
FRAME_SIZE = (640, 480)
#: (metric key, label, format) drawn beside the histogram when the round reported it.
FRAME_METRICS: tuple[tuple[str, str, str], ...] = (
    ("stance_mean", "stance mean", "{:+.3f}"),
    ("stance_std", "stance std", "{:.3f}"),
    ("toxicity", "toxicity", "{:.4f}"),
    ("cross_interaction_ratio", "cross-stance ratio", "{:.3f}"),
    ("misinformation_ratio", "misinformed", "{:.1%}"),
    ("exposure_removed", "exposure removed", "{:.1%}"),
)


def render_frame(
    stance: np.ndarray,
    round_index: int,
    metrics: dict[str, float] | None,
    reward: float | None,
    title: str = "",
) -> np.ndarray:
    """An RGB frame (480, 640, 3) uint8.

    Args:
        stance: (N,) smoothed stances in [-1, 1].
        round_index: the round the frame shows (0 before the first step).
        metrics: the round's platform metrics (``info["metrics"]``), None before the first step.
        reward: the step's reward, None before the first step.
        title: drawn above the histogram (e.g. the env id).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = FRAME_SIZE
    fig = Figure(figsize=(width / 100, height / 100), dpi=100)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes((0.08, 0.12, 0.55, 0.76))
    ax.hist(
        np.asarray(stance, np.float64),
        bins=np.linspace(-1.0, 1.0, 21),
        color="#4c72b0",
        edgecolor="white",
    )
    ax.set_xlim(-1.0, 1.0)
    ax.set_xlabel("stance S")
    ax.set_ylabel("users")
    when = "start of round" if metrics is None else "after round"
    ax.set_title(f"{title} {when} {round_index}".strip(), fontsize=11)
    lines = [f"users: {len(stance)}"]
    if reward is not None:
        lines.append(f"reward: {reward:.4f}")
    if metrics is None:
        lines.append("no step yet")
    else:
        lines += [
            f"{label}: {fmt.format(metrics[key])}"
            for key, label, fmt in FRAME_METRICS
            if key in metrics
        ]
    fig.text(0.67, 0.85, "\n".join(lines), va="top", family="monospace", fontsize=10)
    canvas.draw()
    frame = np.asarray(canvas.buffer_rgba())[:, :, :3].copy()
    return frame


def render_env(env: Any) -> np.ndarray:
    """The frame of a PolicySim env (unwrapped) at its current round."""
    result = env._last_result
    title = env.spec.id if env.spec is not None else type(env).__name__
    if result is None:
        return render_frame(env.sim.users.stance, env.sim.round, None, None, title)
    return render_frame(env.sim.users.stance, result.round, result.metrics, env._last_reward, title)
