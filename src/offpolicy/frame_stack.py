"""Replay of frame-stacked observations (Atari's last 4 frames) that stores each frame once.

An observation from Gymnasium's `FrameStackObservation` holds an env's last k
frames along its first axis, so one env's consecutive observations share k - 1
frames, and a buffer of whole observations stores every frame 2k times (k times
in observations, k in next observations): 56 KB per Atari transition instead of 7.

`FrameStackBuffer` gives each env its own stream of frames. An episode's first
observation adds its newest frame, and every step adds the newest frame of its
next observation, the true final one at a termination or a truncation too. A
transition records where its observation's newest frame sits in the stream and
where its episode's first frame does; sampling rebuilds both stacks from the
stream, and positions before the episode's first frame are padded as the wrapper
padded them: with the first frame (`padding_type="reset"`, the default) or with
zeros ("zero"). Sampled batches are byte-identical to those of a buffer of whole
observations.

Each env has `capacity // num_envs` frames and as many transition slots; an
episode needs one frame more than it has steps, so a transition leaves when its
slot is reused or when the oldest frame it needs is overwritten. n-step returns
are summed at sample time over the env's following steps (up to n, stopping
after the step that ended the episode and at the write cursor), as
`nstep.NStepWindows` keeps them for the other buffers.
"""

from __future__ import annotations

from typing import Any, Iterator

import gymnasium as gym
import numpy as np
import torch

from offpolicy.buffer import ReplayBuffer, TransitionBatch
from offpolicy.config import ConfigError
from offpolicy.steps import StepBatch

PADDINGS = ("reset", "zero")
STEP_FIELDS = ("actions", "rewards", "terminated", "done")
"""What is stored per transition beside its frames."""


def frame_stack_of(env: gym.Env) -> tuple[int, str] | None:
    """The stack size and padding of the `FrameStackObservation` that makes `env`'s observations, or None
    where there is none (or it pads with a custom observation, or a later wrapper changes what it made)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.FrameStackObservation):
            padding = env.padding_type
            return (int(env.stack_size), padding) if padding in PADDINGS else None
        if isinstance(env, gym.ObservationWrapper):
            return None
        env = env.env
    return None


class FrameStackBuffer(ReplayBuffer):
    """Uniform replay of transitions whose observations are stacks of an env's last `stack_size` frames,
    each frame stored once per env stream."""

    def __init__(
        self, capacity: int, num_envs: int, stack_size: int, padding: str = "reset",
        device: torch.device | str = "cpu", seed: int = 0, gamma: float = 0.99, n_step: int = 1,
    ) -> None:
        if padding not in PADDINGS:
            raise ConfigError(f"frame stack padding must be one of {', '.join(PADDINGS)}, got {padding!r}")
        if capacity < num_envs * (stack_size + 1):
            raise ConfigError(f"replay_buffer_size ({capacity}) must hold at least {stack_size + 1} frames per env "
                              f"({num_envs} envs) for stacks of {stack_size}")
        if n_step < 1:
            raise ValueError(f"n_step must be at least 1, got {n_step}")
        self.columns, self.column_capacity = num_envs, capacity // num_envs
        self.stack_size, self.padding = stack_size, padding
        self.device = torch.device(device)
        self.gamma, self.n_step = gamma, n_step
        self._rng = np.random.default_rng(seed)
        self._frames = np.zeros(0, np.uint8)
        """Per env, its stream of frames: the frame at stream position q sits in slot q % column_capacity."""
        self._steps: dict[str, np.ndarray] = {}
        shape = (num_envs, self.column_capacity)
        self._newest_frame = np.zeros(shape, np.int64)
        """Per transition slot, the stream position of its observation's newest frame."""
        self._episode_first = np.zeros(shape, np.int64)
        """Per transition slot, the stream position of its episode's first frame."""
        self._pushed = np.zeros(num_envs, np.int64)
        """Transitions pushed per env: its step of serial s sits in slot s % column_capacity."""
        self._oldest = np.zeros(num_envs, np.int64)
        """Per env, the serial of its oldest transition still sampled."""
        self._written = np.zeros(num_envs, np.int64)
        """Frames written per env."""

    def __len__(self) -> int:
        return int((self._pushed - self._oldest).sum())

    @property
    def nbytes(self) -> int:
        """Bytes held by the frames and the per-transition arrays."""
        arrays = [self._frames, self._newest_frame, self._episode_first, *self._steps.values()]
        return sum(array.nbytes for array in arrays)

    def push(self, steps: StepBatch) -> None:
        """Append each step to its env's stream: a new episode's first frame, then its next observation's newest
        frame. An observation that does not continue its env's previous next observation starts an episode."""
        count = len(steps)
        if count == 0:
            return
        observations, following = np.asarray(steps.observations), np.asarray(steps.next_observations)
        self._check(steps, observations, following)
        envs, size = steps.env_ids, self.column_capacity
        order = np.argsort(envs, kind="stable")
        sorted_envs = envs[order]
        group_start = np.searchsorted(sorted_envs, sorted_envs, side="left")
        rank = np.empty(count, np.int64)  # each row's place among its env's rows in this chunk
        rank[order] = np.arange(count) - group_start
        previous = np.full(count, -1, np.int64)  # the same env's previous row in this chunk
        previous[order[1:]] = np.where(rank[order[1:]] > 0, order[:-1], -1)
        has_previous = previous >= 0

        stored = self._pushed[envs] > 0  # the env's newest stored step precedes rows without a previous one
        newest_slots = (self._pushed[envs] - 1) % size
        newest_first = np.where(stored, self._episode_first[envs, newest_slots], 0)
        previous_done = np.where(has_previous, steps.done[np.maximum(previous, 0)],
                                 ~stored | self._steps["done"][envs, newest_slots])
        continued = np.empty_like(observations)
        continued[has_previous] = following[previous[has_previous]]
        rebuilt = ~has_previous & ~previous_done  # the newest stored next observation, rebuilt from its frames
        ends = self._newest_frame[envs[rebuilt], newest_slots[rebuilt]] + 1
        continued[rebuilt] = self._stacks(envs[rebuilt], ends[:, None] + np.arange(-self.stack_size + 1, 1),
                                          newest_first[rebuilt])
        continues = (observations == continued).reshape(count, -1).all(axis=1)
        starts = previous_done | ~continues
        self._check_padding(observations[starts])

        # Stream positions: a start writes its first frame and its next frame, any other row its next frame.
        frames_per_row = 1 + starts.astype(np.int64)
        before = np.cumsum(frames_per_row[order]) - frames_per_row[order]  # written earlier in the chunk
        sorted_base = self._written[sorted_envs] + before - before[group_start]
        newest = np.empty(count, np.int64)
        newest[order] = sorted_base - 1 + starts[order]
        spread = np.int64(1) << 40  # grouped running maximum: each env's rows lifted above the previous env's
        lifted = sorted_envs * spread + np.where(starts[order], newest[order], newest_first[order])
        first = np.empty(count, np.int64)
        first[order] = np.maximum.accumulate(lifted) - sorted_envs * spread

        serials = self._pushed[envs] + rank
        counts = np.bincount(envs, minlength=self.columns)
        written = self._written + np.bincount(envs, weights=frames_per_row, minlength=self.columns).astype(np.int64)
        kept = rank >= counts[envs] - size  # an env with more rows than its column keeps its newest
        rows, slots = np.flatnonzero(kept), serials[kept] % size
        for name, values in _step_fields(steps).items():
            self._steps[name][envs[rows], slots] = values[rows]
        self._newest_frame[envs[rows], slots] = newest[rows]
        self._episode_first[envs[rows], slots] = first[rows]
        for positions, frames, where in ((newest, observations[:, -1], starts), (newest + 1, following[:, -1], None)):
            fits = positions >= written[envs] - size
            if where is not None:
                fits &= where
            self._frames[envs[fits], positions[fits] % size] = frames[fits]

        touched = np.flatnonzero(counts)
        self._pushed += counts
        self._written = written
        self._evict(touched, int(frames_per_row.max()) * int(counts.max()))

    def _check(self, steps: StepBatch, observations: np.ndarray, following: np.ndarray) -> None:
        """Allocate on the first push; refuse steps that are not frame stacks of this buffer's size."""
        if observations.ndim < 2 or observations.shape[1] != self.stack_size:
            raise ValueError(f"frame stack replay needs observations of {self.stack_size} stacked frames along the "
                             f"first axis, got shape {observations.shape[1:]}")
        if not np.array_equal(following[:, :-1], observations[:, 1:]):
            raise ValueError("frame stack replay needs each next observation to be its observation shifted by one "
                             "frame (FrameStackObservation's stacks); these are not")
        if steps.env_ids.max() >= self.columns:
            raise ValueError(f"step of env {steps.env_ids.max()} pushed to a buffer for {self.columns} envs")
        if self._steps:
            return
        frame_shape = observations.shape[2:]
        self._frames = np.zeros((self.columns, self.column_capacity, *frame_shape), observations.dtype)
        for name, array in _step_fields(steps).items():
            dtype = np.float32 if array.dtype == np.float64 else array.dtype
            self._steps[name] = np.zeros((self.columns, self.column_capacity, *array.shape[1:]), dtype)

    def _check_padding(self, firsts: np.ndarray) -> None:
        """An episode's first observation must be padded as the wrapper pads: the frames before its newest are
        copies of it ("reset") or zeros ("zero")."""
        padding = firsts[:, -1:] if self.padding == "reset" else np.zeros_like(firsts[:, -1:])
        if not (firsts[:, :-1] == padding).all():
            raise ValueError(f"an episode's first observation is not padded as FrameStackObservation(padding_type="
                             f"{self.padding!r}) pads it; frame stack replay cannot rebuild it")

    def _needed(self, envs: np.ndarray, serials: np.ndarray) -> np.ndarray:
        """The stream position of the oldest frame each transition's observation shows."""
        slots = serials % self.column_capacity
        return np.maximum(self._newest_frame[envs, slots] - self.stack_size + 1, self._episode_first[envs, slots])

    def _evict(self, envs: np.ndarray, reach: int) -> None:
        """Drop the oldest transitions of `envs` whose slot was reused or whose oldest frame was overwritten (at
        most `reach` more than the frames written, as up to stack_size transitions share an episode's first)."""
        oldest = np.maximum(self._oldest[envs], self._pushed[envs] - self.column_capacity)
        candidates = oldest[:, None] + np.arange(reach * self.stack_size + self.stack_size + 1)
        stored = candidates < self._pushed[envs, None]
        lost = self._written[envs, None] - self.column_capacity
        gone = stored & (self._needed(envs[:, None], np.where(stored, candidates, oldest[:, None])) < lost)
        self._oldest[envs] = oldest + gone.sum(axis=1)  # a prefix: what each transition needs only grows

    def _draw(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniform (env, serial) pairs over every transition still sampled."""
        sizes = self._pushed - self._oldest
        flat = self._rng.integers(0, sizes.sum(), count)
        ends = np.cumsum(sizes)
        envs = np.searchsorted(ends, flat, side="right")
        return envs, self._oldest[envs] + flat - (ends[envs] - sizes[envs])

    def _stacks(self, envs: np.ndarray, positions: np.ndarray, first: np.ndarray) -> np.ndarray:
        """The frames at stream `positions` (batch, count) of `envs`, padded before each episode's `first`."""
        before = positions < first[:, None]
        frames = self._frames[envs[:, None], np.maximum(positions, first[:, None]) % self.column_capacity]
        if self.padding == "zero":
            frames[before] = 0
        return frames

    def sample(self, batch_size: int) -> TransitionBatch:
        """`batch_size` transitions drawn uniformly, their stacks rebuilt from the frame streams."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        envs, serials = self._draw(batch_size)
        size, k = self.column_capacity, self.stack_size
        slots = serials % size
        newest, first = self._newest_frame[envs, slots], self._episode_first[envs, slots]
        fields = {name: self._steps[name][envs, slots] for name in ("actions", "rewards", "terminated")}
        if self.n_step == 1:
            frames = self._stacks(envs, newest[:, None] + np.arange(-k + 1, 2), first)
            observations, following = frames[:, :k], frames[:, 1:]
            discounts = np.full(batch_size, self.gamma, np.float32)
        else:
            observations = self._stacks(envs, newest[:, None] + np.arange(-k + 1, 1), first)
            last, fields["rewards"], discounts = self._windows(envs, serials, first)
            last_slots = last % size
            fields["terminated"] = self._steps["terminated"][envs, last_slots]
            end = self._newest_frame[envs, last_slots] + 1
            following = self._stacks(envs, end[:, None] + np.arange(-k + 1, 1), first)
        tensors = {name: torch.as_tensor(array).to(self.device) for name, array in fields.items()}
        tensors["terminated"] = tensors["terminated"].to(torch.float32)
        return TransitionBatch(
            observations=torch.as_tensor(observations).to(self.device),
            next_observations=torch.as_tensor(following).to(self.device), **tensors,
            discounts=torch.as_tensor(discounts).to(self.device),
            indices=torch.as_tensor(envs * size + slots, device=self.device),
            weights=torch.ones(batch_size, device=self.device),
        )

    def _windows(self, envs: np.ndarray, serials: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each transition's n-step window: the serial of its last step, its discounted return and gamma to the
        power of its length. A window grows while the previous step did not end the episode, the next step is
        stored and belongs to the same episode."""
        size = self.column_capacity
        returns = self._steps["rewards"][envs, serials % size].astype(np.float32)
        last, length = serials.copy(), np.ones(len(serials), np.int64)
        growing = np.ones(len(serials), bool)
        for distance in range(1, self.n_step):
            following = serials + distance
            growing &= ~self._steps["done"][envs, last % size] & (following < self._pushed[envs])
            growing &= self._episode_first[envs, following % size] == first
            if not growing.any():
                break
            reward = self._steps["rewards"][envs, following % size].astype(np.float32)
            returns += np.where(growing, np.float32(self.gamma**distance) * reward, np.float32(0))
            last = np.where(growing, following, last)
            length += growing
        return last, returns, (self.gamma ** length).astype(np.float32)

    def sample_batches(self, batch_size: int, count: int) -> Iterator[TransitionBatch]:
        for _ in range(count):
            yield self.sample(batch_size)

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Uniform sampling has no priorities: nothing to do."""

    def state_dict(self) -> dict[str, Any]:
        arrays = {"frames": self._frames, "newest_frame": self._newest_frame, "episode_first": self._episode_first,
                  "pushed": self._pushed, "oldest": self._oldest, "written": self._written}
        arrays.update({f"step_{name}": array for name, array in self._steps.items()})
        return {"arrays": {name: torch.from_numpy(array.copy()) for name, array in arrays.items()},
                "rng": self.sampling_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        arrays = {name: tensor.numpy().copy() for name, tensor in state["arrays"].items()}
        if arrays["newest_frame"].shape != self._newest_frame.shape:
            raise ConfigError(f"the saved buffer has {arrays['newest_frame'].shape} env columns and slots, this run "
                              f"{self._newest_frame.shape}: resume with the run's num_envs and replay_buffer_size")
        self._frames = arrays["frames"]
        self._newest_frame, self._episode_first = arrays["newest_frame"], arrays["episode_first"]
        self._pushed, self._oldest, self._written = arrays["pushed"], arrays["oldest"], arrays["written"]
        self._steps = {name: arrays[f"step_{name}"] for name in STEP_FIELDS if f"step_{name}" in arrays}
        self.load_sampling_state(state["rng"])

    def sampling_state(self) -> Any:
        return self._rng.bit_generator.state

    def load_sampling_state(self, state: Any) -> None:
        self._rng.bit_generator.state = state


def _step_fields(steps: StepBatch) -> dict[str, np.ndarray]:
    """What is stored of each step beside its frames (`STEP_FIELDS`)."""
    return {"actions": np.asarray(steps.actions), "rewards": np.asarray(steps.rewards),
            "terminated": np.asarray(steps.terminated), "done": np.asarray(steps.done)}


__all__ = ["FrameStackBuffer", "frame_stack_of"]
