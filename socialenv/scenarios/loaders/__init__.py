"""Dataset loaders: real social-media data → :class:`~socialenv.scenarios.scenario.Scenario`.

- :func:`load_twibot20` / :func:`read_twibot20`: TwiBot-20 (Twitter users, follow graph,
  tweets; humans of one domain, "Politics" by default, as in the paper).
- :func:`load_weibo` / :func:`read_weibo`: the Weibo rumour dataset of Ma et al. (2016)
  (events with repost chains and rumour labels).

``load_*`` return the scenario; ``read_*`` return a :class:`LoadedDataset` that also holds
the observed (event, user, action) tuples used to build SFT / DPO data
(:mod:`agent_models.training`). Malformed input raises :class:`DatasetFormatError`, which
names the file, the record and the field.
"""

from socialenv.scenarios.loaders.common import (
    DatasetFormatError,
    LoadedDataset,
    LoaderConfig,
    heuristic_stance,
    toxicity_scores,
)
from socialenv.scenarios.loaders.twibot20 import load_twibot20, read_twibot20
from socialenv.scenarios.loaders.weibo import load_weibo, read_weibo

__all__ = [
    "DatasetFormatError",
    "LoadedDataset",
    "LoaderConfig",
    "heuristic_stance",
    "load_twibot20",
    "load_weibo",
    "read_twibot20",
    "read_weibo",
    "toxicity_scores",
]
