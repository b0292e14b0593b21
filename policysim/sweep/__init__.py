"""Grid sweeps: policies × seeds × env configs, in parallel on Ray or in one process.

    from policysim.sweep import SweepConfig, run_sweep
    config = SweepConfig(policies=("origin", "random", "linucb"), seeds=(0, 1, 2),
                         env_kwargs={"num_users": 1000}, grid={"budget": [2, 5]})
    result = run_sweep(config, backend="ray")          # or backend="local"
    print_table(result)

or from the command line, with a W&B-style grid file (``examples/sweep.yaml``)::

    policysim sweep --grid examples/sweep.yaml                     # local Ray cluster
    policysim sweep --grid examples/sweep.yaml --address auto      # an existing cluster
    policysim sweep --grid examples/sweep.yaml --backend local     # no Ray, one process

Every (policy, config, seed) is one *trial*: a fresh env and a fresh policy, ``episodes``
episodes from ``reset(seed=seed * 1000 + episode)`` (the runner's convention), each round
logged to Weights & Biases when ``wandb`` is set (one W&B run per trial, grouped by the
sweep name). The sweep writes ``<out_dir>/<name>/sweep.json`` (config, per-trial results,
the table) and ``rounds.csv`` (every round of every trial), and returns the table: per
(policy, config), the mean ± 95% CI over seeds of the final metrics (``summarize`` of the
runner) plus HiSim's ``bias`` / ``diversity`` of the latent opinions.

Ray is imported only on the Ray path (extra ``distributed``); on a cluster every node must
be able to import ``socialenv``, ``bandits``, ``agent_models`` and the plugins
(``baselines``; :mod:`policysim_infra.plugins`) — install the package on each node, or pass
``ship_code=True`` to upload them with the job's ``runtime_env``. See ``docs/scaling.md``.

Modules: :mod:`~policysim.sweep.config` (what to run), :mod:`~policysim.sweep.grid` (grid
files), :mod:`~policysim.sweep.trial` (one trial), :mod:`~policysim.sweep.execute` (local /
Ray execution) and :mod:`~policysim.sweep.report` (table, files, printout).
"""

from policysim.sweep.config import RUN_PARAMETERS, SWEEP_LIMITS, WANDB_MODES, SweepConfig, Trial
from policysim.sweep.execute import SWEEP_BACKENDS, run_sweep
from policysim.sweep.grid import load_grid
from policysim.sweep.report import (
    TABLE_METRICS,
    SweepResult,
    aggregate,
    config_label,
    print_table,
    write_sweep,
)
from policysim.sweep.trial import run_trial

__all__ = [
    "RUN_PARAMETERS",
    "SWEEP_BACKENDS",
    "SWEEP_LIMITS",
    "TABLE_METRICS",
    "WANDB_MODES",
    "SweepConfig",
    "SweepResult",
    "Trial",
    "aggregate",
    "config_label",
    "load_grid",
    "print_table",
    "run_sweep",
    "run_trial",
    "write_sweep",
]
