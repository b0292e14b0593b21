"""The LLM paths of the loaders (profile extraction, stance) through the backend interface,
with a scripted backend, and with the real hf backend on the tiny model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agent_models.llm.backends.base import Messages
from agent_models.profile import LLMProfiler, UserRecord
from socialenv.scenarios.loaders import LoaderConfig, read_twibot20
from tests.support import HASH_LOADER, TWIBOT, ScriptedBackend


def _answer(index: int, prompt: Messages, schema: dict | None) -> str:
    system, user = prompt[0]["content"], prompt[-1]["content"]
    if "where the user stands" in system:
        return json.dumps(
            {"stance": "against" if "STOLEN" in user or "disgrace" in user else "favor"}
        )
    if "Screen name: cal_ref" in user:
        return "not json at all"
    return json.dumps(
        {
            "likely_identity": "pundit",
            "interested_areas": ["politics", "economy"],
            "posting_style": "punchy one-liners",
        }
    )


def test_llm_profile_and_stance_are_batched():
    backend = ScriptedBackend(_answer)
    d = read_twibot20(TWIBOT, config=HASH_LOADER, backend=backend)
    s = d.scenario
    # one call for all profiles, one for all history posts' stances
    assert [n for n, _ in backend.calls] == [8, 34]
    assert all(
        sch is not None and "likely_identity" in sch["properties"] for sch in backend.calls[0][1]
    )
    assert all(sch is not None and "stance" in sch["properties"] for sch in backend.calls[1][1])
    row = {uid: i for i, uid in enumerate(d.user_ids)}
    p = s.profiles
    assert (
        p.identity[row["1001"]] == "pundit" and p.posting_style[row["1001"]] == "punchy one-liners"
    )
    assert p.interests[row["1001"]].sum() == 2
    # the unparseable answer falls back to the heuristic profile
    assert p.identity[row["1005"]] == "ordinary user"
    # roles never come from the model
    assert p.interaction_role[row["1003"]] == "amplifier"
    stolen = [i for i, t in enumerate(s.history_text) if "STOLEN" in t]
    assert s.history_stance[stolen].tolist() == [-1.0]
    assert (
        s.history_stance[
            [i for i, t in enumerate(s.history_text) if "STOLEN" not in t and "disgrace" not in t]
        ]
        == 1
    ).all()


def test_profiler_counts_failures():
    profiler = LLMProfiler(ScriptedBackend(lambda i, p, schema: '{"likely_identity": 3}'))
    out = profiler.extract([UserRecord("x", "journalist at a paper", ["hello #vote"])])
    assert profiler.failures == 1 and out[0].identity == "journalist"


@pytest.mark.slow
def test_loader_with_tiny_hf_backend(tiny_lm_path):
    from agent_models.llm.backends import make_backend

    backend = make_backend({"backend": "hf", "model": str(tiny_lm_path), "device": "cpu"})
    d = read_twibot20(
        TWIBOT,
        backend=backend,
        config=LoaderConfig(encoder="hash", max_users=3, max_history_per_user=2),
    )
    s = d.scenario
    s.validate()
    assert s.num_users == 3 and set(np.unique(s.history_stance)) <= {-1.0, 0.0, 1.0}
    assert all(isinstance(v, str) and v for v in s.profiles.identity.vocab)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
