"""LLM-driven user agents (§2.1 of the paper): prompts, answer schema and validation, stance,
memory, toxicity, misinformation, and four inference backends (vLLM, transformers,
llama.cpp, OpenAI-compatible HTTP) behind one interface, with an optional replay cache.

Importing this package is cheap: torch, transformers, vllm, llama_cpp, openai and
sentence-transformers are imported only when a brain or backend is built.

Quick use::

    import gymnasium as gym, socialenv
    env = gym.make("PolicySim-Rec-v0", users="llm",
                   llm={"backend": "hf", "model": "/path/to/causal-lm"})
"""

from agent_models.llm.backends import (
    BACKENDS,
    Backend,
    Generation,
    LLMBackendError,
    Sampling,
    make_backend,
)
from agent_models.llm.brain import LLMBrain, profile_text
from agent_models.llm.config import ACTION_TYPES, LLMConfig, MemoryConfig
from agent_models.llm.memory import MemoryStore
from agent_models.llm.prompts import (
    agent_messages,
    agent_system_prompt,
    agent_user_prompt,
    agreement_messages,
    consolidation_messages,
    feed_line,
    stance_messages,
    summary_messages,
)
from agent_models.llm.schema import (
    AUX_INVALID_REASONS,
    INVALID_REASONS,
    AgentAnswer,
    FeedView,
    ParsedAnswer,
    StanceAnswer,
    answer_json,
    answer_schema,
    parse_answer,
    parse_stance,
    stance_schema,
)
from agent_models.llm.signals import TextEncoder, make_toxicity, misinformation_update

__all__ = [
    "ACTION_TYPES",
    "AUX_INVALID_REASONS",
    "BACKENDS",
    "INVALID_REASONS",
    "AgentAnswer",
    "Backend",
    "FeedView",
    "Generation",
    "LLMBackendError",
    "LLMBrain",
    "LLMConfig",
    "MemoryConfig",
    "MemoryStore",
    "ParsedAnswer",
    "Sampling",
    "StanceAnswer",
    "TextEncoder",
    "agent_messages",
    "agreement_messages",
    "agent_system_prompt",
    "agent_user_prompt",
    "answer_json",
    "answer_schema",
    "consolidation_messages",
    "feed_line",
    "make_backend",
    "make_toxicity",
    "misinformation_update",
    "parse_answer",
    "parse_stance",
    "profile_text",
    "stance_messages",
    "stance_schema",
    "summary_messages",
]
