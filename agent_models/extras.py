"""Optional dependencies: import one where a feature needs it, or say which extra brings it."""

from __future__ import annotations

import importlib
from types import ModuleType

#: The extras of ``pyproject.toml``'s ``[project.optional-dependencies]``.
EXTRAS: tuple[str, ...] = ("llm", "train", "vllm", "llamacpp", "wandb", "distributed", "rl",
                           "test")


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` extra."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (dotted) for ``feature``, or raise :class:`MissingExtraError`.

    Args:
        module: the module to import, e.g. ``"vllm"`` or ``"llama_cpp.llama_grammar"``.
        extra: the extra that installs it (one of :data:`EXTRAS`).
        feature: what needs it, as the user asked for it, e.g. ``"backend='vllm'"``.
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra={extra!r} is not allowed: use one of {EXTRAS}")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"{feature} needs the optional module {module!r} ({err}): "
            f'pip install "policysim[{extra}]"'
        ) from err
