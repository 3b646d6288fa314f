"""offpolicy: fast off-policy reinforcement learning on PyTorch and Gymnasium.

The public names are imported on first use, so that environment worker
processes, which import this package, start without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "ConfigError": "offpolicy.config",
    "OffPolicyConfig": "offpolicy.config",
    "RunConfig": "offpolicy.config",
    "DQNConfig": "offpolicy.agents",
    "DQNLearner": "offpolicy.agents",
    "SACConfig": "offpolicy.agents",
    "SACLearner": "offpolicy.agents",
    "TD3Config": "offpolicy.agents",
    "TD3Learner": "offpolicy.agents",
    "Interrupter": "offpolicy.interrupt",
    "TrainResult": "offpolicy.training",
    "train": "offpolicy.training",
    "evaluate_policy": "offpolicy.evaluation",
    "load_policy": "offpolicy.evaluation",
    "save_policy": "offpolicy.evaluation",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'offpolicy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__ + ["__version__"]
