"""An example lever in one folder: cap the number of posts in the feeds of the users the
policy governs. ``config.py`` (its keyword arguments), ``lever.py`` (what it does to the
platform, through the simulation's hooks), ``env.py`` (arms, contexts, rewards) and one
registry line (``gym.register``, in ``tests/socialenv/test_example_lever.py``) are all a new
lever needs."""

from tests.socialenv.example_lever.config import FeedCapConfig
from tests.socialenv.example_lever.env import FeedCapEnv
from tests.socialenv.example_lever.lever import FeedCapLever

__all__ = ["FeedCapConfig", "FeedCapEnv", "FeedCapLever"]
