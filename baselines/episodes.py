"""Play episodes of a PolicySim env with any policy: :mod:`socialenv.episodes`, re-exported.

The code lives in ``socialenv`` (the sweep plays its trials with it, and ``socialenv``
never imports ``baselines``); ``from baselines import play_episode`` keeps working.
"""

from socialenv.episodes import opinion_metrics, play_episode, slate_for

__all__ = ["opinion_metrics", "play_episode", "slate_for"]
