"""``policysim fit TRACE --out fitted.json``: fit, validate, write (typer only at import)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def fit(
    trace: Annotated[
        Path, typer.Argument(help="A trace folder (policysim run --trace, env.unwrapped.trace).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="The fitted surrogate JSON to write (load it with --surrogate / surrogate=)."
        ),
    ] = Path("fitted.json"),
    seed: Annotated[
        int, typer.Option(help="Seed of the held-out splits and of the validation runs.")
    ] = 0,
    scenario: Annotated[
        str | None, typer.Option(help="Refuse a trace of another scenario.")
    ] = None,
    start: Annotated[
        Path | None,
        typer.Option(
            help="A fitted JSON whose values start the fit (default: the surrogate's defaults)."
        ),
    ] = None,
    validate: Annotated[
        bool,
        typer.Option(
            help="Held-out validation (user and round splits) and the macro-metric replay."
        ),
    ] = True,
    sim_seeds: Annotated[
        int,
        typer.Option(help="Seeds of the macro-metric replay of the fitted and default surrogates."),
    ] = 3,
    png: Annotated[
        Path | None,
        typer.Option(help="The macro-metric PNG (default: next to --out, <out>.macro.png)."),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="No progress bar (there is none when output is not a terminal either).",
        ),
    ] = False,
) -> None:
    """Fit the surrogate's parameters to a behaviour trace by maximum likelihood; write them
    with standard errors, the trace's provenance and the held-out validation."""
    from rich.console import Console
    from rich.table import Table

    from agent_models.surrogate_file import load_surrogate_file
    from policysim_infra.progress import progress_bar
    from policysim_infra.redaction import redact_text
    from socialenv.fitting.likelihood import fit_trace
    from socialenv.fitting.trace import load_trace

    console = Console()
    # Stages: the fit, then (with --validate) the held-out splits and the macro-metric replay.
    bar = progress_bar(total=3 if validate else 1, desc="fit", unit="stage", quiet=quiet)
    try:
        loaded = load_trace(trace, scenario=scenario)
        start_config = load_surrogate_file(start) if start is not None else None
        result = fit_trace(loaded, start=start_config, seed=seed)
        bar.update()
        payload_extra = {}
        if validate:
            from socialenv.fitting.held_out import held_out, macro_comparison

            bar.set_description("held-out validation")
            payload_extra["held_out"] = held_out(loaded, seed=seed, start=start_config)
            bar.update()
            bar.set_description("macro-metric replay")
            image = png if png is not None else out.with_suffix(".macro.png")
            payload_extra["macro"] = macro_comparison(
                loaded, result.config(), sim_seeds=sim_seeds, png=image
            )
            bar.update()
    except (ValueError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {redact_text(str(err))}")
        raise typer.Exit(code=2) from err
    finally:
        bar.close()
    result.blocks["validation"] = payload_extra
    result.write(out)
    table = Table(title=f"surrogate fitted to {trace} ({result.cpu_seconds:.1f} s CPU)")
    for col in ("parameter", "value", "SE", "status"):
        table.add_column(col)
    for name, est in result.estimates.items():
        table.add_row(
            name, f"{est.value:.4f}", "" if est.se is None else f"{est.se:.4f}", est.status
        )
    console.print(table)
    for finding in result.findings:
        console.print(f"[yellow]not expressible / note:[/yellow] {finding}")
    for split in ("users", "rounds"):
        entry = payload_extra.get("held_out", {}).get(split)
        if entry:
            console.print(
                f"held-out {split}: log-lik per action fitted {entry['fitted']['ll_per_action']:.4f}, "
                f"default {entry['default']['ll_per_action']:.4f}, null {entry['null']['ll_per_action']:.4f}; "
                f"action-mix JSD fitted {entry['fitted']['action_mix_jsd_bits']:.4f} bits, "
                f"default {entry['default']['action_mix_jsd_bits']:.4f}"
            )
    macro = payload_extra.get("macro")
    if macro:
        for metric, entry in macro["metrics"].items():
            f, d = entry["fitted"], entry["default"]
            console.print(
                f"{metric}: MAE vs trace fitted {f['mae']:.4f} ± {f['mae_ci95'] or 0:.4f}, "
                f"default {d['mae']:.4f} ± {d['mae_ci95'] or 0:.4f}"
            )
        console.print(f"macro metrics plot: {macro.get('png')}")
    console.print(f"fitted surrogate: {out}")
