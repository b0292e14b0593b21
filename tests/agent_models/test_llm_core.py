"""LLM agents without a model: config, answer schema and validation, prompts, memory, signals,
backend request building (vLLM / OpenAI kwargs are pure functions shared with the GPU path)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from pydantic import ValidationError

from agent_models.llm import (
    INVALID_REASONS,
    FeedView,
    LLMConfig,
    MemoryStore,
    ParsedAnswer,
    Sampling,
    agent_messages,
    answer_json,
    answer_schema,
    feed_line,
    make_toxicity,
    misinformation_update,
    parse_answer,
    parse_stance,
)
from agent_models.llm.backends import schema_list
from agent_models.llm.backends.openai_compat import request_kwargs
from agent_models.llm.backends.vllm_backend import engine_kwargs, sampling_kwargs, token_ids
from agent_models.llm.schema import is_placeholder
from agent_models.types import Behaviour

ALL = ("post", "retweet", "reply", "like", "dislike", "follow", "unfollow")


def test_importing_agent_models_is_light() -> None:
    code = (
        "import sys, agent_models, agent_models.llm, agent_models.testing, agent_models.factory;"
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'openai', 'sentence_transformers',"
        " 'llguidance', 'profanity_check') if m in sys.modules]; print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"backend": "tgi", "model": "m"}, "backend"),
        ({"model": "m", "temprature": 0.1}, "temprature"),
        ({"backend": "openai", "model": "m"}, "base_url"),
        ({"backend": "openai", "model": "m", "base_url": "localhost:8000"}, "base_url"),
        ({"model": "m", "memory": {"decay": -1}}, "memory.decay"),
        ({"model": "m", "memory": {"topk": 3}}, "memory.topk"),
        ({"model": "m", "behaviours": ["jump"]}, "behaviours"),
        ({"model": "m", "device": "tpu"}, "device"),
        ({"model": "m", "top_p": 0}, "top_p"),
        ({"model": "  "}, "model"),
        ({}, "model"),
    ],
)
def test_config_errors_name_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ValidationError) as err:
        LLMConfig.model_validate(fields)
    assert named in str(err.value)


def test_config_defaults_follow_the_paper() -> None:
    cfg = LLMConfig(model="m", backend="openai", base_url="http://127.0.0.1:1/v1")
    assert cfg.base_url == ["http://127.0.0.1:1/v1"]
    assert (cfg.memory.length_threshold, cfg.memory.decay, cfg.memory.top_k) == (80, 0.1, 5)
    assert cfg.constrained and cfg.behaviours == ALL
    assert cfg.resolved_api_key()
    assert cfg.resolved_encoder()  # the shipped MiniLM path


# ----------------------------------------------------------------------------- answers
VIEW = FeedView(user=1, post_ids=[10, 11, 12], post_authors=[2, 3, 2], followed=[True, False, True])


def parse(text: str, **kw: object) -> ParsedAnswer | str:
    args = {"max_actions": 4, "max_text_chars": 50, "behaviours": ALL} | kw
    return parse_answer(text, VIEW, **args)  # type: ignore[arg-type]


def test_parse_valid_answer() -> None:
    ans = parse(
        json.dumps(
            {
                "actions": [
                    {"type": "like", "post_id": 10},
                    {"type": "reply", "post_id": 11, "text": "x" * 80},
                    {"type": "post", "text": "hello"},
                    {"type": "follow", "user_id": 3},
                ]
            }
        )
    )
    assert isinstance(ans, ParsedAnswer)
    assert ans.posts == ["hello"] and ans.follows == [3]
    assert ans.reactions == [(int(Behaviour.LIKE), 10, None), (int(Behaviour.REPLY), 11, "x" * 50)]
    assert parse('{"actions": []}').num_actions == 0  # type: ignore[union-attr]
    # prose around the object (unconstrained servers) is tolerated; duplicates are merged
    dup = parse('Sure! {"actions":[{"type":"like","post_id":12},{"type":"like","post_id":12}]}')
    assert isinstance(dup, ParsedAnswer) and len(dup.reactions) == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "malformed_json"),
        ('{"actions": [', "malformed_json"),
        ('{"acts": []}', "schema"),
        ('{"actions": [{"type": "jump"}]}', "schema"),
        ('{"actions": [{"type": "post", "text": ""}]}', "schema"),
        ('{"actions": [{"type": "like", "post_id": 10, "extra": 1}]}', "schema"),
        ('{"actions": [{"type": "like", "post_id": 99}]}', "unknown_post"),
        ('{"actions": [{"type": "follow", "user_id": 7}]}', "unknown_user"),
        ('{"actions": [{"type": "follow", "user_id": 2}]}', "impossible_action"),
        ('{"actions": [{"type": "unfollow", "user_id": 3}]}', "impossible_action"),
        (
            '{"actions": [{"type": "like", "post_id": 10}, {"type": "dislike", "post_id": 10}]}',
            "impossible_action",
        ),
        (
            '{"actions": [' + ",".join(f'{{"type":"post","text":"a{i}"}}' for i in range(5)) + "]}",
            "too_many_actions",
        ),
        ('{"actions": [{"type": "post", "text": "<your post>"}]}', "placeholder_text"),
        ('{"actions": [{"type": "reply", "post_id": 10, "text": "..."}]}', "placeholder_text"),
        ('{"actions": [{"type": "post", "text": "Text"}]}', "placeholder_text"),
    ],
)
def test_parse_rejects_with_reason(text: str, reason: str) -> None:
    assert parse(text) == reason
    assert reason in INVALID_REASONS


def test_placeholders_are_not_content() -> None:
    for text in [
        "...",
        "…",
        " . . ",
        "<your reply>",
        "<one sentence>",
        "summary",
        "Your post.",
        "",
        "-",
        None,
    ]:
        assert is_placeholder(text), text
    for text in ["No.", "ok", "Vote on Tuesday!", "<3 this", "I disagree <strongly>", "1984"]:
        assert not is_placeholder(text), text


def test_parse_truncated_and_disallowed_behaviour() -> None:
    assert parse('{"actions": [{"type":', truncated=True) == "truncated"
    assert (
        parse('{"actions": [{"type": "post", "text": "hi"}]}', behaviours=("like",))
        == "impossible_action"
    )


def test_answer_schema_per_agent_and_shared() -> None:
    per_agent = answer_schema(
        behaviours=ALL,
        max_actions=3,
        max_text_chars=40,
        post_ids=[10, 11],
        follow_ids=[3],
        unfollow_ids=[],
    )
    items = per_agent["properties"]["actions"]["items"]["anyOf"]
    kinds = [v["properties"]["type"]["const"] for v in items]
    assert kinds == ["post", "retweet", "reply", "like", "dislike", "follow"]  # no unfollow target
    assert items[3]["properties"]["post_id"]["enum"] == [10, 11]
    assert per_agent["properties"]["actions"]["maxItems"] == 3
    assert all(
        v["additionalProperties"] is False and set(v["required"]) == set(v["properties"])
        for v in items
    )
    shared = answer_schema(
        behaviours=ALL,
        max_actions=2,
        max_text_chars=40,
        post_ids=(0, 99),
        follow_ids=(0, 9),
        unfollow_ids=(0, 9),
    )
    like = shared["properties"]["actions"]["items"]["anyOf"][3]["properties"]["post_id"]
    assert like == {"type": "integer", "minimum": 0, "maximum": 99}
    empty = answer_schema(behaviours=("like",), max_actions=2, max_text_chars=40, post_ids=[])
    assert empty["properties"]["actions"]["maxItems"] == 0
    assert (
        answer_json([{"type": "like", "post_id": 3}]) == '{"actions":[{"type":"like","post_id":3}]}'
    )


def test_parse_stance() -> None:
    assert parse_stance('{"stance":"favor"}') == 1
    assert parse_stance('{"stance": "against"}') == -1
    assert parse_stance('{"stance":"neutral"}') == 0
    assert parse_stance('{"stance":"maybe"}') is None
    assert parse_stance("garbage") is None


# ----------------------------------------------------------------------------- prompts
def test_prompt_shares_its_prefix_and_names_ids() -> None:
    persona = {
        "likely_identity": "nurse",
        "interested_areas": "health",
        "posting_style": "calm",
        "interaction_behaviour": "lurker",
    }
    a = agent_messages(
        "topic T",
        "user_1",
        persona,
        ["(round 0) m"],
        [feed_line(12, 4, "user_4", "Vote today!", followed=True, likes=3)],
        ["News A"],
        2,
    )
    b = agent_messages("topic T", "user_9", persona, [], [], ["News A"], 2)
    assert a[0] == b[0]  # the system message (shared part) is identical for all agents
    assert a[0]["role"] == "system" and "topic T" in a[0]["content"] and "News A" in a[0]["content"]
    user = a[1]["content"]
    assert "[12] @user_4 (id 4, you follow)" in user and "(3 likes)" in user
    assert "nurse" in user and "(round 0) m" in user
    line = feed_line(5, 2, "user_2", "x" * 500, kind=2, parent=3, text_chars=20)
    assert "reply to [3]" in line and line.endswith("…")


# ----------------------------------------------------------------------------- memory
def test_memory_retrieval_similarity_times_decay() -> None:
    store = MemoryStore(dim=2)
    e = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], np.float32)
    rows = store.add_texts(["old match", "recent other", "recent match", "u2"], e)
    store.add_entries(np.array([0, 0, 0, 2]), np.array([0, 9, 9, 9]), 0, rows)
    q = np.array([[1, 0], [1, 0]], np.float32)
    got = store.retrieve(np.array([0, 2]), q, now=10, top_k=2, decay=0.1, long_term_decay=0.0)
    assert got[0] == ["(round 9) recent match", "(round 9) recent other"]
    assert got[1] == ["(round 9) u2"]
    # with a strong decay the old perfect match loses to a recent orthogonal memory
    assert store.retrieve(np.array([0]), q[:1], 10, 3, 1.0, 0.0)[0][-1] == "(round 0) old match"


def test_memory_consolidation_and_state_roundtrip() -> None:
    store = MemoryStore(dim=2)
    rows = store.add_texts([f"m{i}" for i in range(10)], np.tile(np.float32([1, 0]), (10, 1)))
    store.add_entries(np.array([0] * 7 + [1] * 3), np.arange(10), 0, rows, source=np.arange(10))
    assert store.has_read(np.array([0, 1, 1]), np.array([3, 3, 9])).tolist() == [True, False, True]
    users, groups = store.sample_consolidation(capacity=5, size=4, rng=np.random.default_rng(0))
    assert users.tolist() == [0] and len(groups[0]) == 4 and (store.user[groups[0]] == 0).all()
    new = store.add_texts(["long"], np.float32([[0, 1]]))
    store.consolidate(users, groups, new, now=11, long_term_capacity=1)
    assert (store.user == 0).sum() == 4 and ((store.user == 0) & (store.kind == 1)).sum() == 1
    copy = MemoryStore.from_state_dict(store.state_dict())
    q = np.float32([[0, 1], [1, 0]])
    assert copy.retrieve(np.array([0, 1]), q, 12, 5, 0.1, 0.02) == store.retrieve(
        np.array([0, 1]), q, 12, 5, 0.1, 0.02
    )
    assert copy.post_row == store.post_row


# ----------------------------------------------------------------------------- signals
def test_toxicity_default_and_pluggable() -> None:
    scores = make_toxicity("profanity_check")(["you are a stupid idiot", "have a lovely day"])
    assert scores.shape == (2,) and scores[0] > 0.5 > scores[1]
    assert make_toxicity(lambda texts: [2.0] * len(texts))(["a"]).tolist() == [1.0]
    assert make_toxicity("numpy:zeros_like")([]).shape == (0,)
    with pytest.raises(ValueError, match="returned 1 scores for 2 texts"):
        make_toxicity(lambda texts: [0.1])(["a", "b"])


def test_misinformation_rule() -> None:
    misinfo_post = np.array([True, False, True])
    newly = misinformation_update(
        react_user=np.array([0, 1, 2, 3]),
        react_post=np.array([0, 0, 1, 2]),
        react_kind=np.array(
            [Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.RETWEET], np.int8
        ),
        post_misinfo=misinfo_post,
        text_user=np.array([4, 5]),
        text_similarity=np.array([0.9, 0.1]),
        threshold=0.6,
        misinformed=np.array([False, False, False, True, False, False, False]),
        agreed_user=np.array([6]),
    )
    # 0 liked a misinfo post, 4 restated it, 6 agreed in a reply; 1 disliked it, 2 retweeted a
    # clean post, 3 already was
    assert newly.tolist() == [0, 4, 6]


# ----------------------------------------------------------------------------- backend kwargs
def test_backend_request_building() -> None:
    sampling = Sampling(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=64, seed=5)
    schema = {"type": "object"}
    kw = request_kwargs("m", [{"role": "user", "content": "hi"}], schema, sampling, 3)
    assert kw["seed"] == 8 and kw["max_tokens"] == 64 and kw["top_p"] == 0.9
    assert kw["response_format"]["json_schema"]["schema"] is schema
    assert kw["extra_body"] == {"top_k": 20}
    assert "response_format" not in request_kwargs("m", [], None, Sampling(), 0)
    obj = request_kwargs("m", [], schema, sampling, 0, form="json_object")
    assert obj["response_format"] == {"type": "json_object", "schema": schema}
    gram = request_kwargs("m", [], schema, sampling, 0, form="grammar", grammar='root ::= "{}"')
    assert "response_format" not in gram and gram["extra_body"]["grammar"] == 'root ::= "{}"'
    none = request_kwargs("m", [], schema, sampling, 0, form="none")
    assert "response_format" not in none and "grammar" not in none["extra_body"]
    with pytest.raises(ValueError, match="form"):
        request_kwargs("m", [], schema, sampling, 0, form="regex")
    v = sampling_kwargs(sampling, 2)
    assert v == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "max_tokens": 64,
        "repetition_penalty": 1.0,
        "seed": 7,
    }
    cfg = LLMConfig(
        model="/m",
        backend="vllm",
        lora_path="/a",
        tensor_parallel_size=2,
        vllm_engine_kwargs={"enforce_eager": True},
    )
    e = engine_kwargs(cfg)
    assert e["enable_lora"] and e["max_lora_rank"] == 64 and e["tensor_parallel_size"] == 2
    assert e["structured_outputs_config"] == {"backend": "guidance"} and e["enforce_eager"]
    for rank in (1, 8, 320, 512):
        assert LLMConfig(model="/m", max_lora_rank=rank).max_lora_rank == rank
    for rank in (2, 4, 48, 1024):
        with pytest.raises(ValueError, match=r"max_lora_rank: .*vLLM accepts \[1, 8, 16"):
            LLMConfig(model="/m", max_lora_rank=rank)
    assert schema_list(schema, 2) == [schema, schema] and schema_list(None, 1) == [None]
    with pytest.raises(ValueError, match="2 schemas for 3 prompts"):
        schema_list([schema, None], 3)


def test_vllm_token_count_on_transformers_5_batch_encoding(tiny_lm_path) -> None:
    """``apply_chat_template(tokenize=True)`` returns a BatchEncoding on transformers 5;
    vLLM's ``count_tokens`` reads its ids (``len()`` of it would be its 2 keys)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_lm_path))
    messages = [
        {"role": "system", "content": "Rules. " * 30},
        {"role": "user", "content": "hi there"},
    ]
    encoded = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert token_ids(encoded) == expected and len(expected) > 30
    assert token_ids(expected) == expected  # a plain list (transformers 4) passes through


# ----------------------------------------------------------------------------- re-ask
class ScriptedBackend:
    """Answers agent prompts with ``first`` (a function of the feed's first post id) and
    re-asks (prompts with an assistant turn) with a like of that post; records the calls."""

    name = "scripted"
    system_role = True

    def __init__(self, first) -> None:
        self.first = first
        self.calls: list[list] = []

    def generate(self, prompts, schemas=None, sampling=None):
        import re

        from agent_models.llm.backends.base import Generation

        self.calls.append(list(prompts))
        texts = []
        for p in prompts:
            content = next(m["content"] for m in p if m["role"] == "user")
            if "You are @" not in content:
                texts.append(
                    '{"stance":"neutral"}'
                    if "Recent posts" in content
                    else '{"summary":"A point."}'
                )
                continue
            post = int(re.findall(r"^\[(\d+)\]", content, flags=re.M)[0])
            reask = any(m["role"] == "assistant" for m in p)
            texts.append(
                json.dumps({"actions": [{"type": "like", "post_id": post}]})
                if reask
                else self.first(post)
            )
        n = len(texts)
        return Generation(texts, np.full(n, 10), np.full(n, 5), ["stop"] * n)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("retry", [False, True])
def test_retry_invalid_reasks_once_with_the_error(retry: bool) -> None:
    from agent_models.llm import LLMBrain, TextEncoder
    from agent_models.testing import make_round_input

    cfg = LLMConfig(model="scripted", retry_invalid=retry, toxicity=lambda t: np.zeros(len(t)))
    backend = ScriptedBackend(lambda post: '{"actions":[{"type":"like","post_id":999999}]}')
    brain = LLMBrain(cfg, backend=backend, encoder=TextEncoder(cfg.resolved_encoder()))
    ri = make_round_input(num_users=6, num_posts=20, feed_size=3, seed=2)
    brain.reset(ri.users, ri.posts, seed=0)
    out = brain.act(ri)
    if not retry:
        assert out.invalid.get("unknown_post") == 6 and len(out.react_user) == 0
        assert "reask_prompts" not in out.stats
        return
    assert "unknown_post" not in out.invalid and len(out.react_user) == 6
    assert out.stats["reask_prompts"] == 6 and out.stats["reask_recovered"] == 6
    agent_calls = [c for c in backend.calls if any("You are @" in m["content"] for m in c[0])]
    reasks = agent_calls[1]  # the labeller check (round 0) and the agents' call come first
    assert len(reasks) == 6 and [m["role"] for m in reasks[0]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    assert "not in [brackets]" in reasks[0][-1]["content"]


# ----------------------------------------------------------------------------- BDI module
def test_bdi_answer_schema_prompt_and_parse() -> None:
    from agent_models.llm.prompts import agent_system_prompt
    from agent_models.llm.schema import EMOTIONS

    schema = answer_schema(
        behaviours=ALL,
        max_actions=3,
        max_text_chars=40,
        post_ids=[10],
        follow_ids=[3],
        unfollow_ids=[],
        bdi=True,
        bdi_chars=60,
    )
    assert list(schema["properties"]) == ["emotion", "belief", "desire", "intention", "actions"]
    assert schema["properties"]["emotion"]["enum"] == list(EMOTIONS)
    assert schema["properties"]["belief"]["maxLength"] == 60
    plain = agent_system_prompt("t", behaviours=ALL, max_actions=3, max_text_chars=40)
    module = agent_system_prompt(
        "t", behaviours=ALL, max_actions=3, max_text_chars=40, reasoning="bdi"
    )
    assert '"intention"' in module and '"intention"' not in plain and "\n\n\n" not in plain
    with pytest.raises(ValueError, match="reasoning"):
        agent_system_prompt("t", behaviours=ALL, max_actions=3, max_text_chars=40, reasoning="cot")
    state = {
        "emotion": "angry",
        "belief": "Taxes are theft.",
        "desire": "Lower taxes.",
        "intention": "Call it out.",
    }
    answer = parse(json.dumps({**state, "actions": [{"type": "like", "post_id": 10}]}), bdi=True)
    assert isinstance(answer, ParsedAnswer) and answer.state == state and len(answer.reactions) == 1
    assert parse(json.dumps({"actions": []}), bdi=True) == "schema"  # the state is required
    assert parse(json.dumps({**state, "actions": []})) == "schema"  # and not accepted without bdi
    assert parse(json.dumps({**state, "emotion": "ecstatic", "actions": []}), bdi=True) == "schema"


# ----------------------------------------------------------------------------- stance labeller
class _BiasedScorer:
    """Scores labels like a model that prefers the label listed first by 2 nats and "favor"
    by 4 nats whatever the posts say, plus 1 nat for the label the posts express."""

    name = "biased"
    system_role = True

    def __init__(self) -> None:
        self.prompts: list = []

    def score_labels(self, prompts, labels):
        import re

        self.prompts += list(prompts)
        out = np.zeros((len(prompts), len(labels)))
        for i, p in enumerate(prompts):
            listed = re.search(r"one word: (\w+)", p[0]["content"]).group(1)
            posts = p[-1]["content"]
            said = (
                "against"
                if "wrong" in posts
                else "favor"
                if "proud" in posts
                else ("neutral" if "facts" in posts else None)
            )
            for j, label in enumerate(labels):
                out[i, j] = (
                    2.0 * (label == listed) + 4.0 * (label == "favor") + 1.0 * (label == said)
                )
        return out


def test_stance_labeller_randomises_order_and_calibrates() -> None:
    from agent_models.llm.stance import labeller_check, score_stances

    texts = [
        ["this is wrong and must be stopped"],
        ["proud of this outcome"],
        ["waiting for more facts"],
    ] * 8
    names = [f"u{i}" for i in range(24)]
    raw = score_stances(
        _BiasedScorer(),
        "a long enough topic",
        names,
        texts,
        np.random.default_rng(0),
        text_chars=200,
        calibrate=False,
    )
    scorer = _BiasedScorer()
    calibrated = score_stances(
        scorer,
        "a long enough topic",
        names,
        texts,
        np.random.default_rng(0),
        text_chars=200,
        calibrate=True,
    )
    truth = [-1, 1, 0] * 8
    # without calibration the model's prior for "favor" wins everywhere
    assert raw.value == [1] * 24
    assert calibrated.value == truth  # the content-free input cancels the prior
    assert labeller_check(calibrated.value, truth)["stance_check_agreement"] == 1.0
    firsts = {re.search(r"one word: (\w+)", p[0]["content"]).group(1) for p in scorer.prompts[:24]}
    assert len(firsts) == 3  # the label listed first varies from prompt to prompt
    assert all("N/A" in p[-1]["content"] for p in scorer.prompts[24:])  # calibration prompts
    check = labeller_check([1, 1, None, 0], [-1, 1, 0, 0])
    assert check["stance_check_agreement"] == 0.5 and check["stance_check_unusable"] == 1
    assert (
        check["stance_check_against_as_favor"] == 1
        and check["stance_check_neutral_as_neutral"] == 1
    )


def test_stance_prompt_has_no_double_negative_and_lists_the_given_order() -> None:
    from agent_models.llm.prompts import stance_messages

    msgs = stance_messages(
        "Anti-abortion legislation in the United States",
        "u",
        ["On Anti-abortion legislation in the United States: shameful decision."],
        order=["neutral", "favor", "against"],
        scored=True,
    )
    system = msgs[0]["content"]
    assert "supports" not in system and "opposes" not in system
    assert "Answer with one word: neutral, favor or against." in system
    assert (
        "- Shameful decision." in msgs[1]["content"]
    )  # the topic is named once, in the system message


# ----------------------------------------------------------------------------- own texts
def test_prompt_copy_and_duplicate_checks() -> None:
    from agent_models.llm.text_quality import PromptCopyCheck, RoundTexts

    topic = "Anti-abortion legislation in the United States"
    prompt = (
        f"Topic on the platform: {topic}\nYou are @user_4.\nLikely identity: Student\n"
        "[12] @user_3 (id 3) · trending: This is what we fought for, finally.\n"
        "- (round 1) @user_3: the senate debate has been twisted by the media"
    )
    check = PromptCopyCheck(prompt, 3, 0.5, 6, topic)
    copies = [
        "Likely identity: Student",
        "@user_3: I agree",
        "1. You posted. 2. You followed. 3. You followed.",
        "The last one! This is what we fought for, finally.",  # a 6-word run of a feed post
        "the senate debate has been twisted by the media",  # whole, from memory
        "(round 1) whatever",
    ]
    assert [check.problem(t) for t in copies] == ["copied_prompt"] * len(copies)
    assert check.problem("this is wrong and must be stopped.'}]}{") == "json_debris"
    assert check.problem('{"type":"post","text":"hi"}') == "json_debris"
    # naming the topic, or an opinion in one's own words, is not a copy
    assert check.problem(f"{topic} will hurt women in my town, I am worried") is None
    assert check.problem("Honestly I did not expect the court to move this fast.") is None
    texts = RoundTexts(0.8)
    texts.add(["The vote today matters for all of us!"], author=1)
    assert texts.duplicate("the vote today   matters for all of us!", author=2)  # exact, folded
    assert texts.duplicate("The vote today matters for all of us!!", author=3)  # near
    assert not texts.duplicate("The vote today matters for all of us!", author=1)  # its own
    assert not texts.duplicate("A completely different take on the news.", author=2)


class _TextBackend:
    """Agent i posts ``TEXTS[i % len(TEXTS)]``; a re-ask (an assistant turn) posts a fresh,
    agent-specific text; everything else gets a neutral stance / a short summary."""

    name = "texts"
    system_role = True
    TEXTS = (
        "Likely identity: {identity}",
        "So proud of my team today.'}]}{",
        "Same words from everyone here",
        "Same words from everyone here",
        None,
    )
    OWN = (
        "My own take: we need more facts before we judge.",
        "Court rulings like this one change lives in my town.",
    )
    FRESH = (
        "Rain again, my garden is happy.",
        "Anyone watching the match tonight?",
        "Coffee first, opinions later.",
        "New bike lanes downtown look great.",
        "My cat ignored me all morning.",
        "Reading a good book about old maps.",
        "The bakery on 5th closed, so sad.",
        "Voting day should be a holiday.",
        "Just finished a long shift at the clinic.",
        "Taxes are due soon, do not forget.",
    )

    def __init__(self) -> None:
        self.reasks: list[str] = []

    def generate(self, prompts, schemas=None, sampling=None):
        from agent_models.llm.backends.base import Generation

        texts = []
        for p in prompts:
            user = next((m["content"] for m in p if "You are @" in m["content"]), None)
            if user is None:
                texts.append(
                    '{"stance":"neutral"}'
                    if "stands on" in p[0]["content"]
                    else '{"summary":"A point."}'
                )
                continue
            me = int(re.search(r"You are @user_(\d+)\.", user).group(1))
            if p[-1]["role"] == "user" and "rejected" in p[-1]["content"]:
                self.reasks.append(p[-1]["content"])
                text = self.FRESH[me]
            else:
                identity = re.search(r"Likely identity: (.*)", user).group(1)
                text = self.TEXTS[me % 5] or self.OWN[me // 5]
                text = text.replace("{identity}", identity)
            texts.append(json.dumps({"actions": [{"type": "post", "text": text}]}))
        n = len(texts)
        return Generation(texts, np.full(n, 10), np.full(n, 5), ["stop"] * n)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("retry", [False, True])
def test_copied_debris_and_duplicate_texts_are_rejected_and_reasked(retry: bool) -> None:
    from agent_models.llm import LLMBrain, TextEncoder
    from agent_models.testing import make_round_input

    cfg = LLMConfig(
        model="texts",
        retry_invalid=retry,
        stance_check_users=0,
        toxicity=lambda t: np.zeros(len(t)),
    )
    backend = _TextBackend()
    brain = LLMBrain(cfg, backend=backend, encoder=TextEncoder(cfg.resolved_encoder()))
    ri = make_round_input(num_users=10, num_posts=30, feed_size=3, seed=2)
    brain.reset(ri.users, ri.posts, seed=0)
    out = brain.act(ri)
    stats = out.stats
    assert stats["text_checked"] >= 10
    assert stats["text_copied_prompt"] == 2 and stats["text_json_debris"] == 2
    assert stats["text_duplicate_text"] == 2 + 1  # users 3 (of 2), 7 and 8 (of 2)
    if not retry:
        assert out.invalid == {"copied_prompt": 2, "json_debris": 2, "duplicate_text": 3}
        assert sorted(out.post_user.tolist()) == [2, 4, 9]
        assert stats["text_rejected"] == 7 and stats["texts_accepted"] == 3
        return
    assert out.invalid == {} and len(out.post_user) == 10  # every re-ask recovered
    assert stats["reask_prompts"] == 7 and stats["reask_recovered"] == 7
    assert any("copied your instructions, profile" in m for m in backend.reasks)
    assert any("pieces of JSON" in m for m in backend.reasks)
    assert any("repeated what another user wrote" in m for m in backend.reasks)


class _FavorScorer:
    """Scores "favor" highest for every prompt; agents do nothing; memory answers are valid."""

    name = "favor"
    system_role = True

    def score_labels(self, prompts, labels):
        return np.array([[0.0 if label == "favor" else -5.0 for label in labels] for _ in prompts])

    def generate(self, prompts, schemas=None, sampling=None):
        from agent_models.llm.backends.base import Generation

        texts = [
            '{"actions":[]}'
            if "You are @" in p[-1]["content"]
            else '{"summary":"A point."}'
            if '"summary"' in p[0]["content"]
            else '{"memory":"Some memories."}'
            for p in prompts
        ]
        n = len(texts)
        return Generation(texts, np.zeros(n, np.int64), np.zeros(n, np.int64), ["stop"] * n)

    def close(self) -> None:
        pass


def test_labeller_check_warns_once_and_strict_refuses() -> None:
    import warnings

    from agent_models.llm import LLMBackendError, LLMBrain, TextEncoder
    from agent_models.testing import make_round_input

    ri = make_round_input(num_users=12, num_posts=40, feed_size=3, seed=5)
    truth = np.where(ri.users.stance > 1 / 3, 1, np.where(ri.users.stance < -1 / 3, -1, 0))
    cfg = LLMConfig(
        model="favor",
        stance_calibration="none",
        stance_min_agreement=0.99,
        toxicity=lambda t: np.zeros(len(t)),
    )
    encoder = TextEncoder(cfg.resolved_encoder())
    brain = LLMBrain(cfg, backend=_FavorScorer(), encoder=encoder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 1):  # two episodes: one warning
            brain.reset(ri.users, ri.posts, seed=seed)
            out = brain.act(ri)
    labeller = [w for w in caught if "stance labeller" in str(w.message)]
    assert len(labeller) == 1 and "use a larger model" in str(labeller[0].message)
    checked = np.unique(ri.posts.author[ri.posts.round < 0])
    stats = out.stats
    assert stats["stance_check_users"] == len(checked) and stats["stance_check_scored"] == 1
    assert stats["stance_check_agreement"] == pytest.approx(np.mean(truth[checked] == 1))
    assert sum(stats[f"stance_check_{t}_as_favor"] for t in ("against", "neutral", "favor")) == len(
        checked
    )
    strict = LLMBrain(
        cfg.model_copy(update={"strict": True}), backend=_FavorScorer(), encoder=encoder
    )
    strict.reset(ri.users, ri.posts, seed=0)
    with pytest.raises(LLMBackendError, match="strict=True refuses to run"):
        strict.act(ri)
