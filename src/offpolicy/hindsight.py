"""Hindsight experience replay (Andrychowicz et al., 2017) for goal-conditioned envs (`--her`).

A goal-conditioned env follows Gymnasium-Robotics' `GoalEnv` convention: a Dict
observation with `observation`, `achieved_goal` and `desired_goal`, and a
vectorised `compute_reward(achieved_goal, desired_goal, info)`. With sparse
rewards almost every stored episode failed its own goal; HER replays each
transition also as if the goal had been one the episode did reach.

`HindsightReplayBuffer` stores steps unchanged and relabels at sample time with
the `future` strategy: each sampled transition (episode step t) keeps its goal
with probability 1 / (k + 1); otherwise its goal becomes the `achieved_goal` of
the next observation of a step t' drawn uniformly from t to the last stored step
of the same episode, in both its observation and next observation, and its
reward is recomputed by the env's `compute_reward` (called on the batch, with
an empty info per transition). Each env writes to its own column of the buffer
(capacity / num_envs steps, overwritten oldest first), so an episode's steps
are contiguous however the envs interleave; an episode still under way offers
the steps stored so far, and a truncated episode ends at its true final
observation. Terminations are kept as stored.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np
import torch

from offpolicy.buffer import FIELDS, ReplayBuffer, TransitionBatch
from offpolicy.config import ConfigError
from offpolicy.observations import Leaf, ObservationLayout
from offpolicy.steps import StepBatch

RewardFunction = Callable[[np.ndarray, np.ndarray, Any], np.ndarray]
"""`compute_reward(achieved_goal, desired_goal, infos)` for a batch of goals."""
GOAL_KEYS = ("achieved_goal", "desired_goal")


def goal_leaves(observation_space: gym.Space) -> tuple[Leaf, Leaf]:
    """The achieved and desired goal of a goal-conditioned observation space, or an error saying what HER
    needs."""
    layout = ObservationLayout(observation_space)
    names = {leaf.name: leaf for leaf in layout.leaves}
    if not all(key in names for key in GOAL_KEYS):
        raise ConfigError(f"her needs a Dict observation with keys achieved_goal and desired_goal (Gymnasium-Robotics' "
                          f"GoalEnv convention), got {observation_space}")
    achieved, desired = names["achieved_goal"], names["desired_goal"]
    if achieved.shape != desired.shape or achieved.dtype != desired.dtype:
        raise ConfigError(f"her needs achieved_goal and desired_goal of one shape and dtype, got "
                          f"{achieved.space} and {desired.space}")
    return achieved, desired


def env_reward_function(env: gym.Env) -> RewardFunction:
    """The env's own `compute_reward`, or an error saying HER needs one."""
    compute = getattr(env.unwrapped, "compute_reward", None)
    if not callable(compute):
        raise ConfigError(f"her needs an env with compute_reward(achieved_goal, desired_goal, info) to recompute "
                          f"rewards for new goals; {env.unwrapped.__class__.__name__} has none")
    return compute


class HindsightReplayBuffer(ReplayBuffer):
    """Uniform replay of one-step transitions, relabelled with future achieved goals at sample time."""

    def __init__(
        self, capacity: int, num_envs: int, observation_space: gym.Space, compute_reward: RewardFunction,
        her_k: int = 4, device: torch.device | str = "cpu", seed: int = 0, gamma: float = 0.99,
    ) -> None:
        if capacity < num_envs:
            raise ConfigError(f"replay_buffer_size ({capacity}) must be at least num_envs ({num_envs}) with her: "
                              "each env has its own part of the buffer")
        self.columns, self.column_capacity = num_envs, capacity // num_envs
        self.layout = ObservationLayout(observation_space)
        self.achieved, self.desired = goal_leaves(observation_space)
        self.compute_reward = compute_reward
        self.relabel_probability = her_k / (her_k + 1)
        self.device = torch.device(device)
        self.gamma = gamma
        self._rng = np.random.default_rng(seed)
        self._storage: dict[str, np.ndarray] = {}
        self._episode_end = np.full((num_envs, self.column_capacity), -1, np.int64)
        """The serial (count of its env's steps before it) of the last step of each slot's episode, -1 while
        the episode is under way. Env k's step of serial s sits in slot s % column_capacity of column k."""
        self._pushed = np.zeros(num_envs, np.int64)
        self._episode_start = np.zeros(num_envs, np.int64)

    def __len__(self) -> int:
        return int(np.minimum(self._pushed, self.column_capacity).sum())

    def push(self, steps: StepBatch) -> None:
        """Append each step to its env's column; an episode's end marks its stored steps as ended."""
        if len(steps) == 0:
            return
        if not self._storage:
            arrays = {name: np.asarray(getattr(steps, name)) for name in FIELDS}
            self._storage = {name: np.zeros((self.columns, self.column_capacity, *array.shape[1:]), _host_dtype(array))
                             for name, array in arrays.items()}
        if steps.env_ids.max() >= self.columns:
            raise ValueError(f"step of env {steps.env_ids.max()} pushed to a buffer for {self.columns} envs")
        size, envs = self.column_capacity, steps.env_ids
        order = np.argsort(envs, kind="stable")
        rank = np.empty(len(envs), np.int64)  # each row's place among its env's rows in this chunk
        rank[order] = np.arange(len(envs)) - np.searchsorted(envs[order], envs[order])
        counts = np.bincount(envs, minlength=self.columns)
        serials = self._pushed[envs] + rank
        kept = rank >= counts[envs] - size  # an env with more rows than its column keeps its newest
        rows, slots = np.flatnonzero(kept), serials[kept] % size
        for name in FIELDS:
            self._storage[name][envs[rows], slots] = getattr(steps, name)[rows]
        self._episode_end[envs[rows], slots] = -1
        self._pushed += counts
        for row in np.flatnonzero(steps.done).tolist():  # an episode's end marks its steps still stored
            env, serial = int(envs[row]), int(serials[row])
            first = max(int(self._episode_start[env]), int(self._pushed[env]) - size)
            self._episode_end[env, np.arange(first, serial + 1) % size] = serial
            self._episode_start[env] = serial + 1

    def _draw(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniform (env, slot) pairs over every stored step."""
        sizes = np.minimum(self._pushed, self.column_capacity)
        flat = self._rng.integers(0, sizes.sum(), count)
        ends = np.cumsum(sizes)
        envs = np.searchsorted(ends, flat, side="right")
        return envs, flat - (ends[envs] - sizes[envs])

    def sample(self, batch_size: int) -> TransitionBatch:
        """`batch_size` transitions drawn uniformly, a fraction k / (k + 1) with a future achieved goal."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        envs, slots = self._draw(batch_size)
        fields = {name: self._storage[name][envs, slots] for name in FIELDS}  # fancy indexing: copies

        relabel = self._rng.random(batch_size) < self.relabel_probability
        last = self._pushed[envs] - 1
        serials = last - (last - slots) % self.column_capacity
        ends = self._episode_end[envs, slots]
        ends = np.where(ends >= 0, ends, last)  # under way: the steps stored so far
        future = serials + np.floor(self._rng.random(batch_size) * (ends - serials + 1)).astype(np.int64)
        rows = np.flatnonzero(relabel)
        if len(rows):
            future_records = self._storage["next_observations"][envs[rows], future[rows] % self.column_capacity]
            goals = self._read(future_records, self.achieved)
            for name in ("observations", "next_observations"):
                self._write(fields[name], rows, self.desired, goals)
            achieved = self._read(fields["next_observations"][rows], self.achieved)
            rewards = np.asarray(self.compute_reward(achieved, goals, [{} for _ in rows]), np.float64)
            fields["rewards"][rows] = rewards.reshape(len(rows))
        tensors = {name: torch.as_tensor(array).to(self.device) for name, array in fields.items()}
        tensors["terminated"] = tensors["terminated"].to(torch.float32)
        indices = torch.as_tensor(envs * self.column_capacity + slots, device=self.device)
        return TransitionBatch(**tensors, discounts=torch.full((batch_size,), self.gamma, device=self.device),
                               indices=indices, weights=torch.ones(batch_size, device=self.device))

    def _read(self, records: np.ndarray, leaf: Leaf) -> np.ndarray:
        """`leaf` of a batch of stored observations, shape (batch, *leaf shape), in its dtype."""
        return self.layout.unpack(records)[leaf.name]

    def _write(self, records: np.ndarray, rows: np.ndarray, leaf: Leaf, values: np.ndarray) -> None:
        """Set `leaf` of `records[rows]` to `values`, in place."""
        part = values.reshape(len(rows), -1)
        if self.layout.bytes:
            part = np.ascontiguousarray(part.astype(leaf.dtype)).view(np.uint8)
        records[rows, leaf.start : leaf.stop] = part

    def sample_batches(self, batch_size: int, count: int) -> Iterator[TransitionBatch]:
        for _ in range(count):
            yield self.sample(batch_size)

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Uniform sampling has no priorities: nothing to do."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "storage": {name: torch.from_numpy(array.copy()) for name, array in self._storage.items()},
            "episode_end": torch.from_numpy(self._episode_end.copy()),
            "pushed": torch.from_numpy(self._pushed.copy()),
            "episode_start": torch.from_numpy(self._episode_start.copy()),
            "rng": self.sampling_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["episode_end"].shape) != self._episode_end.shape:
            raise ConfigError(f"the saved buffer has {tuple(state['episode_end'].shape)} env columns and slots, this "
                              f"run {self._episode_end.shape}: resume with the run's num_envs and replay_buffer_size")
        self._storage = {name: tensor.numpy().copy() for name, tensor in state["storage"].items()}
        self._episode_end = state["episode_end"].numpy().copy()
        self._pushed = state["pushed"].numpy().copy()
        self._episode_start = state["episode_start"].numpy().copy()
        self.load_sampling_state(state["rng"])

    def sampling_state(self) -> Any:
        return self._rng.bit_generator.state

    def load_sampling_state(self, state: Any) -> None:
        self._rng.bit_generator.state = state


def _host_dtype(array: np.ndarray) -> np.dtype:
    """How a field is stored: float64 as float32 (what learners compute in), bools as they are."""
    return np.dtype(np.float32) if array.dtype == np.float64 else array.dtype


__all__ = ["HindsightReplayBuffer", "env_reward_function", "goal_leaves"]
