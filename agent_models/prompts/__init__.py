"""Prompt templates of the LLM user agents (``string.Template`` files, ``$name`` fields).

Edit a copy and point :func:`agent_models.llm.prompts.load_template` elsewhere with
``template_dir=`` to experiment with wording; the shipped files are the defaults.
"""
