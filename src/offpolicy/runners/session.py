"""One environment and its running episode: the step semantics every backend shares.

`EnvSession.advance` is the one place an environment is stepped, in the trainer
(in-process and threaded runners, Ray actors) and in worker processes alike:
the true final observation is kept at an episode's end and the env reset, the
episode's return and length are counted, observations of the wrong shape and
failing calls become an `EnvRunnerError` naming the env. It imports no torch,
so worker processes start quickly.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from offpolicy.envs import EnvFactory, check_observation, describe_env_failure
from offpolicy.steps import StepBatch, TimeStep


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


def collect_episodes(step: Callable[[], TimeStep], count: int) -> list[StepBatch]:
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
