"""Pieces SAC and TD3 share: bounded Box actions, and twin critics evaluated as one network.

Twin critics are two MLPs Q(s, a); stacking their weights lets one batched
matrix product per layer evaluate both, which halves the operations an update
runs. On a CPU, where small updates are bound by per-operation overhead, that
is a large part of an update's time.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from offpolicy.envs import EnvError


def validate_common(config: object) -> None:
    """The rules every agent (DQN, SAC, TD3) shares for lr, gamma, tau, hidden and layers."""
    from offpolicy.config import ConfigError

    lr, gamma, tau = config.lr, config.gamma, config.tau  # type: ignore[attr-defined]
    hidden, layers = config.hidden, config.layers  # type: ignore[attr-defined]
    if not lr > 0:
        raise ConfigError(f"lr must be positive, got {lr}")
    if not 0 <= gamma <= 1:
        raise ConfigError(f"gamma must be between 0 and 1, got {gamma}")
    if not 0 < tau <= 1:
        raise ConfigError(f"tau must be in (0, 1], got {tau}")
    if hidden < 1:
        raise ConfigError(f"hidden must be at least 1, got {hidden}")
    if layers < 2:
        raise ConfigError(f"layers must be at least 2, got {layers}")


def check_box_spaces(agent: str, observation_space: gym.Space, action_space: gym.Space) -> tuple[int, int]:
    """Flat observation size and action size, or an error naming the agent and the space."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise EnvError(f"{agent} needs a Box observation space, got {observation_space}")
    if not isinstance(action_space, gym.spaces.Box):
        raise EnvError(
            f"{agent} needs a bounded Box action space, got {action_space}; for discrete actions use dqn"
        )
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise EnvError(f"{agent} needs finite action bounds, got {action_space}")
    return int(np.prod(observation_space.shape)), int(np.prod(action_space.shape))


class ActionScale(nn.Module):
    """Maps actions in [-1, 1] (what networks see) to the env's bounds and back."""

    def __init__(self, action_space: gym.spaces.Box) -> None:
        super().__init__()
        low = torch.as_tensor(action_space.low, dtype=torch.float32).flatten()
        high = torch.as_tensor(action_space.high, dtype=torch.float32).flatten()
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("half_range", (high - low) / 2)
        self.shape = tuple(action_space.shape)

    def to_env(self, unit_actions: torch.Tensor) -> torch.Tensor:
        return (self.center + self.half_range * unit_actions).view(-1, *self.shape)

    def to_unit(self, env_actions: torch.Tensor) -> torch.Tensor:
        return ((env_actions.flatten(1).to(torch.float32) - self.center) / self.half_range).clamp(-1.0, 1.0)


class TwinCritic(nn.Module):
    """`copies` independent MLP critics Q(s, a) computed together with batched matmuls."""

    def __init__(self, inputs: int, hidden: int, layers: int, copies: int = 2) -> None:
        super().__init__()
        sizes = [inputs] + [hidden] * (layers - 1) + [1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes, sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation
            self.weights.append(nn.Parameter(torch.empty(copies, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(copies, 1, fan_out).uniform_(-bound, bound)))
        self.copies = copies

    def forward(self, observations: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
        """Q-values of shape (copies, batch)."""
        hidden = torch.cat((observations, unit_actions), dim=1).unsqueeze(0).expand(self.copies, -1, -1)
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            hidden = torch.baddbmm(bias, hidden, weight)
            if index < last:
                hidden = hidden.relu()
        return hidden.squeeze(-1)


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, in one fused operation."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


class frozen:
    """Within the block, `module`'s parameters get no gradients (only its inputs do).

    The actor's loss backpropagates through the critic to the actions; skipping
    the critic's own weight gradients there saves about a third of the backward pass.
    """

    def __init__(self, module: nn.Module) -> None:
        self.parameters = list(module.parameters())

    def __enter__(self) -> None:
        for parameter in self.parameters:
            parameter.requires_grad_(False)

    def __exit__(self, *exc: object) -> None:
        for parameter in self.parameters:
            parameter.requires_grad_(True)
