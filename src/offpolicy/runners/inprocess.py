"""Runners that step their environments in the calling thread.

For cheap environments this is the fastest design in Python: one batched
policy call per group of envs, no thread or process hop per step, and the
run is exactly reproducible from its seed.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from offpolicy.envs import EnvFactory
from offpolicy.policy import Policy
from offpolicy.runners.core import EnvRunner, pop_steps
from offpolicy.runners.session import EnvSession, collect_episodes
from offpolicy.runners.watchdog import HangWatchdog
from offpolicy.steps import StepBatch, TimeStep


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
        next_observations, _, rewards, terminated, truncated, lengths, returns = zip(*steps)
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
