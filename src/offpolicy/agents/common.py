"""Helpers every agent shares: hyperparameter rules, action-space checks, action scaling, target updates."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from offpolicy.agents.networks import ACTIVATIONS
from offpolicy.config import ConfigError
from offpolicy.envs import EnvError


NETWORKS = ("auto", "mlp", "cnn")
"""The observation encoders one may ask for (`agents.networks.make_encoder`)."""


def validate_common(config: object) -> None:
    """The rules every agent shares for lr, random_steps, gamma, tau, hidden, layers, network, activation
    and switches."""
    lr, gamma, tau = config.lr, config.gamma, config.tau  # type: ignore[attr-defined]
    hidden, layers = config.hidden, config.layers  # type: ignore[attr-defined]
    if not lr > 0:
        raise ConfigError(f"lr must be positive, got {lr}")
    if getattr(config, "critic_lr", 0.0) < 0:
        raise ConfigError(f"critic_lr must be 0 (the same as lr) or positive, got {config.critic_lr}")  # type: ignore
    if getattr(config, "random_steps", 0) < 0:
        raise ConfigError(f"random_steps must be 0 or more, got {config.random_steps}")  # type: ignore
    if not 0 <= gamma <= 1:
        raise ConfigError(f"gamma must be between 0 and 1, got {gamma}")
    if not 0 < tau <= 1:
        raise ConfigError(f"tau must be in (0, 1], got {tau}")
    if hidden < 1:
        raise ConfigError(f"hidden must be at least 1, got {hidden}")
    if layers < 2:
        raise ConfigError(f"layers must be at least 2, got {layers}")
    network = config.network  # type: ignore[attr-defined]
    if network not in NETWORKS:
        raise ConfigError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")
    for arch in NET_ARCHS:
        widths = getattr(config, arch, ())
        if widths and not all(isinstance(width, int) and width >= 1 for width in widths):
            raise ConfigError(f"{arch} must list whole numbers of at least 1, got {list(widths)}")
    activation = config.activation  # type: ignore[attr-defined]
    if activation not in ACTIVATIONS:
        raise ConfigError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        if field.type in (bool, "bool") and not isinstance(value, bool):  # "no" would count as true
            raise ConfigError(f"{field.name} must be true or false, got {value!r}")


NET_ARCHS = ("net_arch", "actor_net_arch", "critic_net_arch")
"""The fields that may give a network's hidden widths layer by layer (`hidden_widths`)."""


def hidden_widths(config: object, arch: str = "net_arch") -> list[int]:
    """The hidden layers' widths of a network: its `arch` field (`--net-arch 256,256`) where given, else
    `layers - 1` layers of `hidden`."""
    widths = list(getattr(config, arch, ()) or ())
    return widths or [config.hidden] * (config.layers - 1)  # type: ignore[attr-defined]


def discrete_actions(agent: str, action_space: gym.Space) -> int:
    """The number of actions, or an error naming the agent and the space."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise EnvError(
            f"{agent} needs a Discrete action space, got {action_space}; "
            "for continuous actions use an agent for Box actions"
        )
    return int(action_space.n)


def bounded_box_actions(agent: str, action_space: gym.Space) -> int:
    """The flat action size, or an error naming the agent and the space."""
    if not isinstance(action_space, gym.spaces.Box):
        raise EnvError(
            f"{agent} needs a bounded Box action space, got {action_space}; for discrete actions use dqn"
        )
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise EnvError(f"{agent} needs finite action bounds, got {action_space}")
    return int(np.prod(action_space.shape))


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
