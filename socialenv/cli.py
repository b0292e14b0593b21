"""The ``policysim`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="PolicySim: learn a social platform's intervention policy against simulated users.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """PolicySim command line: `policysim run`, `policysim train`, `policysim eval`, `policysim sweep`."""

SUMMARY_ROWS = (
    ("reward", "mean arm reward"),
    ("stance_mean", "stance mean"),
    ("stance_std", "stance std"),
    ("toxicity", "toxicity"),
    ("cross_interaction_ratio", "cross-stance interactions"),
    ("cross_interaction_ratio_recommended", "cross-stance (recommended posts)"),
    ("misinformation_ratio", "misinformation ratio"),
    ("exposure_removed", "exposure removed"),
    ("engagement", "engagement / active user"),
    ("echo_chamber_index", "echo-chamber index"),
)


def _parse_json(value: str | None, option: str) -> dict:
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise typer.BadParameter(f"{option} must be a JSON object: {err}") from err
    if not isinstance(parsed, dict):
        raise typer.BadParameter(f"{option} must be a JSON object, got {type(parsed).__name__}")
    return parsed


def print_summary(summary: dict, title: str) -> None:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column(f"mean ± 95% CI ({summary['seeds']} seed(s))", justify="right")
    for key, label in SUMMARY_ROWS:
        if key in summary:
            value = summary[key]
            table.add_row(label, f"{value['mean']:.4f} ± {value['ci95']:.4f}")
    console.print(table)


@app.command()
def run(
    env: Annotated[str, typer.Option(help="Env id: PolicySim-Rec-v0 or PolicySim-Exposure-v0.")] = "PolicySim-Rec-v0",
    policy: Annotated[str, typer.Option(help="origin (no intervention) or a bandit: eenet, neural_ucb, linucb, lints, egreedy, egreedy_neural, random.")] = "random",
    users: Annotated[int, typer.Option(help="Number of simulated users.")] = 1000,
    rounds: Annotated[int, typer.Option(help="Rounds per episode.")] = 10,
    budget: Annotated[int | None, typer.Option(help="Arms picked per round (default: the env's).")] = None,
    seed: Annotated[list[int], typer.Option(help="Seed(s); repeat the option for several.")] = [0],  # noqa: B006
    episodes: Annotated[int, typer.Option(help="Episodes per seed (the policy keeps learning).")] = 1,
    scenario: Annotated[str | None, typer.Option(help="abortion, misinformation, or a saved scenario .npz (default: the env's).")] = None,
    users_model: Annotated[str, typer.Option("--brain", help="surrogate or llm.")] = "surrogate",
    llm: Annotated[str | None, typer.Option(help='LLM config as JSON, e.g. \'{"backend": "hf", "model": "/path"}\'.')] = None,
    env_kwargs: Annotated[str | None, typer.Option(help="Extra env keyword arguments as JSON.")] = None,
    policy_kwargs: Annotated[str | None, typer.Option(help="Policy hyper-parameters as JSON.")] = None,
    out: Annotated[Path, typer.Option(help="Folder for run folders.")] = Path("runs"),
    name: Annotated[str | None, typer.Option(help="Run folder name (default: env-policy-time).")] = None,
    wandb: Annotated[str | None, typer.Option(help="Log to Weights & Biases: online, offline or disabled.")] = None,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "policysim",
    plots: Annotated[bool, typer.Option(help="Write PNG plots.")] = True,
) -> None:
    """Run a policy on a PolicySim env; print a metrics table and write a run folder."""
    from socialenv.runner import RunConfig
    from socialenv.runner import run as run_policy

    kwargs = {"num_users": users, "rounds": rounds, "users": users_model,
              **_parse_json(env_kwargs, "--env-kwargs")}
    if budget is not None:
        kwargs["budget"] = budget
    if scenario is not None:
        kwargs["scenario"] = scenario
    if llm is not None:
        kwargs["llm"] = _parse_json(llm, "--llm")
    config = RunConfig(
        env_id=env, policy=policy, seeds=tuple(seed), episodes=episodes, env_kwargs=kwargs,
        policy_kwargs=_parse_json(policy_kwargs, "--policy-kwargs"), out_dir=str(out),
        run_name=name, wandb=wandb, wandb_project=wandb_project, plots=plots,
    )
    try:
        result = run_policy(config)
    except ValueError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(code=2) from err
    print_summary(result.summary, f"{policy} on {env}: {users} users, {rounds} rounds")
    if result.out_dir is not None:
        console.print(f"run folder: {result.out_dir}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
