"""A scenario: the population, its follow graph, its history and its news, as arrays.

Built by the synthetic generator (:mod:`socialenv.scenarios.builtin`), by a dataset loader
(:mod:`socialenv.scenarios.loaders`), or by hand with :meth:`Scenario.from_arrays`; saved and loaded
as one ``.npz`` file (plus a JSON sidecar for text).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agent_models.types import Categorical, NewsEvent, Profiles
from policysim_infra.buffers import ArraysByRole, role_empty
from socialenv.core import kernels
from socialenv.scenarios.generators import default_profiles, synthetic_text


@dataclass
class Scenario:
    """Everything the env needs to start an episode.

    Attributes (N users, E follow edges, H history posts, d latent dims):
        name, topic: identifier and a topic description used in prompts.
        profiles: the four profile attributes (§2.1.1).
        latent: (N, d) float32 interest embedding, unit norm.
        opinion: (N,) float32 initial latent opinion in [-1, 1].
        activity: (N,) float32 probability of being active in a round, in (0, 1].
        toxicity_propensity: (N,) float32 in [0, 1].
        susceptibility: (N,) float32 in [0, 1].
        misinformed: (N,) bool, users who start out believing/posting the misinformation.
        follow_src, follow_dst: (E,) int64, ``src`` follows ``dst``.
        history_author, history_latent, history_stance, history_toxicity, history_misinfo,
            history_text: posts that exist before round 0 (round -1).
        news: news events with their rounds.
        misinformation_message: the message misinformed users spread, if any.
        events: scheduled / triggered / chained event dicts (see :mod:`socialenv.mechanisms.events`).
    """

    name: str
    topic: str
    profiles: Profiles
    latent: np.ndarray
    opinion: np.ndarray
    activity: np.ndarray
    toxicity_propensity: np.ndarray
    susceptibility: np.ndarray
    misinformed: np.ndarray
    follow_src: np.ndarray
    follow_dst: np.ndarray
    history_author: np.ndarray
    history_latent: np.ndarray
    history_stance: np.ndarray
    history_toxicity: np.ndarray
    history_misinfo: np.ndarray
    history_text: list[str | None] | None = None
    news: list[NewsEvent] = field(default_factory=list)
    misinformation_message: str | None = None
    events: list[dict] = field(default_factory=list)

    @property
    def num_users(self) -> int:
        return len(self.opinion)

    @property
    def latent_dim(self) -> int:
        return int(self.latent.shape[1])

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field if the arrays are inconsistent."""
        n = self.num_users
        if n < 2:
            raise ValueError(f"Scenario.opinion: need at least 2 users, got {n}")
        per_user = {
            "latent": self.latent,
            "activity": self.activity,
            "toxicity_propensity": self.toxicity_propensity,
            "susceptibility": self.susceptibility,
            "misinformed": self.misinformed,
        }
        for name, arr in per_user.items():
            if len(arr) != n:
                raise ValueError(
                    f"Scenario.{name} has {len(arr)} rows, expected {n} (one per user)"
                )
        if len(self.profiles) != n:
            raise ValueError(f"Scenario.profiles has {len(self.profiles)} users, expected {n}")
        if self.latent.ndim != 2:
            raise ValueError(f"Scenario.latent must be (N, d), got shape {self.latent.shape}")
        for name in (
            "latent",
            "opinion",
            "activity",
            "toxicity_propensity",
            "susceptibility",
            "history_latent",
            "history_stance",
            "history_toxicity",
        ):
            arr = np.asarray(getattr(self, name))
            if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(
                arr.dtype, np.complexfloating
            ):
                raise ValueError(f"Scenario.{name} must hold real numbers, got dtype {arr.dtype}")
            if not _all_finite(arr):
                raise ValueError(f"Scenario.{name} holds NaN or inf")
        for name in ("follow_src", "follow_dst", "history_author"):
            if not np.issubdtype(np.asarray(getattr(self, name)).dtype, np.integer):
                raise ValueError(
                    f"Scenario.{name} must hold integer user ids, "
                    f"got dtype {np.asarray(getattr(self, name)).dtype}"
                )
        self._validate_profiles()
        for i, event in enumerate(self.news):
            if not (
                isinstance(event.round, int | np.integer)
                and event.round >= 0
                and isinstance(event.headline, str)
                and np.isfinite(event.shift)
            ):
                raise ValueError(
                    f"Scenario.news[{i}] must have an integer round >= 0, a headline "
                    f"string and a finite shift, got {event!r}"
                )
        for name in ("opinion", "history_stance"):
            arr = getattr(self, name)
            if len(arr) and (arr.min() < -1 or arr.max() > 1):
                raise ValueError(f"Scenario.{name} must lie in [-1, 1]")
        for name in ("activity", "toxicity_propensity", "susceptibility", "history_toxicity"):
            arr = getattr(self, name)
            if len(arr) and (arr.min() < 0 or arr.max() > 1):
                raise ValueError(f"Scenario.{name} must lie in [0, 1]")
        if len(self.follow_src) != len(self.follow_dst):
            raise ValueError("Scenario.follow_src and follow_dst must have the same length")
        for name in ("follow_src", "follow_dst", "history_author"):
            arr = getattr(self, name)
            if len(arr) and (arr.min() < 0 or arr.max() >= n):
                raise ValueError(f"Scenario.{name} holds user ids outside [0, {n})")
        if np.any(self.follow_src == self.follow_dst):
            raise ValueError("Scenario.follow_src/follow_dst: a user cannot follow themself")
        h = len(self.history_author)
        for name in ("history_stance", "history_toxicity", "history_misinfo"):
            if len(getattr(self, name)) != h:
                raise ValueError(
                    f"Scenario.{name} has {len(getattr(self, name))} rows, expected {h}"
                )
        if self.history_latent.shape != (h, self.latent_dim):
            raise ValueError(
                f"Scenario.history_latent has shape {self.history_latent.shape}, "
                f"expected ({h}, {self.latent_dim})"
            )
        if self.history_text is not None and len(self.history_text) != h:
            raise ValueError(
                f"Scenario.history_text has {len(self.history_text)} texts, expected {h}"
            )
        from socialenv.mechanisms.events import load_events

        self.events = load_events(list(self.events))

    def _validate_profiles(self) -> None:
        p, n = self.profiles, self.num_users
        for name in ("identity", "posting_style", "interaction_role"):
            column = getattr(p, name)
            codes = np.asarray(column.codes)
            if not np.issubdtype(codes.dtype, np.integer):
                raise ValueError(
                    f"Scenario.profiles.{name}.codes must be integers, got dtype {codes.dtype}"
                )
            if len(codes) and (codes.min() < 0 or codes.max() >= len(column.vocab)):
                raise ValueError(
                    f"Scenario.profiles.{name}.codes must index its vocab of "
                    f"{len(column.vocab)} entries (0..{len(column.vocab) - 1})"
                )
            if not all(isinstance(v, str) for v in column.vocab):
                raise ValueError(f"Scenario.profiles.{name}.vocab must hold strings")
        interests = np.asarray(p.interests)
        if interests.shape != (n, len(p.topics)):
            raise ValueError(
                f"Scenario.profiles.interests has shape {interests.shape}, "
                f"expected ({n}, {len(p.topics)}) (users × topics)"
            )
        for name in ("post_retweet_ratio", "reply_frequency", "follower_following_ratio"):
            arr = np.asarray(getattr(p, name))
            if (
                arr.shape != (n,)
                or not np.issubdtype(arr.dtype, np.number)
                or not np.isfinite(arr).all()
                or (len(arr) and arr.min() < 0)
            ):
                raise ValueError(f"Scenario.profiles.{name} must be ({n},) finite numbers >= 0")
        if p.names is not None and (
            len(p.names) != n or not all(isinstance(x, str) and x for x in p.names)
        ):
            raise ValueError(
                f"Scenario.profiles.names must be {n} non-empty strings (one per user)"
            )

    @classmethod
    def from_arrays(
        cls,
        opinion: np.ndarray,
        follow_src: np.ndarray,
        follow_dst: np.ndarray,
        latent: np.ndarray | None = None,
        *,
        name: str = "custom",
        topic: str = "a contested social issue",
        profiles: Profiles | None = None,
        activity: np.ndarray | float = 0.6,
        toxicity_propensity: np.ndarray | float = 0.2,
        susceptibility: np.ndarray | float = 0.3,
        misinformed: np.ndarray | None = None,
        news: list[NewsEvent] | None = None,
        misinformation_message: str | None = None,
        events: list[dict] | None = None,
        seed: int = 0,
    ) -> Scenario:
        """A scenario from user-supplied arrays; what is not given gets documented defaults.

        Args:
            opinion: (N,) initial opinions in [-1, 1].
            follow_src, follow_dst: (E,) follow edges (src follows dst).
            latent: (N, d) interest embeddings; default: random unit vectors (d = 32).
            profiles: default: neutral profiles derived from the graph's degrees.
        """
        opinion = np.asarray(opinion, dtype=np.float32)
        n = len(opinion)
        rng = np.random.default_rng(seed)
        if latent is None:
            latent = rng.standard_normal((n, 32)).astype(np.float32)
        latent = np.asarray(latent, dtype=np.float32)
        latent = latent / np.maximum(np.linalg.norm(latent, axis=1, keepdims=True), 1e-8)

        def col(value: np.ndarray | float) -> np.ndarray:
            return np.broadcast_to(np.asarray(value, dtype=np.float32), (n,)).copy()

        follow_src = np.asarray(follow_src, dtype=np.int64)
        follow_dst = np.asarray(follow_dst, dtype=np.int64)
        if len(follow_src) != len(follow_dst):
            raise ValueError("Scenario.follow_src and follow_dst must have the same length")
        for name, ids in (("follow_src", follow_src), ("follow_dst", follow_dst)):
            if len(ids) and (ids.min() < 0 or ids.max() >= n):
                raise ValueError(f"Scenario.{name} holds user ids outside [0, {n})")
        if profiles is None:
            profiles = default_profiles(n, follow_src, follow_dst, rng)
        scenario = cls(
            name=name,
            topic=topic,
            profiles=profiles,
            latent=latent,
            opinion=opinion,
            activity=col(activity),
            toxicity_propensity=col(toxicity_propensity),
            susceptibility=col(susceptibility),
            misinformed=np.zeros(n, bool) if misinformed is None else np.asarray(misinformed, bool),
            follow_src=follow_src,
            follow_dst=follow_dst,
            history_author=np.zeros(0, np.int64),
            history_latent=np.zeros((0, latent.shape[1]), np.float32),
            history_stance=np.zeros(0, np.float32),
            history_toxicity=np.zeros(0, np.float32),
            history_misinfo=np.zeros(0, bool),
            news=list(news or []),
            misinformation_message=misinformation_message,
            events=list(events or []),
        )
        seed_history(scenario, rng)
        scenario.validate()
        return scenario

    def save(self, path: str | Path) -> Path:
        """Write the scenario to ``path`` (.npz) with its text in ``path``.json."""
        path = Path(path).with_suffix(".npz")
        path.parent.mkdir(parents=True, exist_ok=True)
        p = self.profiles
        np.savez_compressed(
            path,
            latent=self.latent,
            opinion=self.opinion,
            activity=self.activity,
            toxicity_propensity=self.toxicity_propensity,
            susceptibility=self.susceptibility,
            misinformed=self.misinformed,
            follow_src=self.follow_src,
            follow_dst=self.follow_dst,
            history_author=self.history_author,
            history_latent=self.history_latent,
            history_stance=self.history_stance,
            history_toxicity=self.history_toxicity,
            history_misinfo=self.history_misinfo,
            identity=p.identity.codes,
            interests=p.interests,
            posting_style=p.posting_style.codes,
            interaction_role=p.interaction_role.codes,
            post_retweet_ratio=p.post_retweet_ratio,
            reply_frequency=p.reply_frequency,
            follower_following_ratio=p.follower_following_ratio,
        )
        meta = {
            "name": self.name,
            "topic": self.topic,
            "misinformation_message": self.misinformation_message,
            "news": [[e.round, e.headline, e.shift] for e in self.news],
            "events": list(self.events),
            "history_text": self.history_text,
            "names": p.names,
            "topics": list(p.topics),
            "identity_vocab": list(p.identity.vocab),
            "posting_style_vocab": list(p.posting_style.vocab),
            "interaction_role_vocab": list(p.interaction_role.vocab),
        }
        path.with_suffix(".json").write_text(json.dumps(meta))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario written by :meth:`save`."""
        path = Path(path).with_suffix(".npz")
        for required in (path, path.with_suffix(".json")):
            if not required.exists():
                raise FileNotFoundError(f"scenario file {required} does not exist")
        try:
            scenario = cls._read(path)
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
            IndexError,
            EOFError,
            zipfile.BadZipFile,
        ) as err:
            what = "is not a valid scenario" if not isinstance(err, KeyError) else f"lacks {err}"
            raise ValueError(
                f"scenario file {path} (with {path.with_suffix('.json').name}) {what}: "
                f"{type(err).__name__}: {err}"
            ) from err
        return scenario

    @classmethod
    def _read(cls, path: Path) -> Scenario:
        from policysim_infra.npz import NpzReader

        with NpzReader(
            path,
            max_bytes=MAX_SCENARIO_BYTES,
            members=SCENARIO_MEMBERS,
            required=SCENARIO_MEMBERS,
            check=_check_scenario_headers,
            what="scenario file",
        ) as reader:
            arrays = reader.read_all()
        sidecar = path.with_suffix(".json")
        if sidecar.stat().st_size > MAX_SCENARIO_JSON_BYTES:
            raise ValueError(f"{sidecar.name} is larger than {MAX_SCENARIO_JSON_BYTES} bytes")
        try:
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
        except RecursionError:
            raise ValueError(f"{sidecar.name} is nested too deeply") from None
        if not isinstance(meta, dict):
            raise ValueError("the .json sidecar must be a JSON object")
        profiles = Profiles(
            identity=Categorical(arrays["identity"], tuple(meta["identity_vocab"])),
            interests=arrays["interests"],
            topics=tuple(meta["topics"]),
            posting_style=Categorical(arrays["posting_style"], tuple(meta["posting_style_vocab"])),
            interaction_role=Categorical(
                arrays["interaction_role"], tuple(meta["interaction_role_vocab"])
            ),
            post_retweet_ratio=arrays["post_retweet_ratio"],
            reply_frequency=arrays["reply_frequency"],
            follower_following_ratio=arrays["follower_following_ratio"],
            names=meta["names"],
        )
        scenario = cls(
            name=meta["name"],
            topic=meta["topic"],
            profiles=profiles,
            **{
                k: arrays[k]
                for k in (
                    "latent",
                    "opinion",
                    "activity",
                    "toxicity_propensity",
                    "susceptibility",
                    "misinformed",
                    "follow_src",
                    "follow_dst",
                    "history_author",
                    "history_latent",
                    "history_stance",
                    "history_toxicity",
                    "history_misinfo",
                )
            },
            history_text=meta["history_text"],
            news=[NewsEvent(int(r), str(h), float(s)) for r, h, s in meta["news"]],
            misinformation_message=meta["misinformation_message"],
            events=list(meta.get("events", [])),
        )
        scenario.validate()
        return scenario


#: ``.npz`` members of a saved scenario: name -> (ndim, dtype kinds, the size its first axis shares).
SCENARIO_ARRAYS: dict[str, tuple[int, str, str]] = {
    "latent": (2, "f", "users"),
    "opinion": (1, "f", "users"),
    "activity": (1, "f", "users"),
    "toxicity_propensity": (1, "f", "users"),
    "susceptibility": (1, "f", "users"),
    "misinformed": (1, "b", "users"),
    "follow_src": (1, "iu", "edges"),
    "follow_dst": (1, "iu", "edges"),
    "history_author": (1, "iu", "history"),
    "history_latent": (2, "f", "history"),
    "history_stance": (1, "f", "history"),
    "history_toxicity": (1, "f", "history"),
    "history_misinfo": (1, "b", "history"),
    "identity": (1, "iu", "users"),
    "interests": (2, "biu", "users"),
    "posting_style": (1, "iu", "users"),
    "interaction_role": (1, "iu", "users"),
    "post_retweet_ratio": (1, "f", "users"),
    "reply_frequency": (1, "f", "users"),
    "follower_following_ratio": (1, "f", "users"),
}
SCENARIO_MEMBERS: tuple[str, ...] = tuple(SCENARIO_ARRAYS)
#: Largest total of array bytes a scenario file may hold (and at most
#: ``policysim_infra.npz.MAX_EXPANSION`` times its size on disk); largest ``.json`` sidecar.
MAX_SCENARIO_BYTES = 64 * 1024**3
MAX_SCENARIO_JSON_BYTES = 1 << 30


def _check_scenario_headers(headers: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
    sizes: dict[str, tuple[str, int]] = {}
    for name, (shape, dtype) in headers.items():
        ndim, kinds, axis = SCENARIO_ARRAYS[name]
        if len(shape) != ndim or dtype.kind not in kinds:
            raise ValueError(
                f"array {name!r}: shape {shape} of {dtype} is not allowed: {ndim} dimensions "
                f"of dtype kind {kinds!r}"
            )
        first, size = sizes.setdefault(axis, (name, shape[0]))
        if shape[0] != size:
            raise ValueError(
                f"array {name!r}: {shape[0]} rows is not allowed: {size}, as {first!r}"
            )


def _all_finite(arr: np.ndarray) -> bool:
    """``np.isfinite(arr).all()`` for real arrays without an (arr.shape) temporary: min and max
    propagate NaN, and are finite only if every value is."""
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.floating):
        return True
    return bool(np.isfinite(arr.min()) and np.isfinite(arr.max()))


def seed_history(
    scenario: Scenario,
    rng: np.random.Generator,
    mean_posts: float = 1.5,
    with_text: bool = False,
    *,
    memory: ArraysByRole | None = None,
) -> None:
    """Fill ``scenario.history_*`` with posts written before round 0 (in place); the history
    rows are written into ``memory``'s array of role ``history_latent`` when given."""
    n = scenario.num_users
    counts = rng.poisson(mean_posts * scenario.activity / max(scenario.activity.mean(), 1e-6))
    author = np.repeat(np.arange(n, dtype=np.int64), counts)
    scenario.history_author = author
    scenario.history_latent = kernels.unit_noisy_rows_drawn(
        scenario.latent,
        author,
        0.3,
        rng,
        out=role_empty(memory, "history_latent", (len(author), scenario.latent_dim), np.float32),
    )
    scenario.history_stance = np.clip(
        scenario.opinion[author] + 0.15 * rng.standard_normal(len(author)), -1, 1
    ).astype(np.float32)
    scenario.history_toxicity = np.clip(
        scenario.toxicity_propensity[author] * rng.random(len(author)) * 0.5, 0, 1
    ).astype(np.float32)
    scenario.history_misinfo = scenario.misinformed[author].copy()
    scenario.history_text = (
        synthetic_text(
            scenario.topic,
            scenario.history_stance,
            scenario.history_misinfo,
            rng,
            scenario.misinformation_message,
        )
        if with_text
        else None
    )
