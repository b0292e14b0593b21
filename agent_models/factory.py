"""Build a brain from the env's ``users=`` argument (the population).

Population names: ``"surrogate"``, ``"llm"`` and every name a plugin registered with
:func:`register_population` (the shipped ``baselines`` plugin adds the HiSim ABMs
``"bounded_confidence"``, ``"lorenz"``, ``"relative_agreement"``; see
:mod:`policysim_infra.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_models.base import Brain
from policysim_infra.validation import did_you_mean

BRAIN_KINDS = ("surrogate", "llm")
#: name -> factory(llm=..., surrogate=...) returning a fresh Brain (filled by plugins).
_POPULATIONS: dict[str, Callable[..., Brain]] = {}


def surrogate_config(surrogate: Any) -> Any:
    """The env's ``surrogate=`` argument as a ``SurrogateConfig`` (None = defaults; a path:
    a fitted file, :func:`agent_models.surrogate_file.load_surrogate_file`)."""
    from dataclasses import fields
    from os import PathLike

    from agent_models.surrogate import SurrogateConfig
    from policysim_infra.validation import check

    if isinstance(surrogate, SurrogateConfig):
        return surrogate
    if isinstance(surrogate, str | PathLike):
        from agent_models.surrogate_file import load_surrogate_file

        return load_surrogate_file(surrogate)
    check(
        surrogate is None or isinstance(surrogate, dict),
        "surrogate",
        "None, a fitted JSON file (policysim fit), a dict of SurrogateConfig fields or a SurrogateConfig",
        surrogate,
    )
    allowed = {f.name for f in fields(SurrogateConfig)}
    unknown = sorted(set(surrogate or {}) - allowed)
    check(not unknown, "surrogate", f"keys among {sorted(allowed)}", unknown)
    return SurrogateConfig(**(surrogate or {}))


def register_population(name: str, factory: Callable[..., Brain]) -> None:
    """Make ``users=name`` build ``factory(llm=<env llm=>, surrogate=<env surrogate=>)``
    (a fresh brain per env: a brain keeps per-episode state)."""
    if name in BRAIN_KINDS:
        raise ValueError(f"population name {name!r} is built in")
    _POPULATIONS[name] = factory


def population_names() -> tuple[str, ...]:
    """Every name ``users=`` accepts (built-in and registered by plugins)."""
    from policysim_infra.plugins import load_plugins

    load_plugins()
    return BRAIN_KINDS + tuple(_POPULATIONS)


def make_brain(
    users: str | Brain,
    *,
    llm: dict[str, Any] | Any | None = None,
    surrogate: dict[str, Any] | Any | None = None,
) -> Brain:
    """``users="surrogate"`` (default, CPU, vectorized), ``users="llm"`` (needs ``llm=`` config),
    a registered population name (:func:`population_names`), or a :class:`Brain` instance."""
    if isinstance(users, Brain):
        return users
    if users == "surrogate":
        from agent_models.surrogate import SurrogateBrain

        return SurrogateBrain(surrogate_config(surrogate))
    if users == "llm":
        from agent_models.llm import LLMBrain, LLMConfig

        if llm is None:
            from agent_models.llm.config import BACKENDS

            raise ValueError(
                f"users='llm' needs llm={{'backend': {'|'.join(map(repr, BACKENDS))}, "
                "'model': ...}"
            )
        try:
            config = llm if isinstance(llm, LLMConfig) else LLMConfig.model_validate(llm)
        except ValueError as err:  # pydantic's ValidationError names the inner fields
            raise ValueError(f"llm: {err}") from err
        return LLMBrain(config)
    names = population_names()
    if isinstance(users, str) and users in _POPULATIONS:
        return _POPULATIONS[users](llm=llm, surrogate=surrogate_config(surrogate))
    hint = did_you_mean(users, ("surrogate", "llm", *names)) if isinstance(users, str) else ""
    raise ValueError(
        f"users={users!r} is not allowed: use one of {names} or a Brain instance{hint}"
    )
