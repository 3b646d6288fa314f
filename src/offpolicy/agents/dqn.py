"""DQN: a Q-network, a target network, epsilon-greedy exploration, double-DQN targets.

One update (`DQNLearner.train`), on a batch of transitions (s, a, r, s', terminated) with weights w and
discounts d (gamma, or gamma^m where r sums m rewards: n-step returns):
1. target: y = r + d * (1 - terminated) * Q_target(s', argmax_a' Q(s', a'))   (double DQN), or with
   `double_q` off y = r + d * (1 - terminated) * max_a' Q_target(s', a')   (the Nature DQN's);
2. loss = mean_b w_b * huber(Q(s, a) - y), one Adam (or RMSProp) step with the gradient norm clipped to
   `max_grad_norm`;
3. target: Q_target <- (1 - tau) * Q_target + tau * Q, or with `target_update_interval` C > 0, Q_target <- Q
   every C updates (the Nature DQN's copy).
Acting takes argmax_a Q(s, a), or with probability epsilon a uniformly random action; epsilon decays
exponentially (or linearly) with the environment steps acted (`EpsilonGreedy`). With `dueling`, Q is computed as
V(s) + A(s, a) - mean_a' A(s, a') (`DuelingQNetwork`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from offpolicy.agents.common import discrete_actions, hidden_widths, soft_update, validate_common
from offpolicy.agents.custom_encoder import CustomEncoder
from offpolicy.agents.exploration import SCHEDULES, EpsilonGreedy
from offpolicy.agents.networks import Encoder, make_encoder, q_network
from offpolicy.agents.optim import OPTIMIZERS, make_optimizer
from offpolicy.buffer import TransitionBatch
from offpolicy.config import ConfigError
from offpolicy.policy import ParameterHandover, Policy, PolicyLearner, PolicyOutput, PolicyState, TrainOutput


@dataclass
class DQNConfig:
    """DQN hyperparameters; each is also a `offpolicy train dqn` option."""

    lr: float = 3e-4
    """Learning rate of the optimiser."""
    optimizer: str = "adam"
    """adam, or rmsprop: the centred RMSProp of the Nature DQN and the MinAtar paper (decay 0.95, epsilon
    0.01), gentler than Adam at the same rate."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft target update rate per optimisation step (1.0 copies the online network)."""
    target_update_interval: int = 0
    """Optimisation steps between copies of the online network into the target; 0 updates it softly, with
    `tau`, after every step."""
    hidden: int = 64
    """Width of each hidden layer."""
    layers: int = 3
    """Linear layers in the Q-network (2 or more)."""
    net_arch: tuple[int, ...] = ()
    """Widths of the Q-network's hidden layers, e.g. 256,256 (`--net-arch 256,256`); when given, `hidden`
    and `layers` are not used for it."""
    network: str = "auto"
    """How observations are encoded: auto (convolutions for images, else flattened), mlp (always flattened)
    or cnn (convolutions; needs image observations)."""
    activation: str = "relu"
    """The activation between hidden layers: relu, tanh, elu or gelu."""
    exploration_start: float = 0.99
    """Exploration rate (epsilon) at the first step."""
    exploration_end: float = 0.05
    """Exploration rate it decays towards."""
    exploration_decay: float = 6000.0
    """Environment steps over which epsilon - end shrinks by a factor e (exponential schedule), or over
    which epsilon falls from start to end (linear schedule)."""
    exploration_schedule: str = "exponential"
    """How epsilon falls with the steps acted: exponential or linear (CleanRL's and SB3's schedule)."""
    max_grad_norm: float = 10.0
    """Gradients are rescaled to at most this global norm."""
    dueling: bool = False
    """Separate value and advantage heads: Q = V + A - mean(A) (dueling network)."""
    double_q: bool = True
    """Double-DQN targets: the online network picks the next action and the target network values it; false
    takes the target network's own maximum (the Nature DQN's and Stable-Baselines3's target)."""

    def validate(self) -> None:
        validate_common(self)
        for name in ("exploration_start", "exploration_end"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        if not self.exploration_decay > 0:
            raise ConfigError(f"exploration_decay must be positive, got {self.exploration_decay}")
        if not self.max_grad_norm > 0:
            raise ConfigError(f"max_grad_norm must be positive, got {self.max_grad_norm}")
        if self.target_update_interval < 0:
            raise ConfigError(f"target_update_interval must be 0 (soft updates) or more, got {self.target_update_interval}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.exploration_schedule not in SCHEDULES:
            raise ConfigError(f"exploration_schedule must be one of {', '.join(SCHEDULES)}, got "
                              f"{self.exploration_schedule!r}")


class DQNPolicy(Policy):
    """Epsilon-greedy over a Q-network."""

    def __init__(self, q_network: nn.Module, exploration: EpsilonGreedy) -> None:
        self.q_network = q_network
        self.device = next(q_network.parameters()).device
        self._exploration = exploration
        self._handover = ParameterHandover(q_network)

    @property
    def exploration(self) -> EpsilonGreedy:
        return self._exploration

    def q_values(self, observations: torch.Tensor) -> torch.Tensor:
        """Q(s, a) for every action, shape (batch, actions)."""
        return self.q_network(observations)

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        with torch.no_grad():
            greedy = self.q_values(observations).argmax(dim=1)
        if deterministic:
            return PolicyOutput(greedy, {})
        actions, epsilon = self.exploration.choose(greedy.cpu().numpy())
        return PolicyOutput(torch.from_numpy(actions).to(self.device), {"exploration_rate": epsilon})

    def state(self) -> PolicyState:
        return self._handover.snapshot()

    def update(self, state: PolicyState) -> None:
        self._handover.adopt(state)

    def to(self, device: torch.device | str) -> "DQNPolicy":
        self.q_network.to(device)
        self.device = torch.device(device)
        return self


class DQNLearner(PolicyLearner):
    """Trains the Q-network; `policy()` acts with the live network."""

    policy_class: type[DQNPolicy] = DQNPolicy

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
        custom_encoder: CustomEncoder | None = None,
    ) -> None:
        self.config = c = config or DQNConfig()
        c.validate()
        num_actions = discrete_actions("DQN", action_space)
        torch.manual_seed(seed)  # before the encoder: a convolutional one has weights of its own
        encoder = make_encoder(observation_space, "DQN", c.network, custom_encoder)
        self.device = torch.device(device)
        self.gamma = c.gamma
        self.q_network = self.make_q_network(encoder, num_actions).to(self.device)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.parameters = list(self.q_network.parameters())
        self.optimizer = make_optimizer(c.optimizer, self.parameters, c.lr)
        exploration = EpsilonGreedy(num_actions, c.exploration_start, c.exploration_end, c.exploration_decay, seed,
                                    c.exploration_schedule)
        self._policy = self.policy_class(self.q_network, exploration)
        self.updates = 0

    def make_q_network(self, encoder: Encoder, num_actions: int) -> nn.Module:
        """The Q-network: one value per action."""
        c = self.config
        return q_network(encoder, num_actions, hidden_widths(c), c.dueling, activation=c.activation)

    def train(self, batch: TransitionBatch) -> TrainOutput:
        c = self.config
        with torch.no_grad():
            next_values = self.target_network(batch.next_observations)
            if c.double_q:
                next_actions = self.q_network(batch.next_observations).argmax(dim=1, keepdim=True)
                next_q = next_values.gather(1, next_actions).squeeze(1)
            else:
                next_q = next_values.max(dim=1).values
            target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * next_q
        q_values = self.q_network(batch.observations).gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
        loss = (batch.weights * F.smooth_l1_loss(q_values, target, reduction="none")).mean()

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, c.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.updates += 1
        self.update_target()
        q_values = q_values.detach()
        return TrainOutput({"loss": loss.detach(), "q_values": q_values.mean()}, (q_values - target).abs())

    def update_target(self) -> None:
        """After an optimisation step: the soft update with tau, or every `target_update_interval` steps a
        copy."""
        interval = self.config.target_update_interval
        if interval == 0:
            soft_update(self.target_network, self.q_network, self.config.tau)
        elif self.updates % interval == 0:
            soft_update(self.target_network, self.q_network, 1.0)

    def policy(self) -> DQNPolicy:
        return self._policy

    def state_dict(self) -> dict[str, Any]:
        return {
            "q_network": self.q_network.state_dict(),
            "target_network": self.target_network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.q_network.load_state_dict(state["q_network"])
        self.target_network.load_state_dict(state["target_network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
