"""Behaviour traces (socialenv.fitting.trace) and the surrogate fit (socialenv.fitting.likelihood, `policysim fit`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the envs
from agent_models.surrogate import SurrogateConfig
from socialenv.envs.episodes import play_episode
from socialenv.envs.policy_registry import make_run_policy
from socialenv.fitting.trace import SCHEMA, TRACE_VERSION, TraceError, load_trace, write_trace
from tests.support import REC, small_rec


def _record(
    tmp_path: Path, storage: str = "parquet", episodes: int = 2, **kwargs
) -> tuple[Path, list]:
    env = gym.make(REC, **small_rec(**kwargs))
    path = tmp_path / f"run.{storage}.trace"
    env.unwrapped.trace(path, format=storage)
    rows = []
    for episode in range(episodes):
        rows.append(
            play_episode(env, make_run_policy("random", env.unwrapped, episode), seed=episode)
        )
    env.close()
    return path, rows


@pytest.mark.parametrize("storage", ["parquet", "npz"])
def test_trace_records_every_round_and_reloads(tmp_path: Path, storage: str) -> None:
    path, rows = _record(tmp_path, storage)
    trace = load_trace(path)
    assert trace.meta["version"] == TRACE_VERSION and trace.meta["episodes"] == 2
    assert trace.meta["storage"] == storage and trace.meta["surrogate"] == asdict(SurrogateConfig())
    for table, schema in SCHEMA.items():
        assert set(trace[table]) == set(schema)
    react, imp = trace["reactions"], trace["impressions"]
    for episode, episode_rows in enumerate(rows):
        for row in episode_rows:
            mine = (react["episode"] == episode) & (react["round"] == row["round"])
            assert mine.sum() == row["reactions"]
            posts = (trace["posts"]["episode"] == episode) & (
                trace["posts"]["round"] == row["round"]
            )
            assert posts.sum() == row["posts"]
    # every surrogate reaction answers an impression of the same user and post
    assert (react["impression"] >= 0).all()
    assert np.array_equal(imp["user"][react["impression"]], react["user"])
    assert np.array_equal(imp["post"][react["impression"]], react["post"])
    # the opinion after a round is the opinion before the next
    users = trace["users"]
    first = (users["episode"] == 0) & (users["round"] == 0)
    second = (users["episode"] == 0) & (users["round"] == 1)
    assert np.array_equal(users["opinion_after"][first], users["opinion_before"][second])
    assert np.allclose(
        trace["rounds"]["stance_mean"], [r["stance_mean"] for rs in rows for r in rs]
    )


def test_both_storages_hold_the_same_trace(tmp_path: Path) -> None:
    path, _ = _record(tmp_path, episodes=1)
    trace = load_trace(path)
    write_trace(trace, tmp_path / "copy.trace", "npz")
    copy = load_trace(tmp_path / "copy.trace")
    for table in SCHEMA:
        for column, values in trace[table].items():
            np.testing.assert_array_equal(values, copy[table][column], err_msg=f"{table}.{column}")


def test_a_split_keeps_reactions_pointing_at_their_impressions(tmp_path: Path) -> None:
    path, _ = _record(tmp_path, episodes=2)
    trace = load_trace(path)
    users = np.arange(0, 150, 3)
    for part in (
        trace.select(users=users),
        trace.select(rounds=np.array([1, 2])),
        trace.select(users=users, rounds=np.array([0])),
    ):
        react, imp = part["reactions"], part["impressions"]
        assert len(react["user"]) > 0 and (react["impression"] >= 0).all()
        for column in ("user", "post", "episode", "round"):
            assert np.array_equal(imp[column][react["impression"]], react[column]), column
    assert set(np.unique(trace.select(users=users)["users"]["user"])) == set(users)


def test_traces_recorded_apart_merge_into_the_trace_recorded_together(tmp_path: Path) -> None:
    from socialenv.fitting.trace import TraceRecorder, merge_traces

    def episode(seed: int, recorder: TraceRecorder | None = None) -> TraceRecorder:
        env = gym.make(REC, **small_rec())
        recorder = env.unwrapped.trace(recorder=recorder)
        play_episode(env, make_run_policy("random", env.unwrapped, seed), seed=seed)
        env.close()
        return recorder

    together = episode(1, episode(0)).trace({"policy": "random"})
    apart = [episode(s).trace({"policy": p}) for s, p in ((0, "random"), (1, "origin"))]
    merged = merge_traces(apart)
    assert merged.meta["episodes"] == 2 and merged.meta["policy_per_episode"] == [
        "random",
        "origin",
    ]
    assert "policy" not in merged.meta
    assert merged.meta["episode_seeds"] == together.meta["episode_seeds"]
    for table in SCHEMA:
        for column, values in together[table].items():
            np.testing.assert_array_equal(
                values, merged[table][column], err_msg=f"{table}.{column}"
            )
    # and one episode taken back out is the trace recorded alone
    second = merged.episodes([1])
    assert second.meta["policy_per_episode"] == ["origin"] and second.meta["episodes"] == 1
    for table in SCHEMA:
        for column, values in apart[1][table].items():
            np.testing.assert_array_equal(
                values, second[table][column], err_msg=f"{table}.{column}"
            )
    reversed_ = merged.episodes([1, 0])
    react, imp = reversed_["reactions"], reversed_["impressions"]
    for column in ("user", "post", "episode", "round"):
        assert np.array_equal(imp[column][react["impression"]], react[column]), column
    with pytest.raises(ValueError, match="ids="):
        merged.episodes([2])
    other = episode(0).trace()
    other.meta["num_users"] = 999
    with pytest.raises(TraceError, match="num_users"):
        merge_traces([apart[0], other])


def test_follows_without_a_positive_reaction_are_reported_not_counted(tmp_path: Path) -> None:
    """A population that follows without reacting (the LLM users do) must not push the
    follow probability past 1: those follows are named as not expressible."""
    from socialenv.fitting.likelihood import fit_trace
    from socialenv.fitting.trace import Trace

    path, _ = _record(tmp_path, episodes=1)
    trace = load_trace(path)
    base = fit_trace(trace, blocks=("follow",)).estimates["follow_prob"]
    edges = trace["edges"]
    extra = 5 * max(int(edges["follow"].sum()), 1) + 50
    imp = trace["impressions"]
    n = int(trace.meta["num_users"])
    unseen = np.setdiff1d(np.arange(n), imp["author"][imp["round"] == 0])
    assert len(unseen)
    # follows of authors nobody was shown in round 0: none is after a positive reaction
    tables = {name: dict(cols) for name, cols in trace.tables.items()}
    tables["edges"] = {
        "episode": np.concatenate([edges["episode"], np.zeros(extra, edges["episode"].dtype)]),
        "round": np.concatenate([edges["round"], np.zeros(extra, edges["round"].dtype)]),
        "src": np.concatenate([edges["src"], np.arange(extra) % n]),
        "dst": np.concatenate([edges["dst"], np.full(extra, int(unseen[0]))]),
        "follow": np.concatenate([edges["follow"], np.ones(extra, bool)]),
    }
    result = fit_trace(Trace(dict(trace.meta), tables), blocks=("follow",))
    est = result.estimates["follow_prob"]
    assert est.value == pytest.approx(base.value) and 0 <= est.value <= 1
    assert est.se is not None and np.isfinite(est.se)
    assert any("have no positive reaction" in f and "left out" in f for f in result.findings)


def test_a_reaction_kind_never_chosen_gets_a_finite_boundary_estimate(tmp_path: Path) -> None:
    """Separated data (no dislike at all, as on small LLM traces) have no finite maximum: the
    weak prior keeps the bias finite and the estimate says it is at the boundary."""
    from socialenv.fitting.likelihood import fit_trace
    from socialenv.fitting.trace import Trace

    path, _ = _record(tmp_path, episodes=1)
    trace = load_trace(path)
    react = trace["reactions"]
    keep = react["kind"] != 4  # Behaviour.DISLIKE
    tables = {name: dict(cols) for name, cols in trace.tables.items()}
    tables["reactions"] = {col: values[keep] for col, values in react.items()}
    fitted = fit_trace(trace, blocks=("reactions",)).estimates
    separated = fit_trace(Trace(dict(trace.meta), tables), blocks=("reactions",)).estimates
    dislike = separated["dislike_bias"]
    assert dislike.status == "boundary" and dislike.se is None and "0 dislikes" in dislike.note
    assert np.isfinite(dislike.value) and -40 < dislike.value < fitted["dislike_bias"].value - 3
    for name in ("like_bias", "retweet_bias", "reply_bias", "interest_weight"):
        assert separated[name].status == "fitted" and np.isfinite(separated[name].se), name
    # dropping the dislikes leaves the other kinds' biases where the data put them
    assert (
        abs(fitted["like_bias"].value - separated["like_bias"].value) < 5 * fitted["like_bias"].se
    )


def test_the_format_doc_lists_every_column() -> None:
    from tests.support import ROOT

    doc = (ROOT / "docs" / "trace_format.md").read_text()
    for table, schema in SCHEMA.items():
        section = doc.split(f"### `{table}`")[1].split("###")[0]
        for column in schema:
            assert f"| `{column}` |" in section, (table, column)
    assert f"format version {TRACE_VERSION}" in doc


def _corrupt(path: Path, table: str, change) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = path / f"{table}.parquet"
    columns = {
        c: v
        for c, v in (
            (c, pq.read_table(file).column(c).to_numpy()) for c in pq.read_table(file).column_names
        )
    }
    change(columns)
    pq.write_table(pa.table(columns), file)


def test_bad_traces_name_the_file_and_the_column(tmp_path: Path) -> None:
    path, _ = _record(tmp_path, episodes=1)
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(TraceError, match=r"meta\.json: version=99 is not allowed"):
        load_trace(path)
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        TraceError,
        match=r"meta\.json: scenario='abortion' is not allowed: this fit is for scenario 'misinformation'",
    ):
        load_trace(path, scenario="misinformation")
    _corrupt(path, "reactions", lambda c: c.pop("toxicity"))
    with pytest.raises(TraceError, match=r"reactions\.parquet: column 'toxicity' is missing"):
        load_trace(path)
    path, _ = _record(tmp_path / "b", episodes=1)

    def nan(c: dict) -> None:
        c["similarity"] = c["similarity"].copy()
        c["similarity"][3] = np.nan

    _corrupt(path, "impressions", nan)
    with pytest.raises(
        TraceError, match=r"impressions\.parquet: column 'similarity' holds nan at row 3"
    ):
        load_trace(path)
    path, _ = _record(tmp_path / "c", episodes=1)
    _corrupt(path, "edges", lambda c: c.__setitem__("src", c["src"] + 10_000))
    with pytest.raises(TraceError, match=r"edges\.parquet: column 'src' holds a user id outside"):
        load_trace(path)
    with pytest.raises(TraceError, match="no meta.json"):
        load_trace(tmp_path / "nowhere")


def test_an_opinion_dynamics_population_writes_the_same_trace(tmp_path: Path) -> None:
    from socialenv.fitting.likelihood import fit_trace

    path, _ = _record(tmp_path, episodes=1, users="bounded_confidence", rounds=4)
    trace = load_trace(path)
    assert trace.meta["brain"] == "OpinionDynamicsBrain" and "surrogate" not in trace.meta
    result = fit_trace(trace, blocks=("opinion",))
    # the ABM's opinion update is not the surrogate's: the fit says so instead of hiding it
    assert any("not the surrogate's" in finding for finding in result.findings)
    assert result.estimates["assimilation_rate"].status != "deterministic"


# ---------------------------------------------------------------------- recovery
@pytest.fixture(scope="module")
def synthetic() -> tuple[SurrogateConfig, object]:
    from socialenv.fitting.ground_truth import random_surrogate, synthetic_trace

    config = random_surrogate(np.random.default_rng(1003))
    return config, synthetic_trace(config, 300, 10, seed=3, env_kwargs={"candidate_users": 30})


def test_fit_recovers_known_parameters(synthetic) -> None:
    from socialenv.fitting.likelihood import fit_trace

    config, trace = synthetic
    truth = asdict(config)
    result = fit_trace(trace)
    by_status: dict[str, list[str]] = {}
    for name, est in result.estimates.items():
        by_status.setdefault(est.status, []).append(name)
        if est.status == "fitted":
            assert est.se is not None and est.se > 0, name
            assert abs(est.value - truth[name]) <= 4.5 * est.se, (
                name,
                est.value,
                truth[name],
                est.se,
            )
        elif est.status == "deterministic":
            assert abs(est.value - truth[name]) < 1e-3, (name, est.value, truth[name])
        elif est.status in ("interval", "boundary"):
            lo, hi = est.interval
            assert lo - 1e-9 <= truth[name] <= hi + 1e-9, (name, est.interval, truth[name])
    from socialenv.fitting.likelihood import REACTION_PARAMS

    always = {
        *REACTION_PARAMS,
        "post_rate",
        "stance_noise",
        "reply_toxicity_base",
        "reply_toxicity_gap",
        "civility_threshold",
        "post_toxicity_scale",
        "follow_prob",
        "unfollow_prob",
    }
    assert always <= set(by_status["fitted"])
    assert set(by_status["not identified"]) >= {"post_noise", "news_sensitivity", "news_decay"}
    assert {"assimilation_rate", "anchor_rate", "reinforcement_rate"} <= set(
        by_status["deterministic"]
    )


def test_confounded_attention_is_reported_not_fitted(tmp_path: Path) -> None:
    from socialenv.fitting.ground_truth import synthetic_trace
    from socialenv.fitting.likelihood import fit_trace

    # 300 users, 320 candidate users: the policy fills every recommended slot
    trace = synthetic_trace(SurrogateConfig(), 300, 3, seed=0, env_kwargs={"candidate_users": 320})
    result = fit_trace(trace, blocks=("reactions",))
    assert result.estimates["promoted_attention"].status == "not identified"
    assert (
        "only recommended_attention + promoted_attention"
        in result.estimates["promoted_attention"].note
    )


# ---------------------------------------------------------------------- fitted files
def test_fitted_file_loads_in_gym_make_and_bad_files_name_the_field(
    tmp_path: Path, synthetic
) -> None:
    from socialenv.fitting.likelihood import fit_trace

    _, trace = synthetic
    result = fit_trace(trace, blocks=("reactions", "posting"))
    path = result.write(tmp_path / "fitted.json")
    data = json.loads(path.read_text())
    assert data["provenance"]["trace_meta"]["num_users"] == 300
    assert data["parameters"]["like_bias"]["se"] > 0
    env = gym.make(REC, **small_rec(), surrogate=str(path))
    assert env.unwrapped.brain.config.like_bias == pytest.approx(
        result.estimates["like_bias"].value
    )
    assert env.unwrapped.brain.config.post_rate == pytest.approx(
        result.estimates["post_rate"].value
    )
    env.close()
    bad = dict(data, parameters={**data["parameters"], "like_bias": {"value": "high"}})
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(
        ValueError, match=r"bad\.json: field 'parameters\.like_bias\.value'='high' is not allowed"
    ):
        gym.make(REC, **small_rec(), surrogate=str(tmp_path / "bad.json"))
    bad = dict(data, parameters={**data["parameters"], "charisma": {"value": 1.0}})
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad\.json: field 'parameters\.charisma' is not allowed"):
        gym.make(REC, **small_rec(), surrogate=str(tmp_path / "bad.json"))
    bad = dict(data, parameters={**data["parameters"], "post_rate": {"value": 3.0}})
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad\.json: surrogate\.post_rate=3\.0 is not allowed"):
        gym.make(REC, **small_rec(), surrogate=str(tmp_path / "bad.json"))
    (tmp_path / "bad.json").write_text(json.dumps(dict(data, version=7)))
    with pytest.raises(ValueError, match=r"bad\.json: field 'version'=7 is not allowed"):
        gym.make(REC, **small_rec(), surrogate=str(tmp_path / "bad.json"))


def test_held_out_validation_prefers_the_fitted_model_over_the_null(synthetic) -> None:
    from socialenv.fitting.held_out import held_out

    _, trace = synthetic
    report = held_out(trace, seed=0)
    for split in ("users", "rounds"):
        entry = report[split]
        assert entry["decisions"] > 1000
        assert entry["fitted"]["ll_per_action"] > entry["null"]["ll_per_action"]
        # the trace's parameters are far from the defaults: the fitted model wins held out
        assert entry["fitted"]["ll_per_action"] > entry["default"]["ll_per_action"]
        assert 0 <= entry["fitted"]["action_mix_jsd_bits"] < entry["default"]["action_mix_jsd_bits"]


def test_cli_run_trace_then_fit(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from policysim.cli import app

    runner = CliRunner()
    trace = tmp_path / "cli.trace"
    result = runner.invoke(
        app,
        [
            "run",
            "--policy",
            "random",
            "--num-users",
            "150",
            "--rounds",
            "3",
            "--out",
            str(tmp_path / "runs"),
            "--no-plots",
            "--trace",
            str(trace),
            "--env-kwargs",
            json.dumps({"candidate_users": 20, "budget": 2}),
        ],
    )
    assert result.exit_code == 0, result.output
    assert load_trace(trace).meta["policy"] == "random"
    out = tmp_path / "fitted.json"
    result = runner.invoke(app, ["fit", str(trace), "--out", str(out), "--sim-seeds", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["format"] == "policysim-surrogate-fit"
    assert {"users", "rounds"} <= set(data["blocks"]["validation"]["held_out"])
    assert Path(data["blocks"]["validation"]["macro"]["png"]).stat().st_size > 0
    result = runner.invoke(
        app,
        [
            "run",
            "--policy",
            "origin",
            "--num-users",
            "150",
            "--rounds",
            "2",
            "--out",
            str(tmp_path / "runs"),
            "--no-plots",
            "--surrogate",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app, ["fit", str(trace), "--out", str(out), "--scenario", "misinformation"]
    )
    assert result.exit_code == 2 and "scenario='abortion' is not allowed" in result.output


@pytest.mark.slow  # loads the MiniLM encoder the LLM brain embeds texts with
def test_llm_population_writes_the_trace_through_the_env_hook() -> None:
    from agent_models.llm import LLMBrain, LLMConfig, TextEncoder
    from socialenv.fitting.likelihood import fit_trace
    from tests.support import ScriptedBackend

    cfg = LLMConfig(model="scripted", toxicity=lambda texts: np.zeros(len(texts)))

    def answer(i: int, messages: list, schema: dict | None) -> str:
        """A valid answer to each kind of request (decision, stance, summary, memory)."""
        wanted = set((schema or {}).get("properties", {}))
        if "stance" in wanted:
            return '{"stance":"neutral"}'
        if "summary" in wanted:
            return '{"summary":"A post about the topic"}'
        if "memory" in wanted:
            return '{"memory":"Posts about the topic"}'
        return (
            '{"actions":[{"type":"post","text":"I have a view."}]}' if i % 2 else '{"actions":[]}'
        )

    backend = ScriptedBackend(answer)
    brain = LLMBrain(cfg, backend=backend, encoder=TextEncoder(cfg.resolved_encoder()))
    env = gym.make(REC, **small_rec(num_users=20, rounds=2, candidate_users=4), users=brain)
    recorder = env.unwrapped.trace()
    play_episode(env, make_run_policy("random", env.unwrapped, 0), seed=0)
    trace = recorder.trace(env.unwrapped.trace_meta())
    env.close()
    assert trace.meta["brain"] == "LLMBrain"
    assert trace.rows("posts") > 0 and trace.rows("impressions") > 0
    result = fit_trace(trace, blocks=("posting",))
    assert result.estimates["post_rate"].status == "fitted"


def test_a_resumed_run_warns_that_it_writes_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace covers a run played from its start; a resumed run says it writes none (and the
    trace folder named in its config.json is never written by the resume)."""
    import policysim.runner as runner_module
    from policysim.runner import RunConfig, resume, run

    real, calls = runner_module._write_run_checkpoint, []

    def fail_at_round_2(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "_write_run_checkpoint", fail_at_round_2)
    trace = tmp_path / "run.trace"
    config = RunConfig(
        env_kwargs={"num_users": 120, "rounds": 3},
        out_dir=str(tmp_path),
        run_name="t",
        plots=False,
        progress=False,
        origin_reference=False,
        trace=str(trace),
    )
    with pytest.raises(OSError):
        run(config)
    monkeypatch.setattr(runner_module, "_write_run_checkpoint", real)
    with pytest.warns(RuntimeWarning, match="a resumed run writes no behaviour trace"):
        resume(tmp_path / "t")
    assert not trace.exists()
