"""SFT examples in the agents' chat format, and DPO pairs, from the fixture datasets."""

from __future__ import annotations

import json

import pytest

from agent_models.llm.prompts import agent_messages
from agent_models.llm.schema import ParsedAnswer, parse_answer
from agent_models.training.data import (
    DPOSamplingConfig,
    Example,
    ExampleConfig,
    build_dpo_records,
    build_examples,
    load_examples,
    save_records,
)
from agent_models.training.records import ObservedAction, load_actions, save_actions, split_actions
from agent_models.types import Behaviour
from socialenv.scenarios.loaders import read_twibot20, read_weibo
from tests.support import FIXTURES, HASH_LOADER, ScriptedBackend


@pytest.fixture(scope="module")
def examples(twibot):
    s = twibot.scenario
    return build_examples(
        twibot.actions, s.profiles, s.topic, follow_src=s.follow_src, follow_dst=s.follow_dst
    )


def _parsed(ex: Example) -> ParsedAnswer:
    cfg = ExampleConfig()
    out = parse_answer(
        ex.response,
        ex.feed.view(ex.user),
        max_actions=cfg.max_actions,
        max_text_chars=cfg.max_text_chars,
        behaviours=cfg.behaviours,
    )
    assert isinstance(out, ParsedAnswer), (out, ex.response)
    return out


def test_sft_examples_use_the_agent_prompt(twibot, examples):
    s = twibot.scenario
    assert len(examples) == len(twibot.actions) == 34
    for ex in examples:
        assert [m["role"] for m in ex.prompt] == ["system", "user"]
        parsed = _parsed(ex)  # every response validates against the feed it was shown
        assert parsed.num_actions >= 1
        assert f"You are @{ex.name}." in ex.prompt[1]["content"]
        assert ex.persona == s.profiles.describe(ex.user)
        assert len(ex.feed.post_ids) == ExampleConfig().feed_size
    # the system message is the shared prefix (no news in TwiBot-20): identical everywhere
    assert len({ex.prompt[0]["content"] for ex in examples}) == 1
    # same rendering as the brain's prompt builder
    ex = examples[0]
    user_msg = ex.prompt[1]["content"]
    feed = user_msg.split("Your feed in round 0:\n")[1].split("\n\nWhat do you do")[0].splitlines()
    memories = [
        m[2:]
        for m in user_msg.split("What you remember:\n")[1].split("\n\nYour feed")[0].splitlines()
        if m != "- nothing yet"
    ]
    assert agent_messages(s.topic, ex.name, ex.persona, memories, feed) == ex.prompt


def test_answers_per_behaviour(examples):
    by = {}
    for ex in examples:
        by.setdefault(ex.behaviour, []).append(ex)
    assert set(by) == {"post", "retweet", "reply"}
    rt = next(ex for ex in by["retweet"] if "capitol_watch" in ex.prompt[1]["content"])
    assert json.loads(rt.response) == {
        "actions": [{"type": "retweet", "post_id": rt.feed.target_post}]
    }
    assert f"[{rt.feed.target_post}] @capitol_watch" in rt.prompt[1]["content"]
    assert "Committee hearing on campaign finance" in rt.prompt[1]["content"]
    reply = next(ex for ex in by["reply"] if ex.name == "jane_reports")
    answer = json.loads(reply.response)["actions"][0]
    assert (
        answer["type"] == "reply"
        and answer["text"] == "thanks, we corrected the figure in the story."
    )
    # the reply target is a followed, known user: marked as followed in the feed
    k = reply.feed.post_ids.index(reply.feed.target_post)
    assert reply.feed.followed[k]
    post = by["post"][0]
    assert json.loads(post.response)["actions"][0]["text"] == post.text


def test_memories_are_earlier_posts(examples):
    jane = [ex for ex in examples if ex.name == "jane_reports"]
    newest = next(ex for ex in jane if ex.text and ex.text.startswith("Senate vote"))
    oldest = next(ex for ex in jane if ex.behaviour == "reply")
    assert newest.prompt[1]["content"].count("You posted:") == 3
    assert "- nothing yet" in oldest.prompt[1]["content"]


def test_weibo_reposts_with_comments():
    w = read_weibo(FIXTURES / "weibo", config=HASH_LOADER)
    exs = build_examples(w.actions, w.scenario.profiles, w.scenario.topic)
    salt = next(ex for ex in exs if ex.text == "家里人都去买盐了[哈哈]")
    acts = json.loads(salt.response)["actions"]
    assert [a["type"] for a in acts] == ["retweet", "reply"] and salt.behaviour == "retweet"
    assert "News: 紧急扩散" in salt.extra["situation"]
    plain = [
        ex
        for ex in exs
        if ex.behaviour == "retweet" and len(json.loads(ex.response)["actions"]) == 1
    ]
    assert plain  # "转发微博" carries no comment: retweet only
    source = next(ex for ex in exs if ex.behaviour == "post" and ex.text.startswith("紧急扩散"))
    assert "News:" not in source.prompt[0]["content"]  # the event is the user's own post
    no_reply = build_examples(
        w.actions,
        w.scenario.profiles,
        w.scenario.topic,
        config=ExampleConfig(comment_as_reply=False),
    )
    assert all(len(json.loads(e.response)["actions"]) == 1 for e in no_reply)


def test_examples_deterministic_and_roundtrip(tmp_path, twibot, examples):
    s = twibot.scenario
    again = build_examples(
        twibot.actions, s.profiles, s.topic, follow_src=s.follow_src, follow_dst=s.follow_dst
    )
    assert [e.to_record() for e in again] == [e.to_record() for e in examples]
    path = save_records([e.to_record() for e in examples], tmp_path / "sft.jsonl")
    loaded = load_examples(path)
    assert [e.to_record() for e in loaded] == [e.to_record() for e in examples]
    acts = save_actions(twibot.actions, tmp_path / "actions.jsonl")
    assert load_actions(acts) == twibot.actions
    train, test = split_actions(twibot.actions, 0.25, seed=1)
    assert len(test) == 8 and len(train) + len(test) == 34


def test_bad_records(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": []}\n{"oops": 1}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl: line 1: missing field 'completion'"):
        load_examples(bad)
    with pytest.raises(ValueError, match="outside the profiles"):
        build_examples(
            [ObservedAction(99, Behaviour.POST, "hi", "t")],
            read_twibot20(
                FIXTURES / "twibot20" / "sample.json", config=HASH_LOADER
            ).scenario.profiles,
            "t",
        )


def cycling(*makers):
    """An answer that cycles through ``makers``: prompt i of a call gets ``makers[i % n](i, schema)``."""
    return lambda i, prompt, schema: makers[i % len(makers)](i, schema)


def test_dpo_pairs_choose_dissimilar_or_different(examples):
    subset = [ex for ex in examples if ex.behaviour == "post"][:4]

    def copies(k):  # the observed answer itself (k samples per prompt): never a rejection
        return lambda i, schema: subset[i // k].response

    def like(i, schema):  # a different action on a feed post
        post = schema["properties"]["actions"]["items"]["anyOf"][1]["properties"]["post_id"][
            "enum"
        ][0]
        return json.dumps({"actions": [{"type": "like", "post_id": post}]})

    def other_post(i, schema):  # same action, unrelated text
        return json.dumps({"actions": [{"type": "post", "text": "zebra quantum marmalade"}]})

    backend = ScriptedBackend(cycling(copies(3), like, other_post))
    records, stats = build_dpo_records(
        subset, backend, encoder="hash", sampling=DPOSamplingConfig(num_samples=3)
    )
    assert [n for n, _ in backend.calls] == [12]  # one batched call for all samples
    assert stats.pairs == 4 and stats.skipped == 0 and stats.different_action == 4
    for rec, ex in zip(records, subset, strict=True):
        assert rec["prompt"] == ex.prompt
        assert rec["chosen"] == [{"role": "assistant", "content": ex.response}]
        assert json.loads(rec["rejected"][0]["content"])["actions"][0]["type"] == "like"
    # without the different action, the low-similarity post is rejected
    records, stats = build_dpo_records(
        subset,
        ScriptedBackend(cycling(copies(2), other_post)),
        encoder="hash",
        sampling=DPOSamplingConfig(num_samples=2),
    )
    assert stats.low_similarity == 4 and all(r["meta"]["similarity"] < 0.5 for r in records)
    # only copies of the observed answer: nothing to reject, skipped
    records, stats = build_dpo_records(
        subset,
        ScriptedBackend(cycling(copies(2))),
        encoder="hash",
        sampling=DPOSamplingConfig(num_samples=2),
    )
    assert records == [] and stats.skipped == 4
