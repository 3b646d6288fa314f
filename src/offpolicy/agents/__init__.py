"""The agents: one algorithm per module, all behind the same `PolicyLearner` interface, in one registry.

Adding an agent is its own module (config dataclass, policy, learner) and one
line in `AGENTS`; a fast path for some of its cases is a second learner class
with a `covers(observation_space, config)` test, chosen here when it applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import gymnasium as gym
import torch

from offpolicy.agents.custom_encoder import CustomEncoder
from offpolicy.agents.dqn import DQNConfig, DQNLearner, DQNPolicy
from offpolicy.agents.fast_cpu import FastDQNLearner
from offpolicy.agents.qrdqn import QRDQNConfig, QRDQNLearner, QRDQNPolicy
from offpolicy.agents.sac import SACConfig, SACLearner, SACPolicy
from offpolicy.agents.td3 import TD3Config, TD3Learner, TD3Policy
from offpolicy.config import ConfigError, from_dict
from offpolicy.normalization import NormalizedLearner
from offpolicy.observations import ObservationLayout
from offpolicy.policy import PolicyLearner


@dataclass(frozen=True)
class AgentSpec:
    """How to build an agent: its hyperparameter dataclass and its learner."""

    config_class: type
    learner_class: Callable[..., PolicyLearner]
    fast_learner_class: Any = None
    """A learner computing the same thing faster where its `covers(observation_space, config)` says it can."""

    def learner_for(
        self, observation_space: gym.Space, config: Any, custom_encoder: CustomEncoder | None = None
    ) -> Callable[..., PolicyLearner]:
        fast = self.fast_learner_class
        if fast is None or custom_encoder is not None or not fast.covers(observation_space, config):
            return self.learner_class
        return fast


AGENTS: dict[str, AgentSpec] = {
    "dqn": AgentSpec(DQNConfig, DQNLearner, FastDQNLearner),
    "qrdqn": AgentSpec(QRDQNConfig, QRDQNLearner),
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
    custom_encoder: CustomEncoder | None = None,
    normalize_observations: bool = False,
    normalize_rewards: bool = False,
) -> PolicyLearner:
    """Build agent `name` for these spaces, its networks over `custom_encoder` where given, trained on
    normalised observations or rewards where asked (`offpolicy.normalization`); unknown hyperparameters
    are an error naming them."""
    spec = agent_spec(name)
    config = from_dict(spec.config_class, hyperparameters, f"the {name} hyperparameters")
    learner_class = spec.learner_for(observation_space, config, custom_encoder)
    learner = learner_class(observation_space, action_space, config, device=device, seed=seed,
                            custom_encoder=custom_encoder)
    if normalize_observations or normalize_rewards:
        learner = NormalizedLearner(learner, observation_space, normalize_observations, normalize_rewards)
    learner.policy().observation_layout = ObservationLayout(observation_space)
    return learner


__all__ = [
    "AGENTS",
    "AgentSpec",
    "CustomEncoder",
    "DQNConfig",
    "DQNLearner",
    "DQNPolicy",
    "FastDQNLearner",
    "QRDQNConfig",
    "QRDQNLearner",
    "QRDQNPolicy",
    "SACConfig",
    "SACLearner",
    "SACPolicy",
    "TD3Config",
    "TD3Learner",
    "TD3Policy",
    "agent_spec",
    "make_learner",
]
