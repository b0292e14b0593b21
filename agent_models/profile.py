"""Profile extraction from real accounts (§2.1.1): the four attributes of :class:`Profiles`.

Input: one :class:`UserRecord` per account (bio, observed posts with their kinds, follower
and following counts). Output: a columnar :class:`~agent_models.types.Profiles`.

**Interaction behaviour** is computed from metadata, never by a model:

- ``post_retweet_ratio`` = original posts / max(retweets, 1)
- ``reply_frequency`` = replies / max(all observed posts, 1)
- ``follower_following_ratio`` = followers / max(following, 1)

and the **interaction role** follows :class:`RoleRules`, first matching rule wins:

1. ``lurker``: fewer than ``lurker_max_posts`` observed posts (default 3) and, when the
   metadata has a lifetime post count, fewer than ``lurker_max_statuses`` (default 200);
2. ``amplifier``: retweets are at least ``amplifier_min_retweet_share`` (0.5) of the posts;
3. ``conversationalist``: replies are at least ``conversationalist_min_reply_share`` (0.3);
4. ``broadcaster``: follower/following ratio at least ``broadcaster_min_follower_ratio`` (2)
   and original posts at least ``broadcaster_min_original_share`` (0.4) of the posts;
5. ``regular`` otherwise.

**Likely identity, interested areas and posting style** come from an LLM when a backend is
given (:class:`LLMProfiler`: one batched, JSON-schema-constrained call for all users), and
otherwise from the deterministic :class:`HeuristicProfiler`:

- identity: first matching keyword rule on the bio (:data:`IDENTITY_RULES`, English and
  Chinese keywords), then "public figure" for verified accounts or accounts with at least
  100,000 followers, else "ordinary user";
- interested areas: keyword / hashtag hits of each topic lexicon (:data:`TOPIC_KEYWORDS`)
  in the bio and posts, plus dataset domains (TwiBot-20's ``domain``); a topic is on when
  its hits reach ``min_topic_share`` of the posts (at least one hit), at most
  ``max_interests`` topics, strongest first;
- posting style: a phrase from statistics of the posts: length (short < 60 characters <
  medium < 140 < long), tone from the mean VADER compound score (positive > 0.2, negative <
  -0.2, neutral otherwise; VADER scores English only), hashtags / emoji / links / mentions
  per post and the share of emphatic posts ("!" or an all-caps word).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent_models.types import Categorical, PostKind, Profiles
from policysim_infra.extras import require

#: Interaction roles (also the synthetic scenarios' vocabulary, in this order).
ROLES: tuple[str, ...] = ("broadcaster", "amplifier", "conversationalist", "lurker", "regular")

#: Interest areas (also the synthetic scenarios' vocabulary).
TOPICS: tuple[str, ...] = (
    "politics",
    "healthcare",
    "religion",
    "economy",
    "law and courts",
    "education",
    "family",
    "technology",
    "sports",
    "entertainment",
    "science",
    "local news",
)

#: Keyword lexicons of :data:`TOPICS` (lower case; a keyword matches a word prefix, so
#: "elect" matches "election"; Chinese keywords match anywhere).
TOPIC_KEYWORDS: dict[str, tuple[str, ...]] = {
    "politics": (
        "politic",
        "elect",
        "vote",
        "voting",
        "congress",
        "senat",
        "democrat",
        "republican",
        "gop",
        "president",
        "trump",
        "biden",
        "obama",
        "government",
        "campaign",
        "policy",
        "parliament",
        "maga",
        "liberal",
        "conservative",
        "政府",
        "政治",
        "选举",
        "官员",
    ),
    "healthcare": (
        "health",
        "hospital",
        "doctor",
        "nurse",
        "vaccine",
        "covid",
        "medic",
        "patient",
        "pandemic",
        "obamacare",
        "insurance",
        "abortion",
        "医院",
        "医生",
        "疫苗",
        "健康",
    ),
    "religion": (
        "god",
        "church",
        "faith",
        "pray",
        "jesus",
        "christ",
        "bible",
        "muslim",
        "islam",
        "jewish",
        "religio",
        "pastor",
        "blessed",
        "宗教",
        "佛",
    ),
    "economy": (
        "econom",
        "market",
        "stock",
        "tax",
        "job",
        "inflation",
        "business",
        "trade",
        "money",
        "bank",
        "price",
        "wage",
        "invest",
        "经济",
        "股市",
        "房价",
        "工资",
    ),
    "law and courts": (
        "court",
        "judge",
        "law",
        "legal",
        "justice",
        "supreme",
        "lawsuit",
        "police",
        "crime",
        "attorney",
        "ruling",
        "法院",
        "法律",
        "警察",
        "律师",
    ),
    "education": (
        "school",
        "student",
        "teacher",
        "universit",
        "college",
        "educat",
        "campus",
        "class",
        "学校",
        "学生",
        "教育",
        "老师",
        "高考",
    ),
    "family": (
        "family",
        "kid",
        "child",
        "mom",
        "dad",
        "parent",
        "wife",
        "husband",
        "baby",
        "daughter",
        "son",
        "家庭",
        "孩子",
        "父母",
        "妈妈",
    ),
    "technology": (
        "tech",
        "artificial intelligence",
        "software",
        "app",
        "google",
        "apple",
        "iphone",
        "internet",
        "data",
        "crypto",
        "bitcoin",
        "startup",
        "robot",
        "科技",
        "手机",
        "互联网",
    ),
    "sports": (
        "game",
        "team",
        "nba",
        "nfl",
        "football",
        "soccer",
        "basketball",
        "baseball",
        "win",
        "season",
        "coach",
        "olympic",
        "体育",
        "足球",
        "篮球",
        "比赛",
    ),
    "entertainment": (
        "movie",
        "film",
        "music",
        "song",
        "album",
        "tv",
        "show",
        "celebrit",
        "concert",
        "netflix",
        "star",
        "电影",
        "音乐",
        "明星",
        "娱乐",
    ),
    "science": (
        "science",
        "scien",
        "research",
        "climate",
        "space",
        "nasa",
        "study",
        "physic",
        "biolog",
        "科学",
        "研究",
        "气候",
    ),
    "local news": (
        "local",
        "city",
        "county",
        "town",
        "community",
        "weather",
        "traffic",
        "mayor",
        "neighborhood",
        "本地",
        "城市",
        "天气",
        "交通",
    ),
}

#: Bio keyword rules for the likely identity, first match wins.
IDENTITY_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "journalist",
        (
            "journalist",
            "reporter",
            "editor",
            "correspondent",
            "news anchor",
            "记者",
            "编辑",
            "媒体",
        ),
    ),
    (
        "politician",
        (
            "senator",
            "congressman",
            "congresswoman",
            "mayor",
            "governor",
            "mp for",
            "representative",
            "candidate for",
            "councilmember",
            "议员",
            "官员",
        ),
    ),
    (
        "activist",
        ("activist", "advocate", "organizer", "organiser", "#resist", "campaigner", "维权"),
    ),
    (
        "academic",
        (
            "professor",
            "phd",
            "researcher",
            "scientist",
            "lecturer",
            "postdoc",
            "教授",
            "博士",
            "研究员",
        ),
    ),
    ("lawyer", ("lawyer", "attorney", "law firm", "律师")),
    ("healthcare worker", ("nurse", "physician", "doctor", " md", "医生", "护士")),
    ("teacher", ("teacher", "educator", "教师", "老师")),
    ("student", ("student", "undergrad", "class of", "学生")),
    (
        "business professional",
        ("ceo", "founder", "entrepreneur", "marketing", "consultant", "investor", "创始人", "总裁"),
    ),
    ("religious person", ("pastor", "christian", "catholic", "god first", "blessed", "牧师")),
    ("veteran", ("veteran", "usmc", "army", "navy", "air force", "退伍")),
    ("parent", ("mom of", "dad of", "mother of", "father of", "wife and mother", "妈妈", "爸爸")),
    (
        "artist",
        (
            "artist",
            "musician",
            "writer",
            "author",
            "photographer",
            "designer",
            "作家",
            "歌手",
            "摄影",
        ),
    ),
    ("tech worker", ("engineer", "developer", "programmer", "software", "工程师", "程序员")),
)

_HASHTAG = re.compile(r"#\w+", re.UNICODE)
_WEIBO_TAG = re.compile(r"#[^#\s]{1,30}#")
_MENTION = re.compile(r"@\w+", re.UNICODE)
_URL = re.compile(r"https?://\S+")
_EMOJI = re.compile(
    "[\U0001f300-\U0001faff\u2600-\u27bf\U0001f1e6-\U0001f1ff]|\\[[\u4e00-\u9fff]{1,4}\\]"
)
_CAPS_WORD = re.compile(r"\b[A-Z]{4,}\b")
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u4e00-\u9fff]")


def classify_tweet(text: str) -> PostKind:
    """Kind of a tweet from its text: ``RT @...`` is a retweet, a leading ``@`` a reply."""
    stripped = text.lstrip()
    if stripped.startswith("RT @"):
        return PostKind.RETWEET
    if stripped.startswith("@"):
        return PostKind.REPLY
    return PostKind.POST


@dataclass
class UserRecord:
    """One real account, as the profile extractor needs it.

    Attributes:
        name: screen name.
        description: the bio ("" if none).
        posts: observed texts, most recent first.
        kinds: :class:`PostKind` of each post (same length as ``posts``); None = infer from
            the text with :func:`classify_tweet`.
        followers, following: counts from the account metadata.
        verified: verified badge.
        domains: dataset-provided interest domains (e.g. TwiBot-20's ``domain``).
        statuses: lifetime post count from the metadata, None if unknown.
    """

    name: str
    description: str = ""
    posts: list[str] = field(default_factory=list)
    kinds: list[int] | None = None
    followers: int = 0
    following: int = 0
    verified: bool = False
    domains: tuple[str, ...] = ()
    statuses: int | None = None

    def post_kinds(self) -> list[int]:
        if self.kinds is not None:
            if len(self.kinds) != len(self.posts):
                raise ValueError(
                    f"UserRecord {self.name!r}: kinds has {len(self.kinds)} entries, "
                    f"posts has {len(self.posts)}"
                )
            return [int(k) for k in self.kinds]
        return [int(classify_tweet(t)) for t in self.posts]


@dataclass(frozen=True)
class RoleRules:
    """Thresholds of the interaction-role rules (see the module docstring)."""

    lurker_max_posts: int = 3
    lurker_max_statuses: int = 200
    amplifier_min_retweet_share: float = 0.5
    conversationalist_min_reply_share: float = 0.3
    broadcaster_min_follower_ratio: float = 2.0
    broadcaster_min_original_share: float = 0.4


@dataclass
class InteractionStats:
    """(N,) interaction-behaviour statistics and the derived role codes (index into ROLES)."""

    post_retweet_ratio: np.ndarray
    reply_frequency: np.ndarray
    follower_following_ratio: np.ndarray
    role: np.ndarray


def interaction_stats(
    records: Sequence[UserRecord], rules: RoleRules | None = None
) -> InteractionStats:
    """Interaction statistics and roles of ``records`` (formulas in the module docstring)."""
    rules = rules or RoleRules()
    n = len(records)
    counts = np.zeros((n, 3), dtype=np.float64)  # post, retweet, reply
    followers = np.zeros(n)
    following = np.zeros(n)
    statuses = np.full(n, -1.0)
    for i, rec in enumerate(records):
        if rec.statuses is not None:
            statuses[i] = rec.statuses
        kinds = np.asarray(rec.post_kinds(), dtype=np.int64)
        counts[i] = np.bincount(kinds, minlength=3)[:3] if len(kinds) else 0
        followers[i] = max(rec.followers, 0)
        following[i] = max(rec.following, 0)
    total = counts.sum(axis=1)
    originals, retweets, replies = counts[:, 0], counts[:, 1], counts[:, 2]
    share = np.maximum(total, 1)
    prr = originals / np.maximum(retweets, 1)
    reply = replies / share
    ffr = followers / np.maximum(following, 1)
    role = np.full(n, ROLES.index("regular"), dtype=np.int32)
    undecided = np.ones(n, dtype=bool)
    for name, hit in (
        ("lurker", (total < rules.lurker_max_posts) & (statuses < rules.lurker_max_statuses)),
        ("amplifier", retweets / share >= rules.amplifier_min_retweet_share),
        ("conversationalist", reply >= rules.conversationalist_min_reply_share),
        (
            "broadcaster",
            (ffr >= rules.broadcaster_min_follower_ratio)
            & (originals / share >= rules.broadcaster_min_original_share),
        ),
    ):
        pick = undecided & hit
        role[pick] = ROLES.index(name)
        undecided &= ~pick
    return InteractionStats(
        post_retweet_ratio=prr.astype(np.float32),
        reply_frequency=reply.astype(np.float32),
        follower_following_ratio=ffr.astype(np.float32),
        role=role,
    )


@dataclass
class ProfileAttributes:
    """The three text attributes of one user (the fourth, interaction behaviour, is metadata)."""

    identity: str
    interests: list[str]
    posting_style: str


@dataclass(frozen=True)
class StyleThresholds:
    """Cut-offs of the heuristic posting-style phrase (see the module docstring)."""

    short_chars: int = 60
    long_chars: int = 140
    positive_tone: float = 0.2
    negative_tone: float = -0.2
    many_hashtags: float = 1.0
    some_hashtags: float = 0.3
    emoji: float = 0.5
    links: float = 0.5
    mentions: float = 1.0
    emphatic: float = 0.3


_VADER: Any = None


def sentiment_scores(texts: Sequence[str]) -> np.ndarray:
    """(n,) VADER compound scores in [-1, 1] (0 for text VADER does not know, e.g. Chinese).
    Raises :class:`~policysim_infra.extras.DependencyNotInstalled` (an ImportError) if
    ``vaderSentiment`` is missing."""
    global _VADER
    if _VADER is None:
        vader = require("vaderSentiment.vaderSentiment", "llm", "sentiment_scores")
        _VADER = vader.SentimentIntensityAnalyzer()
    return np.array([_VADER.polarity_scores(t)["compound"] for t in texts], dtype=np.float32)


def keyword_pattern(keywords: Sequence[str]) -> re.Pattern[str]:
    """One regex counting keyword hits: ASCII keywords match at a word start (a prefix of
    the word), keywords with spaces or CJK characters match anywhere."""
    prefix = [re.escape(k) for k in keywords if k.isascii() and " " not in k]
    anywhere = [re.escape(k) for k in keywords if not (k.isascii() and " " not in k)]
    parts = []
    if prefix:
        parts.append(r"(?<!\w)(?:" + "|".join(sorted(prefix, key=len, reverse=True)) + ")")
    if anywhere:
        parts.append("(?:" + "|".join(sorted(anywhere, key=len, reverse=True)) + ")")
    return re.compile("|".join(parts) if parts else r"(?!x)x", re.UNICODE)


class HeuristicProfiler:
    """Deterministic, model-free identity / interests / posting style (module docstring)."""

    def __init__(
        self,
        topics: Sequence[str] = TOPICS,
        topic_keywords: dict[str, Sequence[str]] | None = None,
        *,
        min_topic_share: float = 0.1,
        max_interests: int = 3,
        style: StyleThresholds | None = None,
        use_sentiment: bool = True,
    ) -> None:
        self.topics = tuple(topics)
        lexicon = dict(TOPIC_KEYWORDS) if topic_keywords is None else dict(topic_keywords)
        self.keywords = {
            t: tuple(k.lower() for k in lexicon.get(t, (t.lower(),))) for t in self.topics
        }
        self._patterns = {t: keyword_pattern(kw) for t, kw in self.keywords.items()}
        self.min_topic_share = min_topic_share
        self.max_interests = max_interests
        self.style = style or StyleThresholds()
        self.use_sentiment = use_sentiment

    def identity(self, rec: UserRecord) -> str:
        bio = f" {rec.description.lower()} "
        for name, keywords in IDENTITY_RULES:
            if any(k in bio for k in keywords):
                return name
        if rec.verified or rec.followers >= 100_000:
            return "public figure"
        return "ordinary user"

    def interests(self, rec: UserRecord) -> list[str]:
        text = " ".join([rec.description, *rec.posts]).lower()
        tags = " ".join(_HASHTAG.findall(text) + _WEIBO_TAG.findall(text)).replace("#", " ")
        scores = {t: len(p.findall(text)) + len(p.findall(tags)) for t, p in self._patterns.items()}
        need = max(1.0, self.min_topic_share * len(rec.posts))
        ranked = sorted((t for t in self.topics if scores[t] >= need), key=lambda t: -scores[t])
        chosen = ranked[: self.max_interests]
        for domain in rec.domains:
            mapped = _DOMAIN_TO_TOPIC.get(domain.strip().lower(), domain.strip().lower())
            if mapped in self.topics and mapped not in chosen:
                chosen.append(mapped)
        return chosen

    def posting_style(self, rec: UserRecord, tone: float | None = None) -> str:
        posts = [p for p in rec.posts if p.strip()]
        if not posts:
            return "rarely posts"
        s = self.style
        n = len(posts)
        length = float(np.mean([len(p) for p in posts]))
        parts = [
            "short posts"
            if length < s.short_chars
            else "long posts"
            if length > s.long_chars
            else "medium-length posts"
        ]
        if tone is None and self.use_sentiment:
            tone = float(sentiment_scores(posts).mean())
        if tone is not None:
            parts.append(
                "positive tone"
                if tone > s.positive_tone
                else "negative tone"
                if tone < s.negative_tone
                else "neutral tone"
            )
        hashtags = sum(len(_HASHTAG.findall(p)) + len(_WEIBO_TAG.findall(p)) for p in posts) / n
        if hashtags >= s.many_hashtags:
            parts.append("many hashtags")
        elif hashtags >= s.some_hashtags:
            parts.append("some hashtags")
        if sum(len(_EMOJI.findall(p)) for p in posts) / n >= s.emoji:
            parts.append("emoji-heavy")
        if sum(len(_URL.findall(p)) for p in posts) / n >= s.links:
            parts.append("shares links")
        if sum(len(_MENTION.findall(p)) for p in posts) / n >= s.mentions:
            parts.append("mentions others often")
        if sum(1 for p in posts if "!" in p or "！" in p or _CAPS_WORD.search(p)) / n >= s.emphatic:
            parts.append("emphatic")
        return ", ".join(parts)

    def extract(self, records: Sequence[UserRecord]) -> list[ProfileAttributes]:
        return [
            ProfileAttributes(self.identity(r), self.interests(r), self.posting_style(r))
            for r in records
        ]


_DOMAIN_TO_TOPIC = {
    "politics": "politics",
    "business": "economy",
    "entertainment": "entertainment",
    "sports": "sports",
    "sport": "sports",
}

#: Prompt of the LLM profiler; ``{topics}`` is the allowed interest list.
PROFILE_SYSTEM_PROMPT = (
    "You analyse social-media accounts. From an account's bio, metadata and recent posts, "
    "infer: likely_identity (a short occupation or social role, e.g. 'journalist', "
    "'college student', 'retired teacher'), interested_areas (1 to 3 of the allowed areas: "
    "{topics}) and posting_style (a short phrase describing tone, length and habits, e.g. "
    "'sarcastic, short posts, many hashtags'). Answer with one JSON object only."
)


def profile_answer_schema(topics: Sequence[str]) -> dict[str, Any]:
    """JSON schema of one LLM profiler answer."""
    return {
        "type": "object",
        "properties": {
            "likely_identity": {"type": "string", "maxLength": 60},
            "interested_areas": {
                "type": "array",
                "items": {"type": "string", "enum": list(topics)},
                "minItems": 1,
                "maxItems": 3,
            },
            "posting_style": {"type": "string", "maxLength": 100},
        },
        "required": ["likely_identity", "interested_areas", "posting_style"],
        "additionalProperties": False,
    }


def profile_messages(
    rec: UserRecord, topics: Sequence[str], max_posts: int = 10, max_chars: int = 280
) -> list[dict[str, str]]:
    """Chat messages asking an LLM for one user's profile attributes."""
    posts = "\n".join(f"- {p[:max_chars]}" for p in rec.posts[:max_posts]) or "(no posts)"
    user = (
        f"Screen name: {rec.name}\nBio: {rec.description or '(empty)'}\n"
        f"Verified: {'yes' if rec.verified else 'no'}; followers: {rec.followers}; "
        f"following: {rec.following}\nRecent posts:\n{posts}"
    )
    return [
        {"role": "system", "content": PROFILE_SYSTEM_PROMPT.format(topics=", ".join(topics))},
        {"role": "user", "content": user},
    ]


class LLMProfiler:
    """Identity / interests / posting style from an LLM, one batched call for all users.

    ``backend`` is an inference backend of :mod:`agent_models.llm.backends` (see
    :func:`agent_models.llm_calls.generate_json`). Answers that do not parse or validate
    fall back to the :class:`HeuristicProfiler` for that user; ``self.failures`` counts them.
    """

    def __init__(
        self,
        backend: Any,
        topics: Sequence[str] = TOPICS,
        *,
        max_posts: int = 10,
        max_new_tokens: int = 96,
        fallback: HeuristicProfiler | None = None,
    ) -> None:
        self.backend = backend
        self.topics = tuple(topics)
        self.max_posts = max_posts
        self.max_new_tokens = max_new_tokens
        self.fallback = fallback or HeuristicProfiler(self.topics)
        self.failures = 0

    def extract(self, records: Sequence[UserRecord]) -> list[ProfileAttributes]:
        from agent_models.llm_calls import generate_json

        if not records:
            return []
        prompts = [profile_messages(r, self.topics, self.max_posts) for r in records]
        answers = generate_json(
            self.backend,
            prompts,
            profile_answer_schema(self.topics),
            max_new_tokens=self.max_new_tokens,
        )
        out: list[ProfileAttributes] = []
        self.failures = 0
        for rec, answer in zip(records, answers, strict=True):
            parsed = _parse_profile_answer(answer, self.topics)
            if parsed is None:
                self.failures += 1
                parsed = self.fallback.extract([rec])[0]
            out.append(parsed)
        return out


def _parse_profile_answer(answer: str | None, topics: Sequence[str]) -> ProfileAttributes | None:
    if not answer:
        return None
    try:
        data = json.loads(answer)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    identity = data.get("likely_identity")
    areas = data.get("interested_areas")
    style = data.get("posting_style")
    if not (
        isinstance(identity, str)
        and identity.strip()
        and isinstance(style, str)
        and style.strip()
        and isinstance(areas, list)
    ):
        return None
    interests = [a for a in areas if isinstance(a, str) and a in topics]
    return ProfileAttributes(identity.strip()[:60], interests, style.strip()[:100])


def _categorical(values: Sequence[str]) -> Categorical:
    vocab = tuple(sorted(set(values)))
    index = {v: i for i, v in enumerate(vocab)}
    return Categorical(np.array([index[v] for v in values], dtype=np.int32), vocab)


def extract_profiles(
    records: Sequence[UserRecord],
    *,
    backend: Any = None,
    topics: Sequence[str] = TOPICS,
    rules: RoleRules | None = None,
    profiler: HeuristicProfiler | LLMProfiler | None = None,
) -> Profiles:
    """Columnar :class:`Profiles` of ``records``.

    Args:
        records: one per user, in user-id order.
        backend: an LLM backend of :mod:`agent_models.llm`; when given (and ``profiler`` is
            not), identity / interests / style come from :class:`LLMProfiler`.
        topics: the interest areas (columns of ``Profiles.interests``).
        rules: interaction-role thresholds.
        profiler: an explicit profiler (overrides ``backend``).
    """
    topics = tuple(topics)
    if profiler is None:
        profiler = (
            LLMProfiler(backend, topics) if backend is not None else HeuristicProfiler(topics)
        )
    attributes = profiler.extract(records)
    stats = interaction_stats(records, rules)
    interests = np.zeros((len(records), len(topics)), dtype=bool)
    column = {t: j for j, t in enumerate(topics)}
    for i, attr in enumerate(attributes):
        for t in attr.interests:
            if t in column:
                interests[i, column[t]] = True
    return Profiles(
        identity=_categorical([a.identity for a in attributes]),
        interests=interests,
        topics=topics,
        posting_style=_categorical([a.posting_style for a in attributes]),
        interaction_role=Categorical(stats.role, ROLES),
        post_retweet_ratio=stats.post_retweet_ratio,
        reply_frequency=stats.reply_frequency,
        follower_following_ratio=stats.follower_following_ratio,
        names=[r.name for r in records],
    )


def profile_text(profiles: Profiles, i: int, description: str = "") -> str:
    """One line describing user ``i`` (bio + the four attributes), for embedding."""
    d = profiles.describe(i)
    bio = f"{description.strip()} " if description.strip() else ""
    return (
        f"{bio}Identity: {d['likely_identity']}. Interests: {d['interested_areas']}. "
        f"Style: {d['posting_style']}. Role: {profiles.interaction_role[i]}."
    )
