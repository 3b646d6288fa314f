"""DQN: a Q-network, a soft-updated target, epsilon-greedy exploration, double-DQN targets.

The whole algorithm is `DQNLearner.train`: a Huber loss between Q(s, a) and
r + gamma * (1 - terminated) * Q_target(s', argmax_a Q(s', a)), one Adam step
with gradient-norm clipping, then target <- (1 - tau) * target + tau * online.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from offpolicy.agents.continuous import validate_common
from offpolicy.agents.fast_mlp import FastMLP, supports
from offpolicy.agents.optim import LeanAdam
from offpolicy.buffer import TransitionBatch
from offpolicy.envs import EnvError
from offpolicy.policy import (
    ParameterHandover,
    Policy,
    PolicyLearner,
    PolicyOutput,
    PolicyState,
    TrainOutput,
)


@dataclass
class DQNConfig:
    """DQN hyperparameters; each is also a `offpolicy train dqn` option."""

    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft target update rate per optimisation step (1.0 copies the online network)."""
    hidden: int = 64
    """Width of each hidden layer."""
    layers: int = 3
    """Linear layers in the Q-network (2 or more)."""
    exploration_start: float = 0.99
    """Exploration rate (epsilon) at the first step."""
    exploration_end: float = 0.05
    """Exploration rate it decays towards."""
    exploration_decay: float = 6000.0
    """Environment steps over which epsilon - end shrinks by a factor e (exponential decay)."""
    max_grad_norm: float = 10.0
    """Gradients are rescaled to at most this global norm."""

    def validate(self) -> None:
        from offpolicy.config import ConfigError

        validate_common(self)
        for name in ("exploration_start", "exploration_end"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        if not self.exploration_decay > 0:
            raise ConfigError(f"exploration_decay must be positive, got {self.exploration_decay}")
        if not self.max_grad_norm > 0:
            raise ConfigError(f"max_grad_norm must be positive, got {self.max_grad_norm}")


def mlp(inputs: int, outputs: int, hidden: int, layers: int) -> nn.Sequential:
    """`layers` linear layers with ReLU between them."""
    sizes = [inputs] + [hidden] * (layers - 1) + [outputs]
    modules: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        if index:
            modules.append(nn.ReLU())
        modules.append(nn.Linear(fan_in, fan_out))
    return nn.Sequential(*modules)


def flat_rows(values: np.ndarray) -> np.ndarray:
    """A batch as a float32 matrix, one flattened row per item, without copying where possible."""
    return values.reshape(len(values), -1).astype(np.float32, copy=False)


def as_rows(values: torch.Tensor) -> np.ndarray:
    """A CPU tensor as `flat_rows` of its NumPy view."""
    return flat_rows(values.numpy())


def scalar_tensor(value: np.floating) -> torch.Tensor:
    """A NumPy scalar as a 0-d float32 tensor (a third of `torch.tensor`'s cost)."""
    return torch.from_numpy(np.asarray(value, dtype=np.float32))


def check_spaces(observation_space: gym.Space, action_space: gym.Space) -> tuple[int, int]:
    """The flat observation size and the number of actions, or a clear error naming the space."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise EnvError(f"DQN needs a Box observation space, got {observation_space}")
    if not isinstance(action_space, gym.spaces.Discrete):
        raise EnvError(
            f"DQN needs a Discrete action space, got {action_space}; "
            "for continuous actions use an agent for Box actions"
        )
    return int(np.prod(observation_space.shape)), int(action_space.n)


class DQNPolicy(Policy):
    """Epsilon-greedy over a Q-network; epsilon decays with the environment steps acted."""

    def __init__(self, q_network: nn.Module, num_actions: int, config: DQNConfig, seed: int) -> None:
        self.q_network = q_network
        self.num_actions = num_actions
        self.config = config
        self.device = next(q_network.parameters()).device
        self.env_steps = 0
        self._rng = np.random.default_rng(seed)
        self._fast = FastMLP(q_network) if supports(q_network) else None
        self._handover = ParameterHandover(q_network)

    def exploration_rate(self) -> float:
        c = self.config
        return c.exploration_end + (c.exploration_start - c.exploration_end) * math.exp(
            -self.env_steps / c.exploration_decay
        )

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.q_network(observations.to(torch.float32).flatten(1))

    def greedy_actions(self, observations: torch.Tensor) -> torch.Tensor:
        """The actions of highest value; on the CPU computed by NumPy (`FastMLP.predict`)."""
        if self._acts_in_numpy() and observations.device.type == "cpu":
            return torch.from_numpy(self._numpy_greedy(observations.numpy()))
        with torch.no_grad():
            return self.forward(observations).argmax(dim=1)

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        greedy = self.greedy_actions(observations)
        if deterministic:
            return PolicyOutput(greedy, {})
        epsilon, explore, random_actions = self._exploration_draws(len(greedy))
        if self.device.type == "cpu":
            actions = torch.from_numpy(np.where(explore, random_actions, greedy.numpy()))
        else:
            explore_t = torch.from_numpy(explore).to(self.device)
            actions = torch.where(explore_t, torch.from_numpy(random_actions).to(self.device), greedy)
        return PolicyOutput(actions, {"exploration_rate": epsilon})

    def act_arrays(self, observations: np.ndarray, deterministic: bool) -> tuple[np.ndarray, dict[str, float]]:
        if not self._acts_in_numpy():
            return super().act_arrays(observations, deterministic)
        greedy = self._numpy_greedy(observations)
        if deterministic:
            return greedy, {}
        epsilon, explore, random_actions = self._exploration_draws(len(greedy))
        return np.where(explore, random_actions, greedy), {"exploration_rate": epsilon}

    def _acts_in_numpy(self) -> bool:
        return self._fast is not None and self.device.type == "cpu"

    def _numpy_greedy(self, observations: np.ndarray) -> np.ndarray:
        return self._fast.predict(flat_rows(observations)).argmax(1)

    def _exploration_draws(self, count: int) -> tuple[float, np.ndarray, np.ndarray]:
        """Epsilon, which of `count` actions explore, and their random actions; counts the steps acted."""
        epsilon = self.exploration_rate()
        self.env_steps += count
        explore = self._rng.random(count) < epsilon
        random_actions = (self._rng.random(count) * self.num_actions).astype(np.int64)
        return epsilon, explore, random_actions

    def state(self) -> PolicyState:
        return self._handover.snapshot()

    def update(self, state: PolicyState) -> None:
        self._handover.adopt(state)

    def exploration_state(self) -> dict[str, Any]:
        return {"rng": self._rng.bit_generator.state}

    def load_exploration_state(self, state: Mapping[str, Any]) -> None:
        self._rng.bit_generator.state = state["rng"]

    def seed_exploration(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def to(self, device: torch.device | str) -> "DQNPolicy":
        self.q_network.to(device)
        self.device = torch.device(device)
        return self



class DQNLearner(PolicyLearner):
    """Trains the Q-network; `policy()` acts with the live network."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
        fast_path: bool = True,
    ) -> None:
        """`fast_path` updates plain MLPs on the CPU with NumPy and a hand-derived backward
        (`FastMLP`: the same result, 2-3 times as fast for small nets: 64 wide, batch 128,
        0.46-0.57 ms against autograd's 1.2-1.4 ms here); other networks and devices always
        use autograd."""
        self.config = config = config or DQNConfig()
        config.validate()
        observation_size, num_actions = check_spaces(observation_space, action_space)
        self.device = torch.device(device)
        torch.manual_seed(seed)
        self.q_network = mlp(observation_size, num_actions, config.hidden, config.layers).to(self.device)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.parameters = list(self.q_network.parameters())
        self.target_parameters = list(self.target_network.parameters())
        self.optimizer = LeanAdam(self.parameters, config.lr)
        self._policy = DQNPolicy(self.q_network, num_actions, config, seed)
        self.updates = 0
        self._fast = fast_path and supports(self.q_network) and self.device.type == "cpu"
        if self._fast:
            self._fast_online = FastMLP(self.q_network)
            self._fast_target = FastMLP(self.target_network)
            self._grad_scale = torch.ones(())

    def train(self, batch: TransitionBatch) -> TrainOutput:
        output = self._train_fast(batch) if self._fast else self._train_autograd(batch)
        self.updates += 1
        return output

    def _train_autograd(self, batch: TransitionBatch) -> TrainOutput:
        c = self.config
        observations = batch.observations.flatten(1).to(torch.float32)
        next_observations = batch.next_observations.flatten(1).to(torch.float32)
        with torch.no_grad():
            next_actions = self.q_network(next_observations).argmax(dim=1, keepdim=True)
            next_q = self.target_network(next_observations).gather(1, next_actions).squeeze(1)
            target = batch.rewards + c.gamma * (1.0 - batch.terminated) * next_q
        q_values = self.q_network(observations).gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
        loss = F.smooth_l1_loss(q_values, target)

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, c.max_grad_norm, foreach=True)
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.target_parameters, self.parameters, c.tau)
        return {"loss": loss.detach(), "q_values": q_values.detach().mean()}

    def _train_fast(self, batch: TransitionBatch) -> TrainOutput:
        """The same update as `_train_autograd`, computed by NumPy with the gradient written out by hand."""
        c = self.config
        rewards, terminated, actions = batch.rewards.numpy(), batch.terminated.numpy(), batch.actions.numpy()
        size, rows = len(rewards), np.arange(len(rewards))
        observations, next_observations = as_rows(batch.observations), as_rows(batch.next_observations)
        # One online pass over both halves: Q(s, .) for the loss, Q(s', .) for the double-DQN argmax.
        q_both, layer_inputs = self._fast_online.forward(np.concatenate((observations, next_observations)))
        next_q = self._fast_target.predict(next_observations)[rows, q_both[size:].argmax(1)]
        target = rewards + c.gamma * (1.0 - terminated) * next_q
        q_values = q_both[rows, actions]
        error = q_values - target
        clipped = np.minimum(np.maximum(error, -1.0), 1.0)  # the Huber loss's gradient
        loss = np.dot(clipped, error - 0.5 * clipped) / size  # the Huber loss: clipped * (error - clipped / 2)

        q_grad = np.zeros((size, q_both.shape[1]), np.float32)
        q_grad[rows, actions] = clipped / size
        gradient = self._fast_online.backward(q_grad, [inputs[:size] for inputs in layer_inputs])
        # clip_grad_norm_'s rescaling, done by Adam's kernel: gradients divided by max(1, norm / max_norm)
        norm = float(np.sqrt(np.dot(gradient, gradient)))
        self._grad_scale.fill_(max(1.0, (norm + 1e-6) / c.max_grad_norm))
        for parameter, grad in zip(self.parameters, self._fast_online.grads):
            parameter.grad = grad
        self.optimizer.step(self._grad_scale)
        with torch.no_grad():
            torch._foreach_lerp_(self.target_parameters, self.parameters, c.tau)
        return {"loss": scalar_tensor(loss), "q_values": scalar_tensor(np.add.reduce(q_values) / size)}

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
