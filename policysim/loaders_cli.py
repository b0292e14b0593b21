"""``policysim data prepare`` (a typer sub-app, :data:`data_app`): read a dataset, write the
scenario and the SFT data the training and evaluation commands use.

Output folder::

    scenario.npz / scenario.json   the Scenario (load with Scenario.load or scenario=<path>)
    actions.jsonl                  every observed (event, user, action) tuple
    sft_train.jsonl, sft_test.jsonl  SFT records (agents' chat format), split by observation
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

data_app = typer.Typer(
    help="Turn real datasets (TwiBot-20, Weibo) into scenarios and training data.",
    no_args_is_help=True,
    add_completion=False,
)


@data_app.callback()
def _group() -> None:
    """Prepare real datasets: `prepare twibot20|weibo PATH --out DIR`."""


@data_app.command("prepare")
def prepare(
    dataset: Annotated[str, typer.Argument(help="'twibot20' or 'weibo'.")],
    path: Annotated[
        Path,
        typer.Argument(help="TwiBot-20 JSON file / folder, or the Weibo folder with Weibo.txt."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")],
    domain: Annotated[
        str, typer.Option(help="TwiBot-20 domain to keep ('all' keeps every domain).")
    ] = "Politics",
    topic: Annotated[str | None, typer.Option(help="Topic description for prompts.")] = None,
    max_users: Annotated[int | None, typer.Option(help="Keep the N most active users.")] = None,
    max_events: Annotated[
        int | None, typer.Option(help="Weibo: read only the first N events.")
    ] = None,
    max_history: Annotated[int, typer.Option(help="History posts kept per user.")] = 20,
    encoder: Annotated[
        str, typer.Option(help="Sentence encoder: 'auto', 'hash' or a path.")
    ] = "auto",
    test_share: Annotated[
        float, typer.Option(help="Share of observations held out for evaluation.")
    ] = 0.2,
    feed_size: Annotated[int, typer.Option(help="Posts in the feed of each SFT instruction.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the split and of the prompts.")] = 0,
) -> None:
    """Read a dataset and write scenario + actions + SFT train/test records."""
    from agent_models.training.data import ExampleConfig, build_examples, save_records
    from agent_models.training.records import save_actions
    from socialenv.scenarios.loaders import LoaderConfig, read_twibot20, read_weibo

    config = LoaderConfig(
        topic=topic,
        max_users=max_users,
        max_history_per_user=max_history,
        encoder=encoder,
        seed=seed,
    )
    if dataset == "twibot20":
        loaded = read_twibot20(
            path, domain=None if domain.lower() == "all" else domain, config=config
        )
    elif dataset == "weibo":
        loaded = read_weibo(path, max_events=max_events, config=config)
    else:
        raise typer.BadParameter(f"dataset={dataset!r} is not allowed: use 'twibot20' or 'weibo'")
    out.mkdir(parents=True, exist_ok=True)
    s = loaded.scenario
    s.save(out / "scenario.npz")
    save_actions(loaded.actions, out / "actions.jsonl")
    examples = build_examples(
        loaded.actions,
        s.profiles,
        s.topic,
        follow_src=s.follow_src,
        follow_dst=s.follow_dst,
        config=ExampleConfig(feed_size=feed_size, seed=seed),
    )
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(examples))
    n_test = int(round(test_share * len(examples)))
    test = set(order[:n_test].tolist())
    save_records(
        [e.to_record() for i, e in enumerate(examples) if i not in test], out / "sft_train.jsonl"
    )
    save_records(
        [e.to_record() for i, e in enumerate(examples) if i in test], out / "sft_test.jsonl"
    )
    typer.echo(
        json.dumps(
            {
                "users": s.num_users,
                "edges": int(len(s.follow_src)),
                "history_posts": int(len(s.history_author)),
                "actions": len(loaded.actions),
                "sft_train": len(examples) - n_test,
                "sft_test": n_test,
                "out": str(out),
            }
        )
    )
