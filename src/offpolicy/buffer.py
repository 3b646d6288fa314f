"""Replay buffers: the protocol every buffer follows, and the uniform circular buffer.

The strategy knows only `ReplayBuffer`: it pushes each chunk of steps as it
arrives (a `StepBatch`, with env ids and truncation flags, which buffers that
compute n-step returns need), samples batches for a training phase, and hands
back the learner's per-sample TD errors (`update_priorities`), which
prioritized buffers use and the uniform one ignores. `make_replay_buffer`
chooses the buffer from the configuration and the env (frame stacks are stored
a frame at a time, `frame_stack.FrameStackBuffer`).

`TransitionBuffer`, the uniform buffer, keeps transitions in preallocated
tensors on the learner's device, so sampling a batch is one random index draw
and a few gathers, with no host round trip. It is shaped lazily from the first
transitions pushed, so it needs no knowledge of the environment.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from offpolicy.nstep import WINDOW_FIELDS, NStepWindows
from offpolicy.steps import StepBatch

if TYPE_CHECKING:
    from offpolicy.config import OffPolicyConfig
    from offpolicy.envs import EnvFactory

FIELDS = ("observations", "next_observations", "actions", "rewards", "terminated")
"""What `TransitionBuffer` stores of each step."""
OBSERVATION_FIELDS = ("observations", "next_observations")
BATCH_FIELDS = FIELDS + ("discounts", "indices", "weights")
BLOCK_TRANSITIONS = 4096


@dataclass
class TransitionBatch:
    """A batch of transitions, each field batched along the first dimension.

    With n-step returns, `rewards` is the discounted sum of up to n rewards, `next_observations` the
    observation after the last of them and `discounts` gamma to the power of their count; a learner's
    target is `rewards + discounts * (1 - terminated) * value(next_observations)` either way.
    """

    observations: torch.Tensor
    next_observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    """1.0 where the episode really ended (no bootstrapping); time-limit truncations are 0.0."""
    discounts: torch.Tensor
    """What the bootstrapped value is discounted by: gamma ** (rewards summed), gamma for one-step returns."""
    indices: torch.Tensor
    """Where each transition sits in the buffer: what `ReplayBuffer.update_priorities` takes back."""
    weights: torch.Tensor
    """Importance-sampling weight of each transition, to scale its loss by (all ones for uniform sampling)."""


def _storage_dtype(name: str, array: np.ndarray) -> torch.dtype:
    """float64 is stored as float32 (what the networks compute in) and the terminated flags as float (what
    targets multiply by); observations keep their dtype, so that a boolean or uint8 image takes one byte a
    cell and becomes float only inside the network."""
    if array.dtype == np.float64 or (array.dtype == np.bool_ and name not in OBSERVATION_FIELDS):
        return torch.float32
    return torch.from_numpy(np.zeros(0, dtype=array.dtype)).dtype


def _write_wrapping(target: Any, source: Any, start: int, first: int) -> None:
    """Write `source` into the circular `target` from row `start`: its first `first` rows there, the rest
    from row 0."""
    target[start : start + first] = source[:first]
    if first < len(source):
        target[: len(source) - first] = source[first:]


class ReplayBuffer(ABC):
    """What the strategy needs of a replay buffer."""

    @abstractmethod
    def __len__(self) -> int:
        """Transitions held now."""

    @abstractmethod
    def push(self, steps: StepBatch) -> None:
        """Store a chunk of environment steps, in the order they completed."""

    @abstractmethod
    def sample(self, batch_size: int) -> TransitionBatch:
        """One batch of `batch_size` transitions."""

    @abstractmethod
    def sample_batches(self, batch_size: int, count: int) -> Iterator[TransitionBatch]:
        """`count` batches of `batch_size` transitions for one training phase."""

    @abstractmethod
    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """The learner's absolute TD error for each sampled transition (`TransitionBatch.indices`)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The contents and everything needed to continue sampling, for `--save-buffer` checkpoints."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""

    @abstractmethod
    def sampling_state(self) -> Any:
        """The random state of sampling alone, saved with every checkpoint (the contents only on request)."""

    @abstractmethod
    def load_sampling_state(self, state: Any) -> None:
        """Restore what `sampling_state` returned."""


def make_replay_buffer(
    config: "OffPolicyConfig", device: torch.device | str, seed: int, gamma: float, total_steps: int,
    env_factory: "EnvFactory | None" = None,
) -> ReplayBuffer:
    """The replay buffer `config` asks for, on `device`, sampling from `seed`; returns discounted by the
    learner's `gamma`; prioritized replay anneals its importance correction over `total_steps`; hindsight
    replay recomputes rewards with the `compute_reward` of an env from `env_factory`, and uniform replay of
    frame-stacked observations stores each frame once."""
    if config.her:
        from offpolicy.hindsight import HindsightReplayBuffer, env_reward_function

        if env_factory is None:
            raise ValueError("hindsight replay needs the env factory, for the env's compute_reward")
        env = env_factory()
        return HindsightReplayBuffer(config.replay_buffer_size, config.num_envs, env.observation_space,
                                     env_reward_function(env), config.her_k, device, seed, gamma)
    if config.prioritized:
        from offpolicy.prioritized import PrioritizedReplayBuffer

        return PrioritizedReplayBuffer(
            config.replay_buffer_size, device, seed, gamma, config.n_step, alpha=config.priority_alpha,
            beta=config.priority_beta, epsilon=config.priority_epsilon, total_steps=total_steps,
        )
    stack = frame_stack_of_factory(env_factory) if env_factory is not None else None
    if stack is not None:
        from offpolicy.frame_stack import FrameStackBuffer

        return FrameStackBuffer(config.replay_buffer_size, config.num_envs, *stack, device=device, seed=seed,
                                gamma=gamma, n_step=config.n_step)
    return TransitionBuffer(config.replay_buffer_size, device, seed, gamma, config.n_step)


def frame_stack_of_factory(env_factory: "EnvFactory") -> tuple[int, str] | None:
    """The frame stack (size, padding) of the envs `env_factory` makes, if they stack frames; their
    transitions are then stored a frame at a time (`frame_stack.FrameStackBuffer`)."""
    from offpolicy.frame_stack import frame_stack_of

    env = env_factory()
    try:
        return frame_stack_of(env)
    finally:
        env.close()


class TransitionBuffer(ReplayBuffer):
    """Fixed-capacity FIFO of transitions sampled uniformly; once full, each push overwrites the oldest.

    With `n_step` > 1 each transition is stored and sampled with its n-step return
    (`nstep.NStepWindows`, kept up to date as steps arrive): `rewards`, `terminated` and `discounts`
    describe the window, and `next_observations` holds the observation after its last step.
    """

    def __init__(
        self, capacity: int, device: torch.device | str = "cpu", seed: int = 0, gamma: float = 0.99,
        n_step: int = 1,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be at least 1, got {capacity}")
        if n_step < 1:
            raise ValueError(f"n_step must be at least 1, got {n_step}")
        self.capacity = capacity
        self.device = torch.device(device)
        self.gamma = gamma
        self.n_step = n_step
        self._windows = NStepWindows(capacity, n_step, gamma) if n_step > 1 else None
        self._storage: dict[str, torch.Tensor] = {}
        self._host_views: dict[str, np.ndarray] = {}
        """NumPy views of the storage on the CPU; on another device, host copies of the window fields."""
        self._position = 0
        self._size = 0
        self._pushed = 0
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed)

    def __len__(self) -> int:
        return self._size

    def push(self, steps: StepBatch) -> None:
        """Append a chunk of steps; truncation is not termination (a truncated step still bootstraps)."""
        total = len(steps)
        if total == 0:
            return
        count = min(total, self.capacity)
        if count < total:  # more than fit: only the newest are kept
            steps = steps[total - count :]
        arrays = {name: getattr(steps, name) for name in FIELDS}
        if self._windows is not None:
            arrays.update(self._windows.new_fields(count))
        if not self._storage:
            self._allocate(arrays)
        start = (self._position + total - count) % self.capacity
        first = min(count, self.capacity - start)
        on_device = self.device.type != "cpu"
        for name, array in arrays.items():
            host = self._host_views.get(name)  # on the CPU NumPy writes into the tensors' memory: no torch op
            if host is not None:
                _write_wrapping(host, array, start, first)
            if on_device:
                storage = self._storage[name]
                _write_wrapping(storage, torch.as_tensor(np.asarray(array)).to(self.device, storage.dtype), start, first)
        self._position = (self._position + total) % self.capacity
        self._size = min(self._size + count, self.capacity)
        self._pushed += total
        if self._windows is not None:
            self._extend_windows(steps, self._pushed - count + np.arange(count))

    def _extend_windows(self, steps: StepBatch, serials: np.ndarray) -> None:
        """Grow the n-step windows of the steps before these (step serial s sits in slot s % capacity)."""
        fields = {name: self._host_views[name] for name in WINDOW_FIELDS}
        grown, ends = self._windows.add(steps, serials, self._pushed - self._size, fields)
        bootstrap = steps.next_observations[ends]
        if self.device.type == "cpu":
            self._host_views["next_observations"][grown] = bootstrap
        elif len(grown):
            at = torch.as_tensor(grown, device=self.device)
            for name in WINDOW_FIELDS:
                self._storage[name][at] = torch.as_tensor(fields[name][grown]).to(self.device)
            storage = self._storage["next_observations"]
            storage[at] = torch.as_tensor(bootstrap).to(self.device, storage.dtype)

    def _draw(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Where to sample `count` transitions, and their importance weights: uniform, weights all 1."""
        indices = torch.randint(self._size, (count,), generator=self._generator, device=self.device)
        return indices, torch.ones(count, device=self.device)

    def _gather(self, indices: torch.Tensor, weights: torch.Tensor) -> TransitionBatch:
        """The transitions at `indices`: a few gathers, n-step windows included."""
        storage = self._storage
        fields = {name: torch.index_select(storage[name], 0, indices) for name in FIELDS}
        if self._windows is None:
            fields["discounts"] = torch.full_like(fields["rewards"], self.gamma)
        else:
            fields["discounts"] = torch.index_select(storage["discounts"], 0, indices)
        return TransitionBatch(**fields, indices=indices, weights=weights)

    def sample(self, batch_size: int) -> TransitionBatch:
        """Draw `batch_size` transitions uniformly, with replacement, from the filled part."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self._gather(*self._draw(batch_size))

    def sample_batches(self, batch_size: int, count: int) -> Iterator[TransitionBatch]:
        """`count` independent batches for one training phase, drawn a block at a time.

        The same distribution as `count` calls of `sample`, with one index draw
        and one gather per field for a whole block of batches instead of per
        batch: for small networks that is a tenth of an update's cost. A block
        holds at most `BLOCK_TRANSITIONS` transitions (more than one batch if needed).
        """
        per_block = max(1, BLOCK_TRANSITIONS // batch_size)
        for start in range(0, count, per_block):
            batches = min(per_block, count - start)
            block = self.sample(batch_size * batches)
            columns = [getattr(block, name).unflatten(0, (batches, batch_size)).unbind(0) for name in BATCH_FIELDS]
            for fields in zip(*columns):
                yield TransitionBatch(*fields)

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Uniform sampling has no priorities: nothing to do."""

    def _allocate(self, arrays: dict[str, np.ndarray]) -> None:
        for name, array in arrays.items():
            array = np.asarray(array)
            self._storage[name] = torch.zeros(
                (self.capacity, *array.shape[1:]), dtype=_storage_dtype(name, array), device=self.device
            )
        if self.device.type == "cpu":
            self._host_views = {name: tensor.numpy() for name, tensor in self._storage.items()}
        elif self._windows is not None:
            self._host_views = {name: self._storage[name].cpu().numpy() for name in WINDOW_FIELDS}

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage tensors."""
        return sum(t.numel() * t.element_size() for t in self._storage.values())

    def state_dict(self) -> dict[str, Any]:
        """The filled part and the write position, for saving a buffer with a checkpoint."""
        state = {
            "storage": {name: t[: self._size].clone() for name, t in self._storage.items()},
            "position": self._position,
            "size": self._size,
            "pushed": self._pushed,
            "generator": self._generator.get_state(),
        }
        if self._windows is not None:
            state["windows"] = self._windows.state_dict(self._size)
        return state

    def sampling_state(self) -> Any:
        """The sampling generator's state alone, saved with every checkpoint (the contents only on request)."""
        return self._generator.get_state()

    def load_sampling_state(self, state: Any) -> None:
        self._generator.set_state(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned; steps saved without n-step windows (by an earlier version)
        get one-step windows."""
        storage = {name: t for name, t in state["storage"].items() if name in FIELDS}
        size = min(int(state["size"]), self.capacity)
        windows = state.get("windows")
        if self._windows is not None and storage:
            if windows is None or "discounts" not in state["storage"]:
                storage["discounts"] = torch.full((len(storage["rewards"]),), self.gamma)
                windows = None
            else:
                storage["discounts"] = state["storage"]["discounts"]
            self._windows.load_state_dict(windows)
        if storage:
            self._storage = {}
            self._allocate({name: t[:0].cpu().numpy() for name, t in storage.items()})
            for name, t in storage.items():
                self._storage[name][: len(t)] = t.to(self.device)
                if self.device.type != "cpu" and name in self._host_views:
                    self._host_views[name][: len(t)] = t.cpu().numpy()
        self._position = int(state["position"]) % self.capacity
        self._size = size
        self._pushed = int(state.get("pushed", self._position + (self.capacity if size == self.capacity else 0)))
        self._generator.set_state(state["generator"])
