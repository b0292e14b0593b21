"""The ``policysim`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agent_models.redaction import redact_text
from agent_models.validation import config_error

app = typer.Typer(
    help="PolicySim: learn a social platform's intervention policy against simulated users.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """PolicySim command line: `policysim run`, `policysim play`, `policysim train`, `policysim eval`, `policysim sweep`, `policysim fit`."""

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
    ("misinformation_impression_share", "misinformation impressions"),
    ("wrongful_removals", "wrongful removals / round"),
)


def _parse_json(value: str | None, option: str) -> dict:
    """The JSON object an option holds; a typer.BadParameter in the package's one template
    (:func:`agent_models.validation.config_error`) otherwise."""
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise typer.BadParameter(str(config_error(option, value, f"a JSON object ({err})"))) from err
    if not isinstance(parsed, dict):
        raise typer.BadParameter(str(config_error(option, value, f"a JSON object, not a {type(parsed).__name__}")))
    return parsed


def _population_options(num_users: int | None, users: str | None, brain: str | None
                        ) -> tuple[int | None, str | None]:
    """(num_users, users) from ``--num-users``, ``--users`` and the deprecated spellings:
    ``--brain X`` (now ``--users X``) and ``--users N`` with a number (now ``--num-users N``)."""
    if users is not None and users.isdigit():
        console.print(f"[yellow]warning:[/yellow] --users {users} as a number of users is deprecated: "
                      f"use --num-users {users} (--users now names the population, as the env's users=)")
        num_users, users = int(users), "surrogate"
    if brain is not None:
        console.print("[yellow]warning:[/yellow] --brain is deprecated: use --users (the env's users= keyword)")
        users = brain
    return num_users, users


def print_summary(summary: dict, title: str) -> None:
    """The metrics table: each row says whether it is a mean over rounds or the last
    round's value; the CI column reads n/a with one seed."""
    from socialenv.summary import FLOW_METRICS, format_mean_ci

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("over", justify="left")
    table.add_column(f"mean ± 95% CI ({summary['seeds']} seed(s))", justify="right")
    for key, label in SUMMARY_ROWS:
        if key in summary:
            over = "round mean" if key in FLOW_METRICS else "last round"
            table.add_row(label, over, format_mean_ci(summary[key]))
    console.print(table)
    if summary["seeds"] < 2:
        console.print("CI n/a: one seed gives no interval (repeat --seed for several).")


@app.command()
def run(
    env: Annotated[str, typer.Option(help="Env id: PolicySim-Rec-v0 or PolicySim-Exposure-v0.")] = "PolicySim-Rec-v0",
    policy: Annotated[str, typer.Option(help="origin (no intervention), a bandit (eenet, eenet_gnn, neural_ucb, linucb, lints, egreedy, egreedy_neural, random) or a baseline (popularity, mmr, suppress_flagged).")] = "random",
    num_users: Annotated[int, typer.Option(help="Number of simulated users (env num_users).")] = 1000,
    users: Annotated[str, typer.Option(help="The population (env users=): surrogate, llm, or an ABM: bounded_confidence, lorenz, relative_agreement.")] = "surrogate",
    rounds: Annotated[int, typer.Option(help="Rounds per episode.")] = 10,
    budget: Annotated[int | None, typer.Option(help="Arms per sampled user (default: the env's): Rec, recommended slots the policy fills per user (at most recommender.personalized = 5); Exposure, 1.")] = None,
    candidate_users: Annotated[int | None, typer.Option(help="Rec: users per round the policy recommends to (default: the env's lever_share, 0.25 of the active users).")] = None,
    seed: Annotated[list[int], typer.Option(help="Seed(s); repeat the option for several.")] = [0],  # noqa: B006
    episodes: Annotated[int, typer.Option(help="Episodes per seed (the policy keeps learning).")] = 1,
    scenario: Annotated[str | None, typer.Option(help="abortion, misinformation, or a saved scenario .npz (default: the env's).")] = None,
    brain: Annotated[str | None, typer.Option("--brain", hidden=True, help="Deprecated alias of --users.")] = None,
    llm: Annotated[str | None, typer.Option(help='LLM config as JSON, e.g. \'{"backend": "hf", "model": "/path"}\'.')] = None,
    env_kwargs: Annotated[str | None, typer.Option(help="Extra env keyword arguments as JSON.")] = None,
    policy_kwargs: Annotated[str | None, typer.Option(help="Policy hyper-parameters as JSON.")] = None,
    out: Annotated[Path, typer.Option(help="Folder for run folders.")] = Path("runs"),
    name: Annotated[str | None, typer.Option(help="Run folder name (default: env-policy-time).")] = None,
    wandb: Annotated[str | None, typer.Option(help="Log to Weights & Biases: online, offline or disabled.")] = None,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "policysim",
    plots: Annotated[bool, typer.Option(help="Write PNG plots.")] = True,
    checkpoint_every: Annotated[int, typer.Option(help="Rounds between run checkpoints (0 = none).")] = 1,
    resume: Annotated[Path | None, typer.Option(help="Continue the interrupted run in this run folder from its checkpoint (other options are ignored, except --llm, --record and --wandb, which a checkpoint may not choose: give them again).")] = None,
    log_propensities: Annotated[bool, typer.Option(help="Log every round's arms and slate propensities (logged_rounds.npz) for off-policy evaluation.")] = True,
    record: Annotated[Path | None, typer.Option(help="Also write the episodes as a Minari dataset in this folder (read with MINARI_DATASETS_PATH=folder).")] = None,
    record_id: Annotated[str | None, typer.Option(help="Minari dataset id (default: policysim-<env>/<policy>-v0).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Write the behaviour trace of every episode to this folder (read by `policysim fit`).")] = None,
    surrogate: Annotated[Path | None, typer.Option(help="A fitted surrogate (the JSON `policysim fit` writes) as the surrogate's parameters.")] = None,
) -> None:
    """Run a policy on a PolicySim env; print a metrics table and write a run folder."""
    from socialenv.runner import RunConfig
    from socialenv.runner import resume as resume_run
    from socialenv.runner import run as run_policy

    if resume is not None:
        try:
            again = {"llm": _parse_json(llm, "--llm")} if llm is not None else {}
            if record is not None:
                again["record"] = str(record)
            result = resume_run(resume, plots=plots, wandb=wandb, wandb_project=wandb_project, **again)
        except (ValueError, FileNotFoundError) as err:
            console.print(f"[red]error:[/red] {redact_text(str(err))}")
            raise typer.Exit(code=2) from err
        print_summary(result.summary, f"{result.summary['policy']} on {result.summary['env_id']} (resumed)")
        console.print(f"run folder: {result.out_dir}")
        return

    num_users, users = _population_options(num_users, users, brain)
    kwargs = {"num_users": num_users, "rounds": rounds, "users": users,
              **_parse_json(env_kwargs, "--env-kwargs")}
    if budget is not None:
        kwargs["budget"] = budget
    if candidate_users is not None:
        kwargs["candidate_users"] = candidate_users
    if scenario is not None:
        kwargs["scenario"] = scenario
    if llm is not None:
        kwargs["llm"] = _parse_json(llm, "--llm")
    if surrogate is not None:
        kwargs["surrogate"] = str(surrogate)
    try:
        config = RunConfig(
            env_id=env, policy=policy, seeds=tuple(seed), episodes=episodes, env_kwargs=kwargs,
            policy_kwargs=_parse_json(policy_kwargs, "--policy-kwargs"), out_dir=str(out),
            run_name=name, wandb=wandb, wandb_project=wandb_project, plots=plots,
            checkpoint_every=checkpoint_every, log_propensities=log_propensities,
            record=str(record) if record is not None else None, record_id=record_id,
            trace=str(trace) if trace is not None else None,
        )
        result = run_policy(config)
    except (ValueError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {redact_text(str(err))}")
        raise typer.Exit(code=2) from err
    print_summary(result.summary, f"{policy} on {env}: {num_users} {users} users, {rounds} rounds")
    if result.out_dir is not None:
        console.print(f"run folder: {result.out_dir}")
    if record is not None:
        from socialenv.offline import default_dataset_id

        console.print(f"Minari dataset {record_id or default_dataset_id(env, policy)} in {record}")
    if trace is not None:
        console.print(f"behaviour trace in {trace} (fit it: policysim fit {trace} --out fitted.json)")


@app.command()
def sweep(
    grid: Annotated[Path | None, typer.Option(help="Grid file in the W&B sweep format (see examples/sweep.yaml).")] = None,
    policy: Annotated[list[str] | None, typer.Option(help="Policy (repeat for several); overrides the grid file's.")] = None,
    seed: Annotated[list[int] | None, typer.Option(help="Seed (repeat for several); overrides the grid file's.")] = None,
    env: Annotated[str | None, typer.Option(help="Env id (default: the grid file's, else PolicySim-Rec-v0).")] = None,
    num_users: Annotated[int | None, typer.Option(help="Number of simulated users (env num_users).")] = None,
    users: Annotated[str | None, typer.Option(help="The population (env users=): surrogate, llm, bounded_confidence, lorenz, relative_agreement.")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds per episode.")] = None,
    episodes: Annotated[int | None, typer.Option(help="Episodes per trial.")] = None,
    env_kwargs: Annotated[str | None, typer.Option(help="Extra fixed env keyword arguments as JSON.")] = None,
    vary: Annotated[str | None, typer.Option(help='Env arguments to vary as JSON, e.g. \'{"budget": [2, 5]}\' (recommended slots per sampled user).')] = None,
    backend: Annotated[str, typer.Option(help="ray (parallel) or local (one process, no Ray).")] = "ray",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (e.g. auto, ray://head:10001); default: start a local one.")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs of the local Ray cluster (default: all).")] = None,
    cpus_per_trial: Annotated[float, typer.Option(help="CPUs Ray reserves per trial.")] = 1.0,
    ship_code: Annotated[bool, typer.Option(help="Upload the PolicySim packages to the cluster (runtime_env py_modules).")] = False,
    wandb: Annotated[str | None, typer.Option(help="W&B per trial: online, offline or disabled.")] = None,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "policysim",
    out: Annotated[Path, typer.Option(help="Parent folder of the sweep folder.")] = Path("runs/sweeps"),
    name: Annotated[str | None, typer.Option(help="Sweep name (folder, W&B group).")] = None,
    resume: Annotated[bool, typer.Option(help="Keep the trials this sweep's folder already finished (trials.jsonl); run the rest.")] = False,
    surrogate: Annotated[Path | None, typer.Option(help="A fitted surrogate (the JSON `policysim fit` writes) as the surrogate's parameters.")] = None,
) -> None:
    """Run policies × seeds × env configs on Ray (or locally); print a table, write JSON."""
    from socialenv.sweep import SweepConfig, load_grid, print_table, run_sweep

    try:
        config = load_grid(grid) if grid is not None else SweepConfig(name=name or "sweep")
        overrides = {**_parse_json(env_kwargs, "--env-kwargs")}
        num_users, users = _population_options(num_users, users, None)
        if num_users is not None:
            overrides["num_users"] = num_users
        if users is not None:
            overrides["users"] = users
        if rounds is not None:
            overrides["rounds"] = rounds
        if surrogate is not None:
            overrides["surrogate"] = str(surrogate)
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
                           cpus_per_trial=cpus_per_trial, ship_code=ship_code, progress=progress,
                           resume=resume)
    except (ValueError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {redact_text(str(err))}")
        raise typer.Exit(code=2) from err
    startup = f", Ray start {result.startup_seconds:.1f} s" if result.backend == "ray" else ""
    print_table(result, title=f"{config.name} on {config.env_id}: mean ± 95% CI over seeds "
                              f"({result.backend}, {result.seconds:.1f} s{startup})")
    if result.out_dir is not None:
        console.print(f"sweep folder: {result.out_dir} (sweep.json, rounds.csv)")
    if result.failures:
        raise typer.Exit(code=1)


@app.command()
def play(
    user: Annotated[int, typer.Option(help="The user id you take over.")] = 0,
    env: Annotated[str, typer.Option(help="Env id: PolicySim-Rec-v0, PolicySim-Exposure-v0 or PolicySim-Moderation-v0.")] = "PolicySim-Rec-v0",
    users: Annotated[int, typer.Option(help="Number of simulated users.")] = 200,
    rounds: Annotated[int, typer.Option(help="Rounds to play.")] = 5,
    seed: Annotated[int, typer.Option(help="Episode seed.")] = 0,
    every_round: Annotated[bool, typer.Option(help="Act every round (else only when the activity model makes you active).")] = True,
    platform_policy: Annotated[str | None, typer.Option(help="The platform's policy (e.g. linucb); default none.")] = None,
    brain: Annotated[str, typer.Option(help="Everyone else's brain: surrogate or llm.")] = "surrogate",
    llm: Annotated[str | None, typer.Option(help='LLM config as JSON, e.g. \'{"backend": "hf", "model": "/path"}\'.')] = None,
    env_kwargs: Annotated[str | None, typer.Option(help="Extra env keyword arguments as JSON.")] = None,
) -> None:
    """Take over one user in the terminal: see its feed and memories each round and type its actions."""
    from socialenv.play import play as run_play

    extra = _parse_json(env_kwargs, "--env-kwargs")
    if llm:
        extra["llm"] = _parse_json(llm, "--llm")
    try:
        run_play(env, user, seed=seed, every_round=every_round, platform_policy=platform_policy,
                 num_users=users, rounds=rounds, users=brain, **extra)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err


# sub-commands; their modules import only typer at the top, heavy libraries inside commands
from agent_models.evaluation.cli import eval_app  # noqa: E402
from agent_models.training.cli import train_app  # noqa: E402
from socialenv.loaders.cli import data_app  # noqa: E402

app.add_typer(train_app, name="train", help="Train user agents: SFT, then DPO (trl + peft).")
app.add_typer(eval_app, name="eval", help="Micro-level evaluation of user agents (Table 2).")
app.add_typer(data_app, name="data", help="Turn TwiBot-20 / Weibo files into a scenario and SFT data.")

from socialenv.fit_cli import fit  # noqa: E402

app.command(help="Fit the surrogate's parameters to a behaviour trace (maximum likelihood, held-out validation).")(fit)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
