"""Texts that are the agent's own: checks of the posts and replies an answer writes.

A text is rejected (its whole answer, like any invalid answer; the reason is counted in
``RoundOutput.invalid`` and re-asked under ``retry_invalid``) when it

- **copies its prompt** (``"copied_prompt"``): it starts with a memory or profile prefix
  of the prompt (``"@user_3: "``, ``"(round 2)"``, ``"You posted"``, ``"Likely identity:"``
  ...), appears in the prompt whole, shares a run of ``copy_run_words`` words with it, or
  more than ``copy_overlap`` of its word ``copy_ngram``-grams appear in the prompt
  (``LLMConfig`` defaults: 6 words; 3-grams, 0.5). The topic phrase is left out of the
  prompt for these checks: naming the topic is not copying;
- **carries JSON debris** (``"json_debris"``): quote-bracket runs such as ``'}]}{``,
  ``{"``, ``"type":`` left over from the answer format;
- **duplicates another agent's text of the same round** (``"duplicate_text"``): the same
  text (case and spaces folded), or character 4-gram Jaccard similarity of at least
  ``near_duplicate`` (default 0.8) with a text an earlier agent of the round wrote.

Plain string work, per text; no model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Reasons a written text gets its answer rejected (keys of ``RoundOutput.invalid``).
TEXT_INVALID_REASONS: tuple[str, ...] = ("copied_prompt", "json_debris", "duplicate_text")

_WORD = re.compile(r"\w+")
_PREFIX = re.compile(
    r"^\s*(?:\d+[.)]\s*)?(?:@\w+\s*:|\((?:round -?\d+|long-term|before the simulation)\)"
    r"|you (?:posted|liked|disliked|retweeted|replied to|followed|unfollowed)\b"
    r"|(?:likely identity|interested areas|your view on the topic|posting style|how you interact"
    r"|interaction behaviour|what you remember|your feed in round \d+)\s*:)",
    re.IGNORECASE,
)
_DEBRIS = re.compile(r"""['"]\s*[}\]]|[{\[]\s*['"]|[}\]]\s*[,{}\[\]]|"\w+"\s*:""")


def normalise(text: str) -> str:
    """Lower case, white space folded."""
    return " ".join(text.lower().split())


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def char_grams(text: str, n: int = 4) -> set[str]:
    t = normalise(text)
    return {t[i : i + n] for i in range(max(len(t) - n + 1, 1))}


class PromptCopyCheck:
    """The copy and debris checks of the texts of one prompt."""

    def __init__(
        self, prompt: str, ngram: int, overlap: float, run_words: int = 6, topic: str = ""
    ) -> None:
        if topic:
            prompt = prompt.replace(topic, " | ")
        self.prompt = normalise(prompt)
        self.ngram = ngram
        self.overlap = overlap
        self.run_words = run_words
        self.grams = word_ngrams(prompt, ngram)
        self.runs = word_ngrams(prompt, run_words)

    def problem(self, text: str) -> str | None:
        """``"json_debris"``, ``"copied_prompt"`` or None."""
        if _DEBRIS.search(text):
            return "json_debris"
        if _PREFIX.match(text):
            return "copied_prompt"
        own = normalise(text)
        if len(own) >= 12 and own in self.prompt:
            return "copied_prompt"
        if word_ngrams(text, self.run_words) & self.runs:
            return "copied_prompt"
        grams = word_ngrams(text, self.ngram)
        if grams and len(grams & self.grams) / len(grams) > self.overlap:
            return "copied_prompt"
        return None


class RoundTexts:
    """The texts accepted so far in a round, by author, for the duplicate check."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.exact: dict[str, int] = {}
        self.grams: list[tuple[int, set[str]]] = []

    def duplicate(self, text: str, author: int) -> bool:
        """Whether ``text`` repeats (or nearly repeats) a text another author wrote."""
        key = normalise(text)
        if key in self.exact and self.exact[key] != author:
            return True
        grams = char_grams(text)
        for other, seen in self.grams:
            if other != author and len(grams & seen) / max(len(grams | seen), 1) >= self.threshold:
                return True
        return False

    def add(self, texts: Iterable[str], author: int) -> None:
        for text in texts:
            self.exact.setdefault(normalise(text), author)
            self.grams.append((author, char_grams(text)))
