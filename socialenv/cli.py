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
    policy: Annotated[str, typer.Option(help="origin (no intervention) or a bandit: eenet, eenet_gnn, neural_ucb, linucb, lints, egreedy, egreedy_neural, random.")] = "random",
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
    log_propensities: Annotated[bool, typer.Option(help="Log every round's arms and slate propensities (logged_rounds.npz) for off-policy evaluation.")] = True,
    record: Annotated[Path | None, typer.Option(help="Also write the episodes as a Minari dataset in this folder (read with MINARI_DATASETS_PATH=folder).")] = None,
    record_id: Annotated[str | None, typer.Option(help="Minari dataset id (default: policysim-<env>/<policy>-v0).")] = None,
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
        log_propensities=log_propensities, record=str(record) if record is not None else None,
        record_id=record_id,
    )
    try:
        result = run_policy(config)
    except ValueError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(code=2) from err
    print_summary(result.summary, f"{policy} on {env}: {users} users, {rounds} rounds")
    if result.out_dir is not None:
        console.print(f"run folder: {result.out_dir}")
    if record is not None:
        from socialenv.offline import default_dataset_id

        console.print(f"Minari dataset {record_id or default_dataset_id(env, policy)} in {record}")


@app.command()
def sweep(
    grid: Annotated[Path | None, typer.Option(help="Grid file in the W&B sweep format (see examples/sweep.yaml).")] = None,
    policy: Annotated[list[str] | None, typer.Option(help="Policy (repeat for several); overrides the grid file's.")] = None,
    seed: Annotated[list[int] | None, typer.Option(help="Seed (repeat for several); overrides the grid file's.")] = None,
    env: Annotated[str | None, typer.Option(help="Env id (default: the grid file's, else PolicySim-Rec-v0).")] = None,
    users: Annotated[int | None, typer.Option(help="Number of simulated users (num_users).")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds per episode.")] = None,
    episodes: Annotated[int | None, typer.Option(help="Episodes per trial.")] = None,
    env_kwargs: Annotated[str | None, typer.Option(help="Extra fixed env keyword arguments as JSON.")] = None,
    vary: Annotated[str | None, typer.Option(help='Env arguments to vary as JSON, e.g. \'{"budget": [5, 10]}\'.')] = None,
    backend: Annotated[str, typer.Option(help="ray (parallel) or local (one process, no Ray).")] = "ray",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (e.g. auto, ray://head:10001); default: start a local one.")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs of the local Ray cluster (default: all).")] = None,
    cpus_per_trial: Annotated[float, typer.Option(help="CPUs Ray reserves per trial.")] = 1.0,
    ship_code: Annotated[bool, typer.Option(help="Upload the PolicySim packages to the cluster (runtime_env py_modules).")] = False,
    wandb: Annotated[str | None, typer.Option(help="W&B per trial: online, offline or disabled.")] = None,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "policysim",
    out: Annotated[Path, typer.Option(help="Parent folder of the sweep folder.")] = Path("runs/sweeps"),
    name: Annotated[str | None, typer.Option(help="Sweep name (folder, W&B group).")] = None,
) -> None:
    """Run policies × seeds × env configs on Ray (or locally); print a table, write JSON."""
    from socialenv.sweep import SweepConfig, load_grid, print_table, run_sweep

    try:
        config = load_grid(grid) if grid is not None else SweepConfig(name=name or "sweep")
        overrides = {**_parse_json(env_kwargs, "--env-kwargs")}
        if users is not None:
            overrides["num_users"] = users
        if rounds is not None:
            overrides["rounds"] = rounds
        grid_values = _parse_json(vary, "--vary")
        config = SweepConfig(
            name=name or config.name, env_id=env or config.env_id,
            policies=tuple(policy) if policy else config.policies,
            seeds=tuple(seed) if seed else config.seeds,
            episodes=episodes if episodes is not None else config.episodes,
            env_kwargs={**{k: v for k, v in config.env_kwargs.items() if k not in grid_values}, **overrides},
            grid={**{k: v for k, v in config.grid.items() if k not in overrides}, **grid_values},
            policy_kwargs={k: v for k, v in config.policy_kwargs.items() if k in (policy or config.policies)},
            wandb=wandb, wandb_project=wandb_project, out_dir=str(out),
        )
        total = len(config.trials())
        console.print(f"sweep {config.name}: {total} trials ({len(config.policies)} policies × "
                      f"{len(config.configs())} configs × {len(config.seeds)} seeds) on {backend}")

        def progress(result: dict, done: int, total: int) -> None:
            status = "[red]failed[/red]" if "error" in result else f"{result['seconds']:.1f} s"
            console.print(f"  [{done}/{total}] {result['trial']['name']}: {status}")

        result = run_sweep(config, backend=backend, address=address, num_cpus=num_cpus,
                           cpus_per_trial=cpus_per_trial, ship_code=ship_code, progress=progress)
    except (ValueError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(code=2) from err
    startup = f", Ray start {result.startup_seconds:.1f} s" if result.backend == "ray" else ""
    print_table(result, title=f"{config.name} on {config.env_id}: mean ± 95% CI over seeds "
                              f"({result.backend}, {result.seconds:.1f} s{startup})")
    if result.out_dir is not None:
        console.print(f"sweep folder: {result.out_dir} (sweep.json, rounds.csv)")
    if result.failures:
        raise typer.Exit(code=1)


# sub-commands; their modules import only typer at the top, heavy libraries inside commands
from agent_models.evaluation.cli import eval_app  # noqa: E402
from agent_models.training.cli import train_app  # noqa: E402
from socialenv.loaders.cli import data_app  # noqa: E402

app.add_typer(train_app, name="train", help="Train user agents: SFT, then DPO (trl + peft).")
app.add_typer(eval_app, name="eval", help="Micro-level evaluation of user agents (Table 2).")
app.add_typer(data_app, name="data", help="Turn TwiBot-20 / Weibo files into a scenario and SFT data.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
