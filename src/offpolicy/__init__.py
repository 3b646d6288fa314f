"""offpolicy: fast off-policy reinforcement learning on PyTorch and Gymnasium."""

from offpolicy.agents import DQNConfig, DQNLearner
from offpolicy.config import ConfigError, OffPolicyConfig, RunConfig
from offpolicy.interrupt import Interrupter
from offpolicy.training import TrainResult, train

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DQNConfig",
    "DQNLearner",
    "Interrupter",
    "OffPolicyConfig",
    "RunConfig",
    "TrainResult",
    "train",
]
