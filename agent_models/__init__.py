"""User behaviour models ("brains") for PolicySim: the fast surrogate and LLM agents."""

from agent_models.base import Brain
from agent_models.types import (
    BEHAVIOUR_NAMES,
    Behaviour,
    FeedChannel,
    NewsEvent,
    PostColumns,
    PostKind,
    Profiles,
    RoundInput,
    RoundOutput,
    UserColumns,
)

__all__ = [
    "BEHAVIOUR_NAMES",
    "Behaviour",
    "Brain",
    "FeedChannel",
    "NewsEvent",
    "PostColumns",
    "PostKind",
    "Profiles",
    "RoundInput",
    "RoundOutput",
    "UserColumns",
]
