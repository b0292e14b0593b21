"""The ``policysim`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from typer._click import _textwrap
from typer.core import TyperCommand

from policysim_infra.redaction import redact_text
from policysim_infra.validation import config_error

app = typer.Typer(
    help="PolicySim: learn a social platform's intervention policy against simulated users.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
console = Console()


class _WholeWordWrapper(_textwrap.TextWrapper):
    """Click's help wrapper, breaking lines at spaces only: env ids such as
    PolicySim-Exposure-v0 stay whole (and can be copied)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, break_on_hyphens=False, **kwargs)


# help is plain click text (rich_markup_mode=None), wrapped at the terminal's width, never cut
_textwrap.TextWrapper = _WholeWordWrapper  # typer's click imports it at each wrap_text call

#: Placeholders in option help, filled from the registries when help is shown.
ENV_IDS_HELP, POLICIES_HELP, POPULATIONS_HELP = "<env ids>", "<policy names>", "<population names>"
BACKENDS_HELP, SCENARIOS_HELP = "<backend names>", "<scenario names>"


def _registry_help() -> dict[str, str]:
    import socialenv
    from agent_models.factory import population_names
    from agent_models.llm.config import BACKENDS
    from baselines.policies import policy_names
    from socialenv.scenarios.builtin import BUILTIN_SCENARIOS

    return {
        ENV_IDS_HELP: ", ".join(socialenv.ENV_IDS),
        POLICIES_HELP: ", ".join(policy_names()),
        POPULATIONS_HELP: ", ".join(population_names()),
        BACKENDS_HELP: ", ".join(BACKENDS),
        SCENARIOS_HELP: ", ".join(BUILTIN_SCENARIOS),
    }


_PLACEHOLDERS = (ENV_IDS_HELP, POLICIES_HELP, POPULATIONS_HELP, BACKENDS_HELP, SCENARIOS_HELP)


class RegistryHelpCommand(TyperCommand):
    """A command whose option help names env ids, policies and populations from their
    registries (filled in when help is shown, so the lists cannot go stale and importing
    the CLI stays light)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        names: dict[str, str] | None = None
        for param in self.params:
            text = getattr(param, "help", None)
            if text and any(key in text for key in _PLACEHOLDERS):
                names = names or _registry_help()
                for key, value in names.items():
                    text = text.replace(key, value)
                param.help = text
        super().format_help(ctx, formatter)


_warned: set[str] = set()


def _deprecated(spelling: str, use: str) -> None:
    """Warn once per process that ``spelling`` is deprecated in favour of ``use``."""
    if spelling not in _warned:
        _warned.add(spelling)
        console.print(f"[yellow]warning:[/yellow] {spelling} is deprecated: use {use}")


def _without_deep_rl_sizing_advice() -> None:
    """run, sweep and play act with bandits and baselines, which score arms one by one: the
    env's advice for flat deep-RL policies (LargeActionSpaceWarning) does not concern them."""
    import warnings

    from socialenv.envs.sizing import LargeActionSpaceWarning

    warnings.filterwarnings("ignore", category=LargeActionSpaceWarning)


def _write_failed(err: OSError) -> NoReturn:
    """A file could not be written (a full disk, no permission): what was finished is kept, a
    run's summary.json says failed with the error, and ``--resume`` continues."""
    console.print(
        f"[red]error:[/red] could not write: {redact_text(str(err))}. What was finished "
        "is kept (a run's summary.json says failed); free space or fix the folder, then "
        "continue with --resume."
    )
    raise typer.Exit(code=2) from err


def _show_progress(quiet: bool) -> bool:
    from policysim_infra.progress import show_progress

    return show_progress(quiet)


@app.callback()
def _root() -> None:
    """PolicySim command line: `policysim run`, `policysim play`, `policysim train`, `policysim eval`, `policysim sweep`, `policysim fit`."""


SUMMARY_ROWS = (
    ("objective", "objective (per active user)"),
    ("reward", "step reward"),
    ("slot_reward", "slot reward (Rec, ΣΔ)"),
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
    (:func:`policysim_infra.validation.config_error`) otherwise."""
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise typer.BadParameter(
            str(config_error(option, value, f"a JSON object ({err})"))
        ) from err
    except RecursionError as err:
        raise typer.BadParameter(
            str(config_error(option, value[:40] + "...", "a JSON object nested less deeply"))
        ) from err
    if not isinstance(parsed, dict):
        raise typer.BadParameter(
            str(config_error(option, value, f"a JSON object, not a {type(parsed).__name__}"))
        )
    return parsed


def _population_options(
    num_users: int | None, users: str | None, brain: str | None
) -> tuple[int | None, str | None]:
    """(num_users, users) from ``--num-users``, ``--users`` and the deprecated spellings:
    ``--brain X`` (now ``--users X``) and ``--users N`` with a number (now ``--num-users N``),
    the same in run, sweep and play."""
    if users is not None and users.isdigit():
        _deprecated(
            f"--users {users} as a number of users",
            f"--num-users {users} (--users names the population, as the env's users=)",
        )
        num_users, users = int(users), None
    if brain is not None:
        _deprecated("--brain", "--users (the env's users= keyword)")
        users = brain
    return num_users, users


def print_summary(summary: dict, title: str) -> None:
    """The metrics table: each row says whether it is a mean over rounds or the last
    round's value; the CI column reads n/a with one seed."""
    from policysim.summary import FLOW_METRICS, format_mean_ci

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


ENV_HELP = f"Env id: {ENV_IDS_HELP}."
POLICY_HELP = f"The platform's policy: {POLICIES_HELP} (origin = no intervention)."
POPULATION_HELP = f"The population (env users=): {POPULATIONS_HELP}."
NUM_USERS_HELP = "Number of simulated users (env num_users)."
QUIET_HELP = "No progress bar (there is none when output is not a terminal either)."

#: Options several commands share, declared once.
BrainAliasOption = Annotated[
    str | None, typer.Option("--brain", hidden=True, help="Deprecated alias of --users.")
]
LLMOption = Annotated[
    str | None,
    typer.Option(
        help='LLM config as JSON, e.g. \'{"backend": "hf", "model": "/path"}\'; '
        f"backends: {BACKENDS_HELP}."
    ),
]
EnvKwargsOption = Annotated[str | None, typer.Option(help="Extra env keyword arguments as JSON.")]


@app.command(cls=RegistryHelpCommand)
def run(
    env: Annotated[str, typer.Option(help=ENV_HELP)] = "PolicySim-Rec-v0",
    policy: Annotated[str, typer.Option(help=POLICY_HELP)] = "random",
    num_users: Annotated[int, typer.Option(help=NUM_USERS_HELP)] = 1000,
    users: Annotated[str, typer.Option(help=POPULATION_HELP)] = "surrogate",
    rounds: Annotated[int, typer.Option(help="Rounds per episode.")] = 10,
    budget: Annotated[
        int | None,
        typer.Option(
            help="Arms per sampled user (default: the env's): Rec, recommended slots the policy fills per user (at most recommender.personalized = 5); Exposure, 1."
        ),
    ] = None,
    candidate_users: Annotated[
        int | None,
        typer.Option(
            help="Rec: users per round the policy recommends to (default: the env's lever_share, 0.15 of the active users)."
        ),
    ] = None,
    seed: Annotated[list[int], typer.Option(help="Seed(s); repeat the option for several.")] = [0],  # noqa: B006
    episodes: Annotated[
        int, typer.Option(help="Episodes per seed (the policy keeps learning).")
    ] = 1,
    scenario: Annotated[
        str | None,
        typer.Option(help=f"{SCENARIOS_HELP}, or a saved scenario .npz (default: the env's)."),
    ] = None,
    brain: BrainAliasOption = None,
    llm: LLMOption = None,
    env_kwargs: EnvKwargsOption = None,
    policy_kwargs: Annotated[
        str | None, typer.Option(help="Policy hyper-parameters as JSON.")
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for run folders.")] = Path("runs"),
    name: Annotated[
        str | None, typer.Option(help="Run folder name (default: env-policy-time).")
    ] = None,
    wandb: Annotated[
        str | None, typer.Option(help="Log to Weights & Biases: online, offline or disabled.")
    ] = None,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "policysim",
    plots: Annotated[bool, typer.Option(help="Write PNG plots.")] = True,
    checkpoint_every: Annotated[
        int, typer.Option(help="Rounds between run checkpoints (0 = none).")
    ] = 1,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Continue the interrupted run in this run folder from its checkpoint (other options are ignored, except --llm, --record and --wandb, which a checkpoint may not choose: give them again)."
        ),
    ] = None,
    log_propensities: Annotated[
        bool,
        typer.Option(
            help="Log every round's arms and slate propensities (logged_rounds.npz) for off-policy evaluation."
        ),
    ] = True,
    record: Annotated[
        Path | None,
        typer.Option(
            help="Also write the episodes as a Minari dataset in this folder (read with MINARI_DATASETS_PATH=folder)."
        ),
    ] = None,
    record_id: Annotated[
        str | None, typer.Option(help="Minari dataset id (default: policysim-<env>/<policy>-v0).")
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Write the behaviour trace of every episode to this folder (read by `policysim fit`)."
        ),
    ] = None,
    surrogate: Annotated[
        Path | None,
        typer.Option(
            help="A fitted surrogate (the JSON `policysim fit` writes) as the surrogate's parameters."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
) -> None:
    """Run a policy on a PolicySim env; print a metrics table and write a run folder."""
    from policysim.runner import RunConfig
    from policysim.runner import resume as resume_run
    from policysim.runner import run as run_policy

    _without_deep_rl_sizing_advice()

    if resume is not None:
        try:
            again = {"llm": _parse_json(llm, "--llm")} if llm is not None else {}
            if record is not None:
                again["record"] = str(record)
            result = resume_run(
                resume,
                plots=plots,
                wandb=wandb,
                wandb_project=wandb_project,
                progress=_show_progress(quiet),
                **again,
            )
        except (ValueError, FileNotFoundError) as err:
            console.print(f"[red]error:[/red] {redact_text(str(err))}")
            raise typer.Exit(code=2) from err
        except OSError as err:
            _write_failed(err)
        print_summary(
            result.summary, f"{result.summary['policy']} on {result.summary['env_id']} (resumed)"
        )
        console.print(f"run folder: {result.out_dir}")
        return

    num_users, users = _population_options(num_users, users, brain)
    users = users or "surrogate"
    kwargs = {
        "num_users": num_users,
        "rounds": rounds,
        "users": users,
        **_parse_json(env_kwargs, "--env-kwargs"),
    }
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
            env_id=env,
            policy=policy,
            seeds=tuple(seed),
            episodes=episodes,
            env_kwargs=kwargs,
            policy_kwargs=_parse_json(policy_kwargs, "--policy-kwargs"),
            out_dir=str(out),
            run_name=name,
            wandb=wandb,
            wandb_project=wandb_project,
            plots=plots,
            checkpoint_every=checkpoint_every,
            log_propensities=log_propensities,
            record=str(record) if record is not None else None,
            record_id=record_id,
            trace=str(trace) if trace is not None else None,
            progress=_show_progress(quiet),
        )
        result = run_policy(config)
    except (ValueError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {redact_text(str(err))}")
        raise typer.Exit(code=2) from err
    except OSError as err:  # a full disk, a folder that cannot be written: the run says failed
        _write_failed(err)
    print_summary(result.summary, f"{policy} on {env}: {num_users} {users} users, {rounds} rounds")
    if result.out_dir is not None:
        console.print(f"run folder: {result.out_dir}")
    if record is not None:
        from policysim.offline import default_dataset_id

        console.print(f"Minari dataset {record_id or default_dataset_id(env, policy)} in {record}")
    if trace is not None:
        console.print(
            f"behaviour trace in {trace} (fit it: policysim fit {trace} --out fitted.json)"
        )


@app.command(cls=RegistryHelpCommand)
def sweep(
    grid: Annotated[
        Path | None,
        typer.Option(help="Grid file in the W&B sweep format (see examples/sweep.yaml)."),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(help=f"{POLICY_HELP} Repeat for several; overrides the grid file's."),
    ] = None,
    seed: Annotated[
        list[int] | None,
        typer.Option(help="Seed(s); repeat the option for several; overrides the grid file's."),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(help=f"{ENV_HELP} Default: the grid file's, else PolicySim-Rec-v0."),
    ] = None,
    num_users: Annotated[int | None, typer.Option(help=NUM_USERS_HELP)] = None,
    users: Annotated[str | None, typer.Option(help=POPULATION_HELP)] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds per episode.")] = None,
    episodes: Annotated[int | None, typer.Option(help="Episodes per trial.")] = None,
    env_kwargs: Annotated[
        str | None, typer.Option(help="Extra fixed env keyword arguments as JSON.")
    ] = None,
    vary: Annotated[
        str | None,
        typer.Option(
            help="Env arguments to vary as JSON, e.g. '{\"budget\": [2, 5]}' (recommended slots per sampled user)."
        ),
    ] = None,
    backend: Annotated[
        str, typer.Option(help="ray (parallel) or local (one process, no Ray).")
    ] = "ray",
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster address (e.g. auto, ray://head:10001); default: start a local one."
        ),
    ] = None,
    num_cpus: Annotated[
        int | None, typer.Option(help="CPUs of the local Ray cluster (default: all).")
    ] = None,
    cpus_per_trial: Annotated[float, typer.Option(help="CPUs Ray reserves per trial.")] = 1.0,
    ship_code: Annotated[
        bool,
        typer.Option(help="Upload the PolicySim packages to the cluster (runtime_env py_modules)."),
    ] = False,
    wandb: Annotated[
        str | None, typer.Option(help="W&B per trial: online, offline or disabled.")
    ] = None,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "policysim",
    out: Annotated[Path, typer.Option(help="Parent folder of the sweep folder.")] = Path(
        "runs/sweeps"
    ),
    name: Annotated[str | None, typer.Option(help="Sweep name (folder, W&B group).")] = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="Keep the trials this sweep's folder already finished (trials.jsonl); run the rest."
        ),
    ] = False,
    surrogate: Annotated[
        Path | None,
        typer.Option(
            help="A fitted surrogate (the JSON `policysim fit` writes) as the surrogate's parameters."
        ),
    ] = None,
    brain: BrainAliasOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
) -> None:
    """Run policies × seeds × env configs on Ray (or locally); print a table, write JSON."""
    from policysim.sweep import SweepConfig, load_grid, print_table, run_sweep

    _without_deep_rl_sizing_advice()

    try:
        config = load_grid(grid) if grid is not None else SweepConfig(name=name or "sweep")
        overrides = {**_parse_json(env_kwargs, "--env-kwargs")}
        num_users, users = _population_options(num_users, users, brain)
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
            name=name or config.name,
            env_id=env or config.env_id,
            policies=tuple(policy) if policy else config.policies,
            seeds=tuple(seed) if seed else config.seeds,
            episodes=episodes if episodes is not None else config.episodes,
            env_kwargs={
                **{k: v for k, v in config.env_kwargs.items() if k not in grid_values},
                **overrides,
            },
            grid={**{k: v for k, v in config.grid.items() if k not in overrides}, **grid_values},
            policy_kwargs={
                k: v for k, v in config.policy_kwargs.items() if k in (policy or config.policies)
            },
            wandb=wandb,
            wandb_project=wandb_project,
            out_dir=str(out),
        )
        total = len(config.trials())
        console.print(
            f"sweep {config.name}: {total} trials ({len(config.policies)} policies × "
            f"{len(config.configs())} configs × {len(config.seeds)} seeds) on {backend}"
        )

        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="trial", desc=config.name, disable=not _show_progress(quiet))

        def progress(result: dict, done: int, total: int) -> None:
            bar.n = done
            bar.set_postfix_str(result["trial"]["name"], refresh=True)
            if "error" in result:  # failures are reported whatever the progress display
                bar.write(
                    f"  [{done}/{total}] {result['trial']['name']}: failed: {redact_text(str(result['error']))}"
                )

        try:
            result = run_sweep(
                config,
                backend=backend,
                address=address,
                num_cpus=num_cpus,
                cpus_per_trial=cpus_per_trial,
                ship_code=ship_code,
                progress=progress,
                resume=resume,
            )
        finally:
            bar.close()
    except (ValueError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {redact_text(str(err))}")
        raise typer.Exit(code=2) from err
    except OSError as err:  # a full disk, a folder that cannot be written: the run says failed
        _write_failed(err)
    startup = f", Ray start {result.startup_seconds:.1f} s" if result.backend == "ray" else ""
    print_table(
        result,
        title=f"{config.name} on {config.env_id}: mean ± 95% CI over seeds "
        f"({result.backend}, {result.seconds:.1f} s{startup})",
    )
    if result.out_dir is not None:
        console.print(f"sweep folder: {result.out_dir} (sweep.json, rounds.csv)")
    if result.failures:
        raise typer.Exit(code=1)


@app.command(cls=RegistryHelpCommand)
def play(
    user: Annotated[int, typer.Option(help="The user id you take over.")] = 0,
    env: Annotated[str, typer.Option(help=ENV_HELP)] = "PolicySim-Rec-v0",
    num_users: Annotated[int, typer.Option(help=NUM_USERS_HELP)] = 200,
    users: Annotated[str, typer.Option(help=f"{POPULATION_HELP} Everyone but you.")] = "surrogate",
    rounds: Annotated[int, typer.Option(help="Rounds per episode.")] = 5,
    seed: Annotated[int, typer.Option(help="Episode seed.")] = 0,
    every_round: Annotated[
        bool,
        typer.Option(help="Act every round (else only when the activity model makes you active)."),
    ] = True,
    policy: Annotated[str, typer.Option(help=POLICY_HELP)] = "origin",
    llm: LLMOption = None,
    env_kwargs: EnvKwargsOption = None,
    brain: BrainAliasOption = None,
    platform_policy: Annotated[
        str | None,
        typer.Option("--platform-policy", hidden=True, help="Deprecated alias of --policy."),
    ] = None,
) -> None:
    """Take over one user in the terminal: see its feed and memories each round and type its actions."""
    from policysim.play import play as run_play

    _without_deep_rl_sizing_advice()

    count, population = _population_options(num_users, users, brain)
    if platform_policy is not None:
        _deprecated("--platform-policy", "--policy (the platform's policy, as in run and sweep)")
        policy = platform_policy
    extra: dict[str, Any] = _parse_json(env_kwargs, "--env-kwargs")
    if llm:
        extra["llm"] = _parse_json(llm, "--llm")
    try:
        run_play(
            env,
            user,
            seed=seed,
            every_round=every_round,
            platform_policy=None if policy == "origin" else policy,
            num_users=count,
            rounds=rounds,
            users=population or "surrogate",
            **extra,
        )
    except ValueError as err:
        raise typer.BadParameter(redact_text(str(err))) from err


# sub-commands; their modules import only typer at the top, heavy libraries inside commands
from policysim.evaluate_cli import eval_app  # noqa: E402
from policysim.loaders_cli import data_app  # noqa: E402
from policysim.train_cli import train_app  # noqa: E402

app.add_typer(train_app, name="train", help="Train user agents: SFT, then DPO (trl + peft).")
app.add_typer(eval_app, name="eval", help="Micro-level evaluation of user agents (Table 2).")
app.add_typer(
    data_app, name="data", help="Turn TwiBot-20 / Weibo files into a scenario and SFT data."
)

from policysim.fit_cli import fit  # noqa: E402

app.command(
    help="Fit the surrogate's parameters to a behaviour trace (maximum likelihood, held-out validation)."
)(fit)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
