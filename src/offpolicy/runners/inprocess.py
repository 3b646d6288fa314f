"""Stepping environments in the calling process: the step semantics every backend shares, and the in-process runners.

`EnvSession.advance` is the one place an environment is stepped, in the trainer
(in-process and threaded runners, Ray actors) and in worker processes alike:
the true final observation is kept at an episode's end and the env reset, the
episode's return and length are counted, observations of the wrong shape and
failing calls become an `EnvRunnerError` naming the env. The module imports no
torch, so worker processes start quickly.

For cheap environments the in-process runners are the fastest design in
Python: one batched policy call per group of envs, no thread or process hop per
step, and the run is exactly reproducible from its seed.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from offpolicy.envs import EnvFactory, describe_env_failure
from offpolicy.observations import ObservationLayout
from offpolicy.runners.core import EnvRunner, EnvRunnerError, pop_steps
from offpolicy.steps import StepBatch, TimeStep

if TYPE_CHECKING:
    from offpolicy.policy import Policy
    from offpolicy.runners.watchdog import HangWatchdog


class EnvSession:
    """One environment and its running episode, reset automatically at episode end.

    `busy_since` is the monotonic time the current `step()` or `reset()` began
    (0 when idle), so a watchdog can name an env that hangs.
    """

    def __init__(self, factory: EnvFactory, env_id: int, seed: int) -> None:
        self.env_id = env_id
        self.env = factory()
        self.layout = ObservationLayout(self.env.observation_space)
        self.steps = 0
        self.busy_since = 0.0
        self.call = "reset()"
        self.env.action_space.seed(seed)
        self.observation = self._checked(self.env.reset(seed=seed)[0])
        self.episode_length = 0
        self.episode_return = 0.0

    def _checked(self, observation: Any) -> np.ndarray:
        """The observation as stored (`ObservationLayout.pack`: a Discrete space's int as an array, a Dict
        as one record), or an error naming this env."""
        try:
            return self.layout.pack(observation, self.call)
        except ValueError as error:
            raise EnvRunnerError(describe_env_failure(self.env_id, self.call, self.steps, error)) from None

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

    def advance(self, action: Any) -> tuple[Any, Any, float, bool, bool, int, float, float]:
        """One step as a plain tuple, for runners that pack many into arrays: (next observation, action,
        reward, terminated, truncated, episode length, episode return, success), the fields of `TimeStep`
        in order."""
        next_observation, reward, terminated, truncated, info = self._guarded("step()", self.env.step, action)
        self.steps += 1
        if getattr(next_observation, "shape", None) != self.layout.shape:  # one compare for plain arrays
            next_observation = self._checked(next_observation)
        reward = float(reward)
        self.episode_length += 1
        self.episode_return += reward
        length, episode_return = self.episode_length, self.episode_return
        if terminated or truncated:
            self.restart()
        else:
            self.observation = next_observation
        success = float(info["is_success"]) if "is_success" in info else np.nan
        return next_observation, action, reward, bool(terminated), bool(truncated), length, episode_return, success

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



class SingleEnvRunner(EnvRunner):
    """One env, the policy called directly (the seed's single runner); used for evaluation."""

    def __init__(
        self,
        factory: EnvFactory,
        policy: Policy,
        seed: int,
        deterministic: bool,
        watchdog: HangWatchdog | None = None,
    ) -> None:
        """A `watchdog` interrupts an env call that hangs (see `runners.watchdog`)."""
        super().__init__(policy)
        self.deterministic = deterministic
        self.session = EnvSession(factory, 0, seed)
        self.watchdog = watchdog
        if watchdog is not None:
            watchdog.watch([self.session])

    def _step(self) -> TimeStep:
        actions, context = self.policy.act_arrays(self.session.observation[None], self.deterministic)
        return self.session.step(actions[0], context)

    def run_steps(self, count: int) -> StepBatch:
        return StepBatch.from_timesteps([self._step() for _ in range(count)])

    def run_episodes(self, count: int) -> list[StepBatch]:
        if self.session.episode_length:
            self.session.restart()
        return collect_episodes(self._step, count)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.unwatch([self.session])
        self.session.close()


class InProcessMultiEnvRunner(EnvRunner):
    """`num_envs` envs stepped by the caller, each kept one step ahead.

    Semantics match the threaded runner: every env computes one step at the
    start; each timestep handed back asks its env for the next one, computed
    before `run_steps` returns (so with the parameters of that moment, as with
    threads). Owed steps run in groups of `autobatch_size`, one policy call each.
    """

    def __init__(
        self,
        factory: EnvFactory,
        seeds: list[int],
        policy: Policy,
        autobatch_size: int,
        deterministic: bool = False,
        watchdog: HangWatchdog | None = None,
    ) -> None:
        """A `watchdog` interrupts an env call that hangs (see `runners.watchdog`)."""
        super().__init__(policy)
        self.autobatch_size = autobatch_size
        self.deterministic = deterministic
        self.sessions = [EnvSession(factory, env_id, seed) for env_id, seed in enumerate(seeds)]
        self.watchdog = watchdog
        if watchdog is not None:
            watchdog.watch(self.sessions)
        self._owed: deque[int] = deque(range(len(seeds)))
        self._ready: deque[StepBatch] = deque()
        self._step_owed()

    def _step_owed(self) -> None:
        while self._owed:
            group = [self._owed.popleft() for _ in range(min(self.autobatch_size, len(self._owed)))]
            observations = np.stack([self.sessions[env_id].observation for env_id in group])
            actions, context = self.policy.act_arrays(observations, self.deterministic)
            steps = [self.sessions[env_id].advance(action) for env_id, action in zip(group, actions)]
            self._ready.append(self._pack(group, observations, actions, steps, context))

    @staticmethod
    def _pack(group: list[int], observations: np.ndarray, actions: np.ndarray, steps: list[tuple],
              context: dict[str, float]) -> StepBatch:
        """A group's steps (`EnvSession.advance` tuples) as one batch: a few array constructions per group."""
        next_observations, _, rewards, terminated, truncated, lengths, returns, successes = zip(*steps)
        return StepBatch(
            env_ids=np.array(group, dtype=np.int64),
            observations=observations,
            next_observations=np.stack(next_observations),
            actions=actions,
            rewards=np.array(rewards, dtype=np.float64),
            terminated=np.array(terminated, dtype=bool),
            truncated=np.array(truncated, dtype=bool),
            episode_returns=np.array(returns, dtype=np.float64),
            episode_lengths=np.array(lengths, dtype=np.int64),
            context={key: np.full(len(group), value, dtype=np.float64) for key, value in context.items()},
            successes=np.array(successes, dtype=np.float64),
        )

    def run_steps(self, count: int) -> StepBatch:
        chunks: list[StepBatch] = []
        taken = 0
        while taken < count:
            if not self._ready:
                self._step_owed()
            chunk = pop_steps(self._ready, count - taken)
            chunks.append(chunk)
            taken += len(chunk)
            self._owed.extend(chunk.env_ids.tolist())
        self._step_owed()
        return StepBatch.concatenate(chunks)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.unwatch(self.sessions)
        for session in self.sessions:
            session.close()
