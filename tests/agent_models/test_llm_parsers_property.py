"""Property tests: the completion parsers never raise, whatever a model or a custom backend
returns (deep nesting, non-strings, huge numbers, junk around JSON), and valid answers
round-trip. 10,000 generated completions go through every parser."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_models.llm.schema import (
    INVALID_REASONS,
    MAX_JSON_DEPTH,
    ConsolidationAnswer,
    FeedView,
    ParsedAnswer,
    SummaryAnswer,
    answer_json,
    is_placeholder,
    parse_agreement,
    parse_answer,
    parse_field,
    parse_stance,
)

VIEW = FeedView(
    user=0, post_ids=[10, 11, 12], post_authors=[1, 2, 3], followed=[True, False, False]
)
BEHAVIOURS = ("post", "retweet", "reply", "like", "dislike", "follow", "unfollow")
FAST = settings(
    max_examples=10_000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: JSON-ish fragments: joined at random they make valid answers, near misses and junk.
TOKENS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        '"actions"',
        '"type"',
        '"like"',
        '"post"',
        '"reply"',
        '"follow"',
        '"post_id"',
        '"user_id"',
        '"text"',
        '"stance"',
        '"favor"',
        '"against"',
        '"summary"',
        '"memory"',
        '"agrees"',
        "true",
        "null",
        "1",
        "10",
        "11",
        "-3",
        "1e999",
        "NaN",
        '"x"',
        " ",
        "\n",
        "```",
        "Sure!",
        "\\",
        '"',
        "\u0000",
    ]
)


def _nested(depth: int, opener: str, core: str) -> str:
    closer = {"[": "]", "{": "}"}
    if opener == "{":
        return '{"a":' * depth + core + "}" * depth
    return opener * depth + core + closer[opener] * depth


COMPLETIONS = st.one_of(
    st.lists(TOKENS, max_size=40).map("".join),
    st.text(max_size=60),
    st.builds(
        _nested,
        st.integers(0, 3_000),
        st.sampled_from("[{"),
        st.sampled_from(['"x"', "1", '{"stance":"favor"}', '{"actions":[]}', ""]),
    ),
    st.integers(0, 20_000).map(lambda n: '{"actions":[{"type":"like","post_id":' + "9" * n + "}]}"),
    # what a buggy custom backend may hand back instead of a str
    st.none(),
    st.integers(),
    st.binary(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(
        st.sampled_from(["actions", "stance"]), st.none() | st.text(max_size=5), max_size=2
    ),
)


def _check_answer(text: Any, truncated: bool) -> None:
    result = parse_answer(
        text, VIEW, max_actions=4, max_text_chars=50, behaviours=BEHAVIOURS, truncated=truncated
    )
    if isinstance(result, str):
        assert result in INVALID_REASONS
    else:
        assert isinstance(result, ParsedAnswer) and result.num_actions <= 4
        assert all(pid in VIEW.post_ids for _, pid, _ in result.reactions)
        assert all(len(p) <= 50 for p in result.posts)


@FAST
@given(COMPLETIONS, st.booleans())
def test_parsers_never_raise(text: Any, truncated: bool) -> None:
    _check_answer(text, truncated)
    assert parse_stance(text) in (-1, 0, 1, None)
    assert parse_agreement(text) in (True, False, None)
    for model in (SummaryAnswer, ConsolidationAnswer):
        value = parse_field(text, model)
        assert value is None or (isinstance(value, str) and value)


#: texts a valid answer may hold: anything but a format placeholder (rejected on purpose)
TEXTS = st.text(min_size=1, max_size=80).filter(lambda t: not is_placeholder(t))
ACTIONS = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "post", "text": t}, TEXTS),
        st.builds(
            lambda k, p: {"type": k, "post_id": p},
            st.sampled_from(["retweet", "like"]),
            st.sampled_from(VIEW.post_ids),
        ),
        st.builds(
            lambda p, t: {"type": "reply", "post_id": p, "text": t},
            st.sampled_from(VIEW.post_ids),
            TEXTS,
        ),
    ),
    max_size=4,
)


@settings(max_examples=1_000, deadline=None, derandomize=True)
@given(ACTIONS, st.sampled_from(["", "```json\n", "Sure! "]))
def test_valid_answers_round_trip(actions: list[dict[str, Any]], prefix: str) -> None:
    result = parse_answer(
        prefix + answer_json(actions) + ("\n```" if prefix.startswith("`") else ""),
        VIEW,
        max_actions=4,
        max_text_chars=80,
        behaviours=BEHAVIOURS,
    )
    assert isinstance(result, ParsedAnswer), result
    distinct = {json.dumps(a, sort_keys=True) for a in actions}
    assert result.num_actions == len(distinct)


def test_depth_limit_names_the_reason() -> None:
    deep = _nested(MAX_JSON_DEPTH + 1, "[", "1")
    assert (
        parse_answer(deep, VIEW, max_actions=4, max_text_chars=50, behaviours=BEHAVIOURS)
        == "too_deep"
    )
    assert (
        parse_answer(
            _nested(100_000, "{", "1"),
            VIEW,
            max_actions=4,
            max_text_chars=50,
            behaviours=BEHAVIOURS,
        )
        == "too_deep"
    )
    assert (
        parse_answer(None, VIEW, max_actions=4, max_text_chars=50, behaviours=BEHAVIOURS)
        == "not_text"
    )
    brackets_in_text = '{"actions":[{"type":"post","text":"see ' + "[[[[" * 40 + '"}]}'
    assert isinstance(
        parse_answer(
            brackets_in_text, VIEW, max_actions=4, max_text_chars=50, behaviours=BEHAVIOURS
        ),
        ParsedAnswer,
    )
