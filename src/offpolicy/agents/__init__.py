"""The agents: one algorithm per module, all behind the same `PolicyLearner` interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import gymnasium as gym
import torch

from offpolicy.agents.dqn import DQNConfig, DQNLearner, DQNPolicy
from offpolicy.agents.sac import SACConfig, SACLearner, SACPolicy
from offpolicy.agents.td3 import TD3Config, TD3Learner, TD3Policy
from offpolicy.config import ConfigError, from_dict
from offpolicy.policy import PolicyLearner


@dataclass(frozen=True)
class AgentSpec:
    """How to build an agent: its hyperparameter dataclass and its learner."""

    config_class: type
    learner_class: Callable[..., PolicyLearner]


AGENTS: dict[str, AgentSpec] = {
    "dqn": AgentSpec(DQNConfig, DQNLearner),
    "sac": AgentSpec(SACConfig, SACLearner),
    "td3": AgentSpec(TD3Config, TD3Learner),
}


def agent_spec(name: str) -> AgentSpec:
    try:
        return AGENTS[name]
    except KeyError:
        raise ConfigError(f"unknown agent {name!r}; available: {', '.join(AGENTS)}") from None


def make_learner(
    name: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    hyperparameters: Mapping[str, Any],
    device: torch.device | str,
    seed: int,
) -> PolicyLearner:
    """Build agent `name` for these spaces; unknown hyperparameters are an error naming them."""
    spec = agent_spec(name)
    config = from_dict(spec.config_class, hyperparameters, f"the {name} hyperparameters")
    return spec.learner_class(observation_space, action_space, config, device=device, seed=seed)


__all__ = [
    "AGENTS",
    "AgentSpec",
    "DQNConfig",
    "DQNLearner",
    "DQNPolicy",
    "SACConfig",
    "SACLearner",
    "SACPolicy",
    "TD3Config",
    "TD3Learner",
    "TD3Policy",
    "agent_spec",
    "make_learner",
]
