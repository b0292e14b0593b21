"""SFT → DPO training of the LLM user agents (Eq. 5–6 of the paper) with trl + peft.

- :mod:`agent_models.training.records`: observed (event, user, action) tuples.
- :mod:`agent_models.training.data`: SFT examples in the agents' chat format, DPO pairs.
- :mod:`agent_models.training.train`: LoRA SFT / DPO training (:func:`train_sft`,
  :func:`train_dpo`), producing adapters the hf and vLLM backends load by path.
- :mod:`policysim.train_cli`: ``policysim train sft|dpo``.

Heavy libraries (torch, transformers, trl, peft, datasets) are imported inside functions.
"""

from agent_models.training.records import ObservedAction, load_actions, save_actions, split_actions

__all__ = ["ObservedAction", "load_actions", "save_actions", "split_actions"]
