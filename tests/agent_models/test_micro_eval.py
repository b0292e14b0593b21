"""Micro-level evaluation: BERTScore, BertSim, behaviour and self-consistency accuracy, the
LLM judge, the table and the JSON, and ``policysim eval micro`` on the tiny model."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import numpy as np
import pytest

from agent_models.evaluation import (
    MicroEvalConfig,
    MicroResult,
    bertscore,
    bertscore_builtin,
    evaluate_micro,
    print_micro_table,
)
from agent_models.llm.backends.base import Backend, Generation, Messages, Sampling, Schemas
from agent_models.training.data import build_examples, save_records
from socialenv.scenarios.loaders import LoaderConfig, read_twibot20
from tests.support import FIXTURES


@pytest.fixture(scope="module")
def examples():
    d = read_twibot20(FIXTURES / "twibot20" / "sample.json", config=LoaderConfig(encoder="hash"))
    s = d.scenario
    exs = build_examples(
        d.actions, s.profiles, s.topic, follow_src=s.follow_src, follow_dst=s.follow_dst
    )
    # a few of each behaviour, several users
    return [ex for ex in exs if ex.behaviour == "post"][:6] + [
        ex for ex in exs if ex.behaviour != "post"
    ][:4]


class Oracle(Backend):
    """Answers like the real users: the observed answer for agent prompts, the user's own post
    for self-consistency questions, fixed scores for the judge."""

    name = "oracle"

    def __init__(self, examples) -> None:
        self.answers = {ex.prompt[1]["content"]: ex.response for ex in examples}
        self.own: dict[str, set[str]] = {}
        for ex in examples:
            if ex.text:
                self.own.setdefault(ex.name, set()).add(ex.text)

    def _answer(self, prompt: Messages) -> str:
        user = prompt[-1]["content"]
        if user in self.answers:
            return self.answers[user]
        if "Which post did you write?" in user:
            name = re.search(r"You are @(\S+)\.", user).group(1)
            for line in user.splitlines():
                m = re.match(r"(\d+)\. (.*)", line)
                if m and m.group(2) in self.own.get(name, set()):
                    return json.dumps({"choice": int(m.group(1))})
            return json.dumps({"choice": 1})
        if "Rate engagement" in user:
            return json.dumps({"engagement": 3, "robustness": 4, "suitability": 80})
        raise AssertionError(f"unexpected prompt: {user[:80]}")

    def generate(
        self, prompts: Sequence[Messages], schemas: Schemas = None, sampling: Sampling | None = None
    ) -> Generation:
        texts = [self._answer(p) for p in prompts]
        n = len(texts)
        return Generation(texts, np.zeros(n, np.int64), np.zeros(n, np.int64), ["stop"] * n)


class Silent(Oracle):
    def _answer(self, prompt: Messages) -> str:
        return '{"actions":[]}' if "What do you do" in prompt[-1]["content"] else "garbage"


def test_builtin_bertscore_matches_package():
    pytest.importorskip("bert_score")
    cands = ["the cat sat on the mat", "Vote on Tuesday!", "我爱北京", "x"]
    refs = [
        "a cat was sitting on the mat",
        "Don't forget to vote this week",
        "北京天气",
        "hello there",
    ]
    ours = bertscore_builtin(cands, refs)
    theirs = bertscore(cands, refs, impl="bert_score")
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)
    same = bertscore_builtin(["Vote on Tuesday!"], ["Vote on Tuesday!"])[2]
    assert same[0] == pytest.approx(1.0, abs=1e-4)


def test_oracle_scores_perfectly(examples, tmp_path):
    backend = Oracle(examples)
    result = evaluate_micro(
        examples,
        backend,
        judge_backend=backend,
        config=MicroEvalConfig(encoder="hash", candidates=3),
        label="oracle",
    )
    summary = result.summary()
    assert summary["behaviour_accuracy"]["mean"] == 1.0 and summary["behaviour_accuracy"]["n"] == 10
    assert summary["bertscore_f1"]["mean"] == pytest.approx(1.0, abs=1e-3)
    assert summary["bertsim"]["mean"] == pytest.approx(1.0, abs=1e-5)
    assert (
        summary["bertsim"]["n"]
        == result.counts["text_pairs"]
        == result.counts["observed_with_text"]
    )
    assert summary["self_consistency"]["mean"] == 1.0
    assert result.counts["self_consistency_questions"] == summary["self_consistency"]["n"] > 0
    assert (
        summary["engagement"]["mean"],
        summary["robustness"]["mean"],
        summary["suitability"]["mean"],
    ) == (3, 4, 80)
    assert result.counts["invalid_answers"] == 0

    silent = evaluate_micro(
        examples,
        Silent(examples),
        config=MicroEvalConfig(encoder="hash", candidates=3),
        label="silent",
    )
    s2 = silent.summary()
    assert s2["behaviour_accuracy"]["mean"] == 0.0 and s2["bertsim"]["n"] == 0
    assert s2["self_consistency"]["mean"] == 0.0 and silent.counts["self_consistency_failures"] > 0
    assert s2["engagement"]["n"] == 0  # no judge given

    text = print_micro_table([result, silent])
    assert "BERTScore F1" in text and "Suitability (0-100)" in text
    assert "100.00 ±0.00" in text and "3.00 ±0.00" in text and "n/a" in text
    path = result.save(tmp_path / "r.json")
    back = MicroResult.load(path)
    assert back.summary() == summary and back.label == "oracle"
    assert json.loads(path.read_text())["summary"]["suitability"]["mean"] == 80


def test_config_errors():
    with pytest.raises(ValueError, match="bertscore_impl"):
        MicroEvalConfig(bertscore_impl="fast")
    with pytest.raises(ValueError, match="candidates"):
        MicroEvalConfig(candidates=1)
    with pytest.raises(ValueError, match="no examples"):
        evaluate_micro([], Oracle([]))


def test_eval_cli_on_tiny_model(tiny_lm_path, examples, tmp_path):
    from typer.testing import CliRunner

    from policysim.evaluate_cli import eval_app

    data = save_records([e.to_record() for e in examples[4:8]], tmp_path / "test.jsonl")
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(
        eval_app,
        [
            "micro",
            "--data",
            str(data),
            "--model",
            str(tiny_lm_path),
            "--judge-model",
            str(tiny_lm_path),
            "--out",
            str(out),
            "--max-new-tokens",
            "24",
            "--encoder",
            "hash",
            "--device",
            "cpu",
            "--label",
            "tiny",
            "--candidates",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "Micro-level evaluation" in result.output and "tiny" in result.output
    saved = json.loads(out.read_text())
    assert saved["label"] == "tiny" and saved["counts"]["examples"] == 4
    assert saved["summary"]["behaviour_accuracy"]["n"] == 4
    # constrained judge answers always parse
    assert saved["counts"]["judge_failures"] == 0 and saved["summary"]["engagement"]["n"] == 4
