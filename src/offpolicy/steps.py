"""What environments hand the trainer: one step (`TimeStep`), or many as arrays (`StepBatch`).

Runners produce step batches; the strategy stores them in the replay buffer and
reports them as events. They hold NumPy arrays only, so worker processes that
import this module need no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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
    success: float
    """The env's `info["is_success"]` after this step as 1.0 or 0.0 (goal-conditioned envs report it), NaN
    where it reports none."""
    context: dict[str, float]
    """How the action was chosen (e.g. the exploration rate)."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass
class StepBatch:
    """Consecutive environment steps as arrays, in the order they completed.

    This is what runners hand the trainer: storing a chunk, counting its
    episodes and logging them are then array operations, never a Python loop
    over steps. Row `i` is one step of env `env_ids[i]`.
    """

    env_ids: np.ndarray
    observations: np.ndarray
    next_observations: np.ndarray
    """True next observations, also at episode ends (never the reset one)."""
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    """Episodes that ended for real: no bootstrapping from the next observation."""
    truncated: np.ndarray
    """Episodes cut by a time limit: bootstrapping continues through them."""
    episode_returns: np.ndarray
    """Sum of rewards in each step's episode so far, that step included."""
    episode_lengths: np.ndarray
    context: dict[str, np.ndarray]
    """How each action was chosen (e.g. `exploration_rate`), one value per step."""
    successes: np.ndarray | None = None
    """Each step's `TimeStep.success` (1.0, 0.0, or NaN where the env reports none); all NaN if not given."""

    def __post_init__(self) -> None:
        if self.successes is None:
            self.successes = np.full(len(self.env_ids), np.nan)

    def __len__(self) -> int:
        return len(self.env_ids)

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated

    def __getitem__(self, rows: slice | np.ndarray) -> "StepBatch":
        """The rows `rows` (a slice or an index array) as a batch."""
        return StepBatch(**{name: value[rows] for name, value in self._fields().items()},
                         context={key: value[rows] for key, value in self.context.items()})

    def _fields(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in _ARRAY_FIELDS}

    @staticmethod
    def from_timesteps(timesteps: list[TimeStep]) -> "StepBatch":
        """Pack per-step records (from runners that step one env at a time) into arrays, in one pass."""
        if not timesteps:
            empty = np.zeros(0)
            return StepBatch(empty.astype(np.int64), empty, empty, empty, empty, empty.astype(bool),
                             empty.astype(bool), empty, empty.astype(np.int64), {})
        scalars = np.array(
            [(t.env_id, t.reward, t.terminated, t.truncated, t.episode_return, t.episode_length, t.success)
             for t in timesteps],
            dtype=np.float64,
        )
        return StepBatch(
            env_ids=scalars[:, 0].astype(np.int64),
            observations=np.array([t.observation for t in timesteps]),
            next_observations=np.array([t.next_observation for t in timesteps]),
            actions=np.array([t.action for t in timesteps]),
            rewards=scalars[:, 1],
            terminated=scalars[:, 2] > 0,
            truncated=scalars[:, 3] > 0,
            episode_returns=scalars[:, 4],
            episode_lengths=scalars[:, 5].astype(np.int64),
            context={key: np.array([t.context.get(key, np.nan) for t in timesteps], dtype=np.float64)
                     for key in timesteps[0].context},
            successes=scalars[:, 6],
        )

    @staticmethod
    def of_transitions(
        observations: np.ndarray,
        next_observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray | None = None,
        env_ids: np.ndarray | None = None,
    ) -> "StepBatch":
        """Transitions from elsewhere (a dataset, a test) as a batch: one env (id 0) unless `env_ids` says
        otherwise, nothing truncated unless `truncated` says so, episode totals left at zero."""
        count = len(rewards)
        return StepBatch(
            env_ids=np.zeros(count, np.int64) if env_ids is None else np.asarray(env_ids, np.int64),
            observations=np.asarray(observations),
            next_observations=np.asarray(next_observations),
            actions=np.asarray(actions),
            rewards=np.asarray(rewards),
            terminated=np.asarray(terminated, bool),
            truncated=np.zeros(count, bool) if truncated is None else np.asarray(truncated, bool),
            episode_returns=np.zeros(count),
            episode_lengths=np.zeros(count, np.int64),
            context={},
        )

    @staticmethod
    def concatenate(batches: list["StepBatch"]) -> "StepBatch":
        if len(batches) == 1:
            return batches[0]
        return StepBatch(
            **{name: np.concatenate([getattr(b, name) for b in batches]) for name in _ARRAY_FIELDS},
            context={key: np.concatenate([b.context[key] for b in batches]) for key in batches[0].context},
        )

    def timesteps(self) -> list[TimeStep]:
        """One `TimeStep` per row: convenient for tests and callbacks, not for hot paths."""
        return [
            TimeStep(int(self.env_ids[i]), self.observations[i], self.next_observations[i], self.actions[i],
                     float(self.rewards[i]), bool(self.terminated[i]), bool(self.truncated[i]),
                     int(self.episode_lengths[i]), float(self.episode_returns[i]), float(self.successes[i]),
                     {key: float(value[i]) for key, value in self.context.items()})
            for i in range(len(self))
        ]


_ARRAY_FIELDS = ("env_ids", "observations", "next_observations", "actions", "rewards", "terminated", "truncated",
                 "episode_returns", "episode_lengths", "successes")
