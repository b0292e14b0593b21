"""Tiny language models for tests, examples and CPU benchmarks (no hub, no download).

:func:`build_tiny_lm` writes a complete Hugging Face model directory — a byte-level BPE
tokenizer trained from scratch on generated social-media text (with a ChatML chat
template) and a 2-layer causal LM with random weights — that every loader in PolicySim
(transformers backend, peft/trl training, vLLM) can open by path. It builds in well under
a second on a laptop CPU. Outputs of the model are random; it exists to exercise the code
paths (prompting, constrained decoding, parsing, training loops), not to behave like a user.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from agent_models.types import (
    Categorical,
    NewsEvent,
    PostColumns,
    Profiles,
    RoundInput,
    UserColumns,
)
from policysim_infra.extras import require

#: Special tokens of the tiny tokenizer (ChatML, as in Qwen2).
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

#: ChatML chat template; ``{% generation %}`` marks assistant tokens so trainers can mask
#: the loss to the response (``return_assistant_tokens_mask=True``).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = (
    "the a of to and in is it you that for on with this be are not we my have so just all "
    "news vote law policy climate tax school health vaccine border election court rights "
    "people government media truth fake real think believe agree disagree love hate support "
    "oppose today tomorrow breaking update thread read share follow unfollow like dislike "
    "retweet reply post user feed memory stance favor against neutral summary persona "
    "journalist activist student teacher parent engineer nurse farmer veteran influencer "
    "sarcastic short long hashtags emoji formal casual angry calm funny serious "
    "broadcaster lurker conversationalist amplifier round topic actions text id ids"
).split()
_HASHTAGS = ("#news", "#vote", "#climate", "#health", "#truth", "#breaking", "#policy", "#fyi")
_EMOJI = ("🙂", "🔥", "😡", "👍", "🤔", "💯", "🙄")
_KEYS = ("actions", "type", "post_id", "user_id", "text", "stance", "summary", "memory")
_TYPES = ("post", "retweet", "reply", "like", "dislike", "follow", "unfollow")


def _corpus(seed: int, lines: int = 400) -> list[str]:
    """Generated tweets, JSON answers and prompt fragments: digits, punctuation, unicode."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(lines):
        words = rng.choices(_WORDS, k=rng.randint(5, 18))
        if rng.random() < 0.4:
            words.append(rng.choice(_HASHTAGS))
        if rng.random() < 0.2:
            words.append(rng.choice(_EMOJI))
        sentence = " ".join(words).capitalize() + rng.choice((".", "!", "?", "..."))
        kind = i % 4
        if kind == 0:
            out.append(sentence)
        elif kind == 1:
            out.append(f"[{rng.randint(0, 9999)}] @user_{rng.randint(0, 999)}: {sentence}")
        elif kind == 2:
            act = rng.choice(_TYPES)
            key = rng.choice(_KEYS)
            out.append(
                f'{{"actions":[{{"type":"{act}","post_id":{rng.randint(0, 99999)},'
                f'"text":"{sentence}"}}],"{key}":{rng.randint(-1, 1)}}}'
            )
        else:
            out.append(
                f"Round {rng.randint(0, 30)}: {rng.choice(_WORDS)} = {rng.random():.3f}; "
                f"ids {rng.randint(0, 500)}, {rng.randint(0, 500)} (x{rng.randint(1, 9)}) - {sentence}"
            )
    return out


def build_tiny_lm(
    directory: Path | str,
    seed: int = 0,
    arch: str = "qwen2",
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_position_embeddings: int = 8192,
) -> Path:
    """Build a tiny random causal LM with a from-scratch tokenizer into ``directory``.

    Args:
        directory: output folder (created); afterwards it holds ``config.json``,
            ``model.safetensors``, ``generation_config.json`` and the tokenizer files, so
            ``AutoTokenizer.from_pretrained(directory)`` / ``AutoModelForCausalLM`` /
            ``vllm.LLM(directory)`` load it offline.
        seed: seeds the corpus, the BPE training and the weight init (same seed, same files).
        arch: ``"qwen2"`` or ``"llama"``.
        vocab_size: BPE vocabulary size (byte-level, so any text is encodable).
        hidden_size, num_layers: model size (defaults: 64 hidden, 2 layers, ~0.2 M params).
        max_position_embeddings: context length (prompts of the agents fit in the default).

    Returns:
        ``directory`` as a :class:`~pathlib.Path`.
    """
    import torch

    require("transformers", "llm", "build_tiny_lm")
    require("tokenizers", "llm", "build_tiny_lm")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    if arch not in ("qwen2", "llama"):
        raise ValueError(f"build_tiny_lm: arch={arch!r} is not allowed: use 'qwen2' or 'llama'")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(seed), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=max_position_embeddings,
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)

    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if arch == "qwen2":
            model = Qwen2ForCausalLM(Qwen2Config(**common))
        else:
            model = LlamaForCausalLM(LlamaConfig(**common))
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = pad_id
    model.save_pretrained(directory)
    return directory


_TOPIC_WORDS = (
    "the new abortion bill",
    "the court ruling",
    "state legislators",
    "women's health clinics",
    "the governor",
    "the vote next week",
    "doctors",
    "pro-life groups",
    "pro-choice groups",
    "my family",
    "the church",
    "the protest downtown",
    "the latest poll",
    "the senate debate",
)
_OPINIONS = (
    "is a disaster for women",
    "finally protects the unborn",
    "is more complicated than people admit",
    "has been twisted by the media",
    "should be decided by voters",
    "will end up in court again",
    "is exactly what we voted for",
    "makes me furious",
    "needs a real debate, not slogans",
)
_TAILS = (
    "Read the full text before you share hot takes.",
    "Call your representative today!",
    "I have been saying this for years.",
    "Does anyone have the actual numbers?",
    "Not surprised at all.",
    "This thread explains it well.",
    "#vote #news",
    "Stay informed, friends.",
)


def synthetic_post_text(rng: np.random.Generator, min_chars: int = 40, max_chars: int = 240) -> str:
    """A tweet-like English text of roughly ``min_chars``..``max_chars`` characters."""
    target = int(rng.integers(min_chars, max_chars + 1))
    parts = [f"{rng.choice(_TOPIC_WORDS).capitalize()} {rng.choice(_OPINIONS)}."]
    while len(" ".join(parts)) < target:
        if rng.random() < 0.5:
            parts.append(str(rng.choice(_TAILS)))
        else:
            parts.append(f"{str(rng.choice(_TOPIC_WORDS)).capitalize()} {rng.choice(_OPINIONS)}.")
    text = " ".join(parts)
    return text[:max_chars].rstrip()


def make_round_input(
    num_users: int = 20,
    num_posts: int = 60,
    feed_size: int = 12,
    *,
    active_fraction: float = 1.0,
    latent_dim: int = 384,
    text_chars: tuple[int, int] = (40, 240),
    misinformation_message: str | None = None,
    misinfo_fraction: float = 0.0,
    round_: int = 0,
    seed: int = 0,
    topic: str = "abortion legislation in the United States",
) -> RoundInput:
    """A self-contained synthetic :class:`RoundInput` (no ``socialenv`` needed): N users with
    profiles, a random follow graph, ``num_posts`` history posts with tweet-like texts, and
    a feed of ``feed_size`` posts (not their own) for each active user.

    Used by the brain tests and ``benchmarks/llm_round.py``; ``latent_dim`` should match the
    brain's encoder (384 for the default MiniLM) so memory retrieval uses post embeddings.
    """
    rng = np.random.default_rng(seed)
    n = num_users
    topics = ("politics", "health", "religion", "law", "family", "sports", "technology")
    profiles = Profiles(
        identity=Categorical(
            rng.integers(0, 5, n).astype(np.int32),
            ("journalist", "nurse", "student", "pastor", "lawyer"),
        ),
        interests=rng.random((n, len(topics))) < 0.3,
        topics=topics,
        posting_style=Categorical(
            rng.integers(0, 3, n).astype(np.int32),
            ("sarcastic, short", "formal, long threads", "emotional, many hashtags"),
        ),
        interaction_role=Categorical(
            rng.integers(0, 3, n).astype(np.int32), ("broadcaster", "conversationalist", "lurker")
        ),
        post_retweet_ratio=rng.uniform(0.2, 3, n).astype(np.float32),
        reply_frequency=rng.uniform(0, 0.6, n).astype(np.float32),
        follower_following_ratio=rng.uniform(0.1, 5, n).astype(np.float32),
    )

    def unit(x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    stance = rng.uniform(-1, 1, n).astype(np.float32)
    misinformed = rng.random(n) < misinfo_fraction
    users = UserColumns(
        profiles=profiles,
        latent=unit(rng.standard_normal((n, latent_dim))),
        memory_latent=unit(rng.standard_normal((n, latent_dim))),
        stance=stance,
        opinion=stance.copy(),
        activity=np.full(n, active_fraction, np.float32),
        toxicity_propensity=rng.uniform(0, 0.5, n).astype(np.float32),
        susceptibility=rng.uniform(0, 1, n).astype(np.float32),
        misinformed=misinformed,
        exposure=np.ones(n, np.float32),
    )
    p = num_posts
    author = rng.integers(0, n, p).astype(np.int64)
    misinfo = misinformed[author] if misinformation_message else np.zeros(p, bool)
    texts: list[str | None] = []
    for i in range(p):
        text = synthetic_post_text(rng, *text_chars)
        if misinfo[i]:
            text = f"{misinformation_message} {text}"[: text_chars[1]]
        texts.append(text)
    posts = PostColumns(
        author=author,
        round=np.full(p, -1, np.int32),
        kind=np.zeros(p, np.int8),
        parent=np.full(p, -1, np.int64),
        latent=unit(rng.standard_normal((p, latent_dim))),
        stance=np.clip(stance[author] + 0.1 * rng.standard_normal(p), -1, 1).astype(np.float32),
        toxicity=rng.uniform(0, 0.3, p).astype(np.float32),
        misinfo=misinfo,
        likes=rng.integers(0, 5, p).astype(np.int32),
        dislikes=np.zeros(p, np.int32),
        retweets=rng.integers(0, 3, p).astype(np.int32),
        replies=rng.integers(0, 3, p).astype(np.int32),
        text=texts,
    )
    follows = rng.random((n, n)) < min(1.0, 5 / max(n, 1))
    np.fill_diagonal(follows, False)
    indptr = np.concatenate([[0], np.cumsum(follows.sum(axis=1))]).astype(np.int64)
    indices = np.nonzero(follows)[1].astype(np.int64)
    active = np.flatnonzero(rng.random(n) < active_fraction).astype(np.int64)
    feed = np.full((len(active), feed_size), -1, np.int64)
    for b, u in enumerate(active.tolist()):
        candidates = np.flatnonzero(author != u)
        k = min(feed_size, len(candidates))
        feed[b, :k] = rng.choice(candidates, size=k, replace=False)
    channel = rng.integers(0, 3, feed.shape).astype(np.int8)
    return RoundInput(
        round=round_,
        active=active,
        feed=feed,
        feed_channel=channel,
        users=users,
        posts=posts,
        following_indptr=indptr,
        following_indices=indices,
        news=[NewsEvent(round_, "Breaking: the state senate passes the bill", -0.3)],
        topic=topic,
        misinformation_message=misinformation_message,
        rng=np.random.default_rng(seed + 1),
    )
