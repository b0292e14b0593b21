"""Post and user ids in an LLM answer are integers, not values Python's int() would bend
(issue 21): JSON true is not post 1, and "1_0", "+10", " 10" are not post 10."""

from __future__ import annotations

import json

import pytest

from agent_models.llm.schema import FeedView, ParsedAnswer, parse_answer

VIEW = FeedView(
    user=1, post_ids=[1, 10, 11], post_authors=[2, 3, 10], followed=[True, False, False]
)
ALL = ("post", "retweet", "reply", "like", "dislike", "follow", "unfollow")


def parse(action: dict) -> ParsedAnswer | str:
    return parse_answer(
        json.dumps({"actions": [action]}), VIEW, max_actions=4, max_text_chars=50, behaviours=ALL
    )


@pytest.mark.parametrize(
    "bad", [True, False, "1_0", "+10", " 10", "10 ", "010", "1e1", 10.0, "١٠", None, [10]]
)
@pytest.mark.parametrize("field", ["post_id", "user_id"])
def test_odd_id_values_are_schema_errors(field: str, bad: object) -> None:
    action = (
        {"type": "like", "post_id": bad}
        if field == "post_id"
        else {"type": "follow", "user_id": bad}
    )
    assert parse(action) == "schema"


def test_integers_and_plain_digit_strings_are_ids() -> None:
    assert parse({"type": "like", "post_id": 10}).reactions[0][1] == 10  # type: ignore[union-attr]
    assert parse({"type": "like", "post_id": "10"}).reactions[0][1] == 10  # type: ignore[union-attr]
    assert parse({"type": "follow", "user_id": 10}).follows == [10]  # type: ignore[union-attr]
