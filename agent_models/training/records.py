"""Observed (event, user, action) tuples: what real data says a user did, the raw material
of the SFT / DPO datasets and of the micro-level evaluation. Loaders in
:mod:`socialenv.scenarios.loaders` produce them; this module has no heavy imports."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from agent_models.types import Behaviour
from policysim_infra.jsonl import read_json_lines
from policysim_infra.validation import check


@dataclass
class ObservedAction:
    """One observed behaviour of a real user.

    Attributes:
        user: row of the user in the scenario / :class:`~agent_models.types.Profiles`.
        behaviour: what the user did (real data shows POST, RETWEET and REPLY).
        text: the user's own text (the post, the reply, the comment of a repost; for a plain
            retweet the retweeted text), or None.
        event: the topic / news description the action responds to.
        target_text: the post reacted to (retweet / reply), if known.
        target_author: screen name of that post's author, if known.
        time: timestamp (seconds) if known.
        misinfo: the post carries the misinformation / rumour.
        history_index: row of this post in ``Scenario.history_*``, or None if not kept there.
    """

    user: int
    behaviour: Behaviour
    text: str | None
    event: str
    target_text: str | None = None
    target_author: str | None = None
    time: float | None = None
    misinfo: bool = False
    history_index: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["behaviour"] = Behaviour(self.behaviour).name.lower()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ObservedAction:
        d = dict(d)
        b = d.pop("behaviour")
        behaviour = Behaviour[b.upper()] if isinstance(b, str) else Behaviour(int(b))
        return cls(behaviour=behaviour, **d)


def save_actions(actions: Iterable[ObservedAction], path: str | Path) -> Path:
    """Write actions as JSON lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for a in actions:
            f.write(json.dumps(a.to_dict(), ensure_ascii=False) + "\n")
    return path


def load_actions(path: str | Path) -> list[ObservedAction]:
    """Read actions written by :func:`save_actions`; errors name the file and line."""
    path = Path(path)
    out: list[ObservedAction] = []
    for lineno, record in read_json_lines(path):
        try:
            out.append(ObservedAction.from_dict(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: line {lineno}: not an observed action ({exc})") from exc
    return out


def split_actions(
    actions: Sequence[ObservedAction], test_share: float = 0.2, seed: int = 0
) -> tuple[list[ObservedAction], list[ObservedAction]]:
    """Deterministic train / test split (shuffled by ``seed``)."""
    import numpy as np

    check(0.0 <= test_share < 1.0, "test_share", "in [0, 1)", test_share)
    order = np.random.default_rng(seed).permutation(len(actions))
    n_test = int(round(test_share * len(actions)))
    test = {int(i) for i in order[:n_test]}
    return (
        [a for i, a in enumerate(actions) if i not in test],
        [a for i, a in enumerate(actions) if i in test],
    )
