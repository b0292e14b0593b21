"""A sweep's results: the per-(policy, config) table, the files it writes, the printed table."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from policysim.summary import format_mean_ci
from policysim.sweep.config import SweepConfig
from policysim_infra.redaction import to_json, to_json_data

#: Metrics in the printed table (all metrics are in the JSON).
TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("reward", "reward"),
    ("cross_interaction_ratio", "cross"),
    ("toxicity", "toxicity"),
    ("stance_mean", "stance"),
    ("stance_std", "stance std"),
    ("misinformation_ratio", "misinfo"),
    ("bias", "bias"),
    ("diversity", "diversity"),
)


@dataclass
class SweepResult:
    """What a sweep returns.

    Attributes:
        table: one dict per (policy, config): ``policy``, ``config``, ``config_index``,
            ``seeds``, ``seconds`` (mean trial time) and, per metric, ``{"mean", "ci95"}``.
        trials: per trial: its definition, ``rows`` (every round), ``summary``, ``seconds``,
            ``host``; failed trials carry ``error`` instead.
        failures: the failed trials' names and errors.
        backend, seconds: how and how long (wall clock) the sweep ran.
        startup_seconds: part of ``seconds`` spent starting / connecting to Ray.
        out_dir: the sweep folder (None if nothing was written).
    """

    table: list[dict[str, Any]]
    trials: list[dict[str, Any]]
    failures: list[dict[str, str]]
    backend: str
    seconds: float
    out_dir: Path | None = None
    startup_seconds: float = 0.0


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (policy, config): mean ± 95% CI over seeds of each metric (see ``summarize``)."""
    from policysim.summary import summarize

    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in results:
        if "error" not in r:
            groups.setdefault((r["trial"]["policy"], r["trial"]["config_index"]), []).append(r)
    table = []
    for (policy, ci), members in groups.items():
        rows = [row for m in members for row in m["rows"]]
        keys = [k for k in rows[0] if k not in ("seed", "episode", "round")]
        summary = summarize(rows, keys)
        entry = {
            "policy": policy,
            "config_index": ci,
            "config": members[0]["trial"]["config"],
            "seeds": summary["seeds"],
            "seconds": sum(m["seconds"] for m in members) / len(members),
        }
        entry.update({k: v for k, v in summary.items() if isinstance(v, dict) and "mean" in v})
        table.append(entry)
    table.sort(key=lambda e: (e["config_index"], e["policy"]))
    return table


def write_sweep(result: SweepResult, config: SweepConfig, out_dir: Path) -> None:
    """``sweep.json`` (config, table, trials, failures) and ``rounds.csv`` in ``out_dir``."""
    payload = {
        "config": to_json_data(asdict(config)),
        "backend": result.backend,
        "seconds": result.seconds,
        "startup_seconds": result.startup_seconds,
        "table": result.table,
        "failures": result.failures,
        "trials": [{k: v for k, v in r.items() if k != "rows"} for r in result.trials],
    }
    (out_dir / "sweep.json").write_text(to_json(payload, indent=2))
    rows = [
        {
            "trial": r["trial"]["name"],
            "policy": r["trial"]["policy"],
            "config_index": r["trial"]["config_index"],
            **row,
        }
        for r in result.trials
        if "error" not in r
        for row in r["rows"]
    ]
    if rows:
        fieldnames = list(rows[0]) + sorted({k for row in rows for k in row} - set(rows[0]))
        with (out_dir / "rounds.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)


def config_label(config: dict[str, Any]) -> str:
    """Short text for a grid config (``budget=5, users=lorenz``)."""
    if not config:
        return "-"
    return ", ".join(
        f"{k}={v if not isinstance(v, dict) else json.dumps(v, separators=(',', ':'))}"
        for k, v in config.items()
    )


def print_table(result: SweepResult, console: Any = None, title: str | None = None) -> None:
    """Print the sweep table (rich): one row per (policy, config), mean ± CI over seeds."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        probe = Console()
        console = probe if probe.is_terminal else Console(width=200)
    table = Table(title=title or f"sweep ({result.backend}, {result.seconds:.1f} s)")
    table.add_column("policy")
    table.add_column("config")
    table.add_column("seeds", justify="right")
    metrics = [(k, label) for k, label in TABLE_METRICS if any(k in e for e in result.table)]
    for _, label in metrics:
        table.add_column(label, justify="right")
    for entry in result.table:
        cells = [entry["policy"], config_label(entry["config"]), str(entry["seeds"])]
        for key, _ in metrics:
            v = entry.get(key)
            cells.append(format_mean_ci(v, 3) if v else "")
        table.add_row(*cells)
    console.print(table)
    from policysim.summary import FLOW_METRICS

    means = [label for key, label in metrics if key in FLOW_METRICS]
    lasts = [label for key, label in metrics if key not in FLOW_METRICS]
    console.print(
        f"mean over the rounds of the last episode: {', '.join(means) or '-'}; "
        f"last round's value: {', '.join(lasts) or '-'}; ± is the 95% CI over seeds "
        "(n/a with one seed)"
    )
    for failure in result.failures:
        console.print(f"[red]failed[/red] {failure['trial']}: {failure['error']}")
