"""Exploration: how a policy departs from its best guess while collecting, as one object per policy.

Each holds its random stream and, where exploration follows the run's progress,
the environment steps acted so far. Policies own one and expose it
(`Policy.exploration`); the run saves its state in every checkpoint, and each
copy that acts beside others (one per Ray actor) is seeded afresh, so no two
copies explore in lockstep. An agent gets all of that by composing one of these.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Mapping

import numpy as np
import torch


class Exploration(ABC):
    """A random stream (with its state and seeding) and the environment steps acted so far."""

    env_steps: int = 0
    """Environment steps acted so far, which progress-dependent schedules follow."""
    random_steps: int = 0
    """For continuous actions: the run's first steps acted uniformly at random over the action range, before
    the policy's own exploration takes over (`random_start`)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The random state, saved in checkpoints so a resumed run continues it."""

    @abstractmethod
    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `state` returned."""

    @abstractmethod
    def seed(self, seed: int) -> None:
        """Start the random draws afresh from `seed`."""

    def to(self, device: torch.device) -> None:
        """Follow the policy to `device` (only streams that draw on the device move)."""

    def random_start(self, count: int) -> bool:
        """Count `count` actions as acted; true if they fall in the run's first `random_steps` steps, where
        they are drawn uniformly at random instead of from the policy."""
        random = self.env_steps < self.random_steps
        self.env_steps += count
        return random


class NoExploration(Exploration):
    """For policies that never explore (and stand-ins in tests): nothing to save or seed."""

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        pass

    def seed(self, seed: int) -> None:
        pass


class NumpyStream(Exploration):
    """Draws from a NumPy generator (cheaper than torch's for a handful of numbers per step)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.env_steps = 0

    def state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)


SCHEDULES = ("exponential", "linear")
"""How epsilon falls with the steps acted."""


class EpsilonGreedy(NumpyStream):
    """A uniformly random action with probability epsilon, which falls with the steps acted: exponentially,
    epsilon = end + (start - end) * exp(-env_steps / decay), or linearly from start to end over `decay` steps."""

    def __init__(self, num_actions: int, start: float, end: float, decay: float, seed: int,
                 schedule: str = "exponential") -> None:
        super().__init__(seed)
        self.num_actions = num_actions
        self.start, self.end, self.decay, self.schedule = start, end, decay, schedule

    def rate(self) -> float:
        """Epsilon at the current step."""
        if self.schedule == "linear":
            return self.start + (self.end - self.start) * min(1.0, self.env_steps / self.decay)
        return self.end + (self.start - self.end) * math.exp(-self.env_steps / self.decay)

    def draw(self, count: int) -> tuple[float, np.ndarray, np.ndarray]:
        """For `count` actions chosen now: epsilon, which of them explore, and a random action for each.
        Counts them as acted."""
        epsilon = self.rate()
        self.env_steps += count
        explore = self.rng.random(count) < epsilon
        random_actions = (self.rng.random(count) * self.num_actions).astype(np.int64)
        return epsilon, explore, random_actions

    def choose(self, greedy: np.ndarray) -> tuple[np.ndarray, float]:
        """The actions to take instead of `greedy` ones, and epsilon."""
        epsilon, explore, random_actions = self.draw(len(greedy))
        return np.where(explore, random_actions, greedy), epsilon


class GaussianNoise(NumpyStream):
    """N(0, std) added to actions in [-1, 1], clipped back into that range; uniformly random actions
    instead during the run's first `random_steps` steps."""

    def __init__(self, std: float, seed: int, random_steps: int = 0) -> None:
        super().__init__(seed)
        self.std = std
        self.random_steps = random_steps

    def perturb(self, unit_actions: torch.Tensor) -> torch.Tensor:
        """The actions to take instead of the policy's `unit_actions`; counts them as acted."""
        if self.random_start(len(unit_actions)):
            uniform = self.rng.uniform(-1.0, 1.0, unit_actions.shape).astype(np.float32)
            return torch.from_numpy(uniform).to(unit_actions.device)
        if self.std <= 0:
            return unit_actions
        noise = torch.from_numpy(self.rng.normal(0.0, self.std, unit_actions.shape).astype(np.float32))
        return (unit_actions + noise.to(unit_actions.device)).clamp(-1.0, 1.0)


class PolicySampling(Exploration):
    """Sampling from a stochastic policy's own distribution, with a torch generator on the policy's device;
    uniformly random actions instead during the run's first `random_steps` steps."""

    def __init__(self, device: torch.device, seed: int, random_steps: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.env_steps = 0
        self.random_steps = random_steps

    def uniform(self, shape: torch.Size) -> torch.Tensor:
        """Actions drawn uniformly from [-1, 1]."""
        return torch.rand(shape, generator=self.generator, device=self.device) * 2.0 - 1.0

    def state(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["generator"])

    def seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def to(self, device: torch.device) -> None:
        """A generator lives on one device: a new one there, seeded from this one's next draw."""
        if device != self.device:
            seed = int(torch.randint(2**62, (1,), generator=self.generator))
            self.device = device
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(seed)
