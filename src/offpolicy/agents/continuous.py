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
    """The rules SAC and TD3 share for lr, gamma, tau, hidden and layers."""
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


class LeanAdam(torch.optim.Adam):
    """`torch.optim.Adam` with the fused kernel, whose `step()` calls that kernel directly.

    For small networks the optimiser's Python bookkeeping costs more than the
    update itself (about 190 µs against 40 µs here), so once the state exists
    a step is two calls: count the step, run the fused kernel, on the very
    tensors `torch.optim.Adam` keeps. Results, `state_dict` and checkpoints are
    those of `torch.optim.Adam` (a test checks equality); anything unusual
    (several groups, AMSGrad, weight decay, tensors on several devices, a
    missing gradient) takes the regular path. Optimiser step hooks are not
    called: torch's per-step profiler wrapper is what this class avoids.
    """

    def __init__(self, parameters, lr: float, device: torch.device) -> None:
        super().__init__(parameters, lr=lr, fused=device.type in ("cpu", "cuda"))
        self._lean: tuple[list, list, list, list] | None = None

    def _lean_state(self) -> tuple[list, list, list, list] | None:
        group = self.param_groups[0]
        params = group["params"]
        plain = (
            len(self.param_groups) == 1 and group["fused"] and not group["amsgrad"] and not group["maximize"]
            and group["weight_decay"] == 0 and not group["differentiable"] and not group.get("decoupled_weight_decay")
            and all(p in self.state and p.grad is not None for p in params)
            and len({(p.device, p.dtype) for p in params}) == 1
        )
        if not plain:
            return None
        states = [self.state[p] for p in params]
        return params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [s["step"] for s in states]

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        if self._lean is None and closure is None:
            self._lean = self._lean_state()
        if self._lean is None or closure is not None or any(p.grad is None for p in self._lean[0]):
            return super().step(closure)
        params, exp_avgs, exp_avg_sqs, steps = self._lean
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params, [p.grad for p in params], exp_avgs, exp_avg_sqs, [], steps,
            amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"],
            maximize=False, grad_scale=None, found_inf=None,
        )
        return None

    step.hooked = True  # type: ignore[attr-defined]  # keeps torch from wrapping it in its profiler hook (~60 µs)

    def load_state_dict(self, state_dict) -> None:  # type: ignore[override]
        super().load_state_dict(state_dict)
        self._lean = None


def adam(parameters, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam with the fused kernel where torch has one, stepped without per-step bookkeeping."""
    return LeanAdam(parameters, lr, device)


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
