"""What every runner shares: the timestep it hands back, one env's running episode, the interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Sequence, TypeVar

import time

import numpy as np
import torch

from offpolicy.envs import EnvFactory, check_observation, describe_env_failure
from offpolicy.policy import PolicyState
from offpolicy.steps import StepBatch, TimeStep


Chunk = TypeVar("Chunk", StepBatch, np.ndarray)


def pop_steps(ready: "deque[Chunk]", wanted: int) -> Chunk:
    """The oldest ready chunk (a `StepBatch`, or env ids), cut to at most `wanted` steps; the rest stays first."""
    chunk = ready.popleft()
    if len(chunk) > wanted:
        chunk, rest = chunk[:wanted], chunk[wanted:]
        ready.appendleft(rest)
    return chunk


class EnvRunnerError(RuntimeError):
    """An environment failed while a runner stepped it; the message names the env.

    `env_ids` names the envs to replace to go on, where the runner knows them.
    """

    def __init__(self, message: str, env_ids: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.env_ids = tuple(int(env_id) for env_id in env_ids)


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

    def _guarded(self, call: str, function: Any, *args: Any) -> Any:
        """Run one env call marked busy (for the watchdog); its error names this env and its step."""
        self.call = call
        self.busy_since = time.monotonic()
        try:
            return function(*args)
        except EnvRunnerError:
            raise
        except Exception as error:
            raise EnvRunnerError(describe_env_failure(self.env_id, call, self.steps, error)) from error
        finally:
            self.busy_since = 0.0

    def step(self, action: Any, context: dict[str, float]) -> TimeStep:
        observation = self.observation
        return TimeStep(self.env_id, observation, *self.advance(action), context=context)

    def advance(self, action: Any) -> tuple[Any, Any, float, bool, bool, int, float]:
        """One step as a plain tuple, for runners that pack many into arrays: (next observation, action,
        reward, terminated, truncated, episode length, episode return), the fields of `TimeStep` in order."""
        next_observation, reward, terminated, truncated, _ = self._guarded("step()", self.env.step, action)
        self.steps += 1
        if getattr(next_observation, "shape", None) != self.observation_shape:  # the common case costs one compare
            self._checked(next_observation)
        reward = float(reward)
        self.episode_length += 1
        self.episode_return += reward
        length, episode_return = self.episode_length, self.episode_return
        if terminated or truncated:
            self.restart()
        else:
            self.observation = next_observation
        return next_observation, action, reward, bool(terminated), bool(truncated), length, episode_return

    def restart(self) -> None:
        """Begin a fresh episode (the env's generator continues, so episodes differ)."""
        observation, _ = self._guarded("reset()", self.env.reset)
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
    def run_steps(self, count: int) -> StepBatch:
        """The next `count` steps, in the order they completed."""

    @abstractmethod
    def run_episodes(self, count: int) -> list[StepBatch]:
        """`count` whole episodes, each a batch of its steps."""

    @abstractmethod
    def update_policy(self, state: PolicyState) -> None:
        """Act with these parameters from now on."""

    @abstractmethod
    def policy_state(self) -> PolicyState:
        """The parameters the runner acts with."""

    def replace_failed(self, env_ids: Sequence[int], seeds: Sequence[int]) -> bool:
        """Replace the workers of the failed envs `env_ids` (new envs seeded from `seeds`, indexed by env id)
        and keep the others stepping; False when this runner cannot, and all its envs must be recreated."""
        return False

    def close(self) -> None:
        """Release environments and workers."""

    def __enter__(self) -> "EnvRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect_episodes(step, count: int) -> list[StepBatch]:
    """Call `step()` (one `TimeStep`) until `count` episodes have ended; for single-env runners."""
    episodes: list[StepBatch] = []
    current: list[TimeStep] = []
    while len(episodes) < count:
        timestep = step()
        current.append(timestep)
        if timestep.done:
            episodes.append(StepBatch.from_timesteps(current))
            current = []
    return episodes


def whole_episodes(runner: EnvRunner, count: int) -> list[StepBatch]:
    """`count` complete episodes from a multi-env runner, in the order they end.

    Episodes already under way when called are stepped through but not
    returned, since their start was handed out earlier.
    """
    episodes: list[StepBatch] = []
    current: dict[int, list[StepBatch]] = {}
    while len(episodes) < count:
        step = runner.run_steps(1)
        env_id = int(step.env_ids[0])
        if step.episode_lengths[0] == 1:
            current[env_id] = []
        steps = current.get(env_id)
        if steps is None:
            continue
        steps.append(step)
        if step.done[0]:
            episodes.append(StepBatch.concatenate(current.pop(env_id)))
    return episodes
