"""Micro-level evaluation of user agents (Table 2 of the paper): BERTScore F1, BertSim,
behaviour accuracy, self-consistency accuracy and an LLM judge. See
:mod:`agent_models.evaluation.micro`; ``policysim eval micro`` is in
:mod:`policysim.evaluate_cli`. Heavy libraries are imported inside functions."""

from agent_models.evaluation.micro import (
    METRICS,
    MicroEvalConfig,
    MicroResult,
    bertscore,
    bertscore_builtin,
    evaluate_micro,
    micro_table,
    print_micro_table,
)

__all__ = [
    "METRICS",
    "MicroEvalConfig",
    "MicroResult",
    "bertscore",
    "bertscore_builtin",
    "evaluate_micro",
    "micro_table",
    "print_micro_table",
]
