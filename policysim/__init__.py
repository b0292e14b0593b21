"""PolicySim's tools: the ``policysim`` command (run, sweep, play, fit, data, train, evaluate),
run folders, sweeps, plots and summaries.

The top layer: it imports ``socialenv``, ``baselines``, ``bandits`` and ``agent_models``; none of
them imports it.
"""
