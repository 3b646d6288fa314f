"""What every runner shares: the timestep it hands back, one env's running episode, the interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import time

import numpy as np
import torch

from offpolicy.envs import EnvFactory, check_observation, describe_env_failure
from offpolicy.policy import PolicyState


@dataclass
class TimeStep:
    """One environment step, as the seed's runners hand it to the strategy."""

    env_id: int
    observation: np.ndarray
    next_observation: np.ndarray
    """The true next observation, also at the end of an episode (never the reset one)."""
    action: Any
    reward: float
    terminated: bool
    """The episode ended for real: no bootstrapping from `next_observation`."""
    truncated: bool
    """The episode was cut (time limit): bootstrapping continues through it."""
    episode_length: int
    """Steps in the episode so far, this one included."""
    episode_return: float
    """Sum of rewards in the episode so far, this one included."""
    context: dict[str, float]
    """How the action was chosen (e.g. the exploration rate)."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class EnvRunnerError(RuntimeError):
    """An environment failed while a runner stepped it; the message names the env."""


class EnvSession:
    """One environment and its running episode, reset automatically at episode end.

    `busy_since` is the monotonic time the current `step()` or `reset()` began
    (0 when idle), so a watchdog can name an env that hangs.
    """

    def __init__(self, factory: EnvFactory, env_id: int, seed: int) -> None:
        self.env_id = env_id
        self.env = factory()
        self.observation_shape = self.env.observation_space.shape
        self.steps = 0
        self.busy_since = 0.0
        self.call = "reset()"
        self.env.action_space.seed(seed)
        self.observation = self._checked(self.env.reset(seed=seed)[0])
        self.episode_length = 0
        self.episode_return = 0.0

    def _checked(self, observation: Any) -> Any:
        try:
            check_observation(observation, self.observation_shape, self.call)
        except ValueError as error:
            raise EnvRunnerError(describe_env_failure(self.env_id, self.call, self.steps, error)) from None
        return observation

    def step(self, action: Any, context: dict[str, float]) -> TimeStep:
        self.call = "step()"
        self.busy_since = time.monotonic()
        try:
            next_observation, reward, terminated, truncated, _ = self.env.step(action)
        except EnvRunnerError:
            raise
        except Exception as error:
            raise EnvRunnerError(describe_env_failure(self.env_id, self.call, self.steps, error)) from error
        finally:
            self.busy_since = 0.0
        self.steps += 1
        self._checked(next_observation)
        reward = float(reward)
        self.episode_length += 1
        self.episode_return += reward
        timestep = TimeStep(
            env_id=self.env_id,
            observation=self.observation,
            next_observation=next_observation,
            action=action,
            reward=reward,
            terminated=bool(terminated),
            truncated=bool(truncated),
            episode_length=self.episode_length,
            episode_return=self.episode_return,
            context=context,
        )
        if terminated or truncated:
            self.restart()
        else:
            self.observation = next_observation
        return timestep

    def restart(self) -> None:
        """Begin a fresh episode (the env's generator continues, so episodes differ)."""
        self.call = "reset()"
        self.busy_since = time.monotonic()
        try:
            observation, _ = self.env.reset()
        except EnvRunnerError:
            raise
        except Exception as error:
            raise EnvRunnerError(describe_env_failure(self.env_id, self.call, self.steps, error)) from error
        finally:
            self.busy_since = 0.0
        self.observation = self._checked(observation)
        self.episode_length = 0
        self.episode_return = 0.0

    def close(self) -> None:
        self.env.close()


class EnvRunner(ABC):
    """Steps environments with a policy and hands back timesteps."""

    device: torch.device
    """Where the acting policy runs (the inference device)."""

    @abstractmethod
    def run_steps(self, count: int) -> list[TimeStep]:
        """The next `count` timesteps, in the order they completed."""

    @abstractmethod
    def run_episodes(self, count: int) -> list[list[TimeStep]]:
        """`count` whole episodes, each a list of its timesteps."""

    @abstractmethod
    def update_policy(self, state: PolicyState) -> None:
        """Act with these parameters from now on."""

    @abstractmethod
    def policy_state(self) -> PolicyState:
        """The parameters the runner acts with."""

    def close(self) -> None:
        """Release environments and workers."""

    def __enter__(self) -> "EnvRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect_episodes(step, count: int) -> list[list[TimeStep]]:
    """Call `step()` until `count` episodes have ended; used by every runner's `run_episodes`."""
    episodes: list[list[TimeStep]] = []
    current: list[TimeStep] = []
    while len(episodes) < count:
        timestep = step()
        current.append(timestep)
        if timestep.done:
            episodes.append(current)
            current = []
    return episodes


def whole_episodes(runner: EnvRunner, count: int) -> list[list[TimeStep]]:
    """`count` complete episodes from a multi-env runner, in the order they end.

    Episodes already under way when called are stepped through but not
    returned, since their start was handed out earlier.
    """
    episodes: list[list[TimeStep]] = []
    current: dict[int, list[TimeStep]] = {}
    while len(episodes) < count:
        (timestep,) = runner.run_steps(1)
        if timestep.episode_length == 1:
            current[timestep.env_id] = []
        steps = current.get(timestep.env_id)
        if steps is None:
            continue
        steps.append(timestep)
        if timestep.done:
            episodes.append(current.pop(timestep.env_id))
    return episodes
