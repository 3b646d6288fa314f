"""Named sets of settings: tuned ones per agent and environment, and the seed framework's example.

A preset is a partial `RunConfig` as a dict; options given on the command line
(or fields given in Python) override it.
"""

from __future__ import annotations

import copy
from typing import Any

from offpolicy.config import ConfigError

SEED_EXAMPLE: dict[str, Any] = {
    "agent": "dqn",
    "env": "CartPole-v1",
    "num_steps": 40_000,
    "strategy": {
        "num_envs": 8,
        "autobatch_size": 8,
        "replay_buffer_size": 50_000,
        "train_interval": 8,
        "train_steps": 4,
        "train_batch_size": 128,
        "eval_interval": 4_000,
        "eval_episodes": 5,
        "warmup_steps": 0,
    },
    "hyperparameters": {"lr": 3e-4, "gamma": 0.99, "tau": 0.005, "hidden": 64, "layers": 3},
}

PRESETS: dict[str, dict[str, Any]] = {
    "dqn-cartpole": {
        "agent": "dqn",
        "env": "CartPole-v1",
        "num_steps": 40_000,
        "strategy": {
            "num_envs": 8,
            "autobatch_size": 8,
            "replay_buffer_size": 100_000,
            "train_interval": 64,
            "train_steps": 32,
            "train_batch_size": 64,
            "eval_interval": 2_500,
            "eval_episodes": 5,
            "warmup_steps": 1_000,
        },
        "hyperparameters": {
            "lr": 2.3e-3,
            "gamma": 0.99,
            "tau": 0.02,
            "hidden": 256,
            "layers": 3,
            "exploration_start": 0.99,
            "exploration_end": 0.04,
            "exploration_decay": 2_500.0,
        },
    },
    "seed-example": SEED_EXAMPLE,
}
"""`dqn-cartpole` is what a bare `offpolicy train` runs; `seed-example` is the seed framework's
example configuration, kept verbatim because the benchmarks compare against it."""

PRESET_DESCRIPTIONS = {
    "dqn-cartpole": "DQN on CartPole-v1, tuned to reach a return of 475+ within 40k steps (the default)",
    "seed-example": "the seed framework's example DQN config on CartPole-v1 (benchmarks use it)",
}


def preset(name: str) -> dict[str, Any]:
    """A copy of preset `name`, safe to modify."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}")
    return copy.deepcopy(PRESETS[name])


def default_preset(agent: str, env: str) -> str | None:
    """The tuned preset for this agent and environment, if there is one."""
    for name, values in PRESETS.items():
        if name != "seed-example" and values["agent"] == agent and values["env"] == env:
            return name
    return None
