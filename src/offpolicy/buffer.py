"""Replay buffers: the protocol every buffer follows, and the uniform circular buffer.

The strategy knows only `ReplayBuffer`: it pushes each chunk of steps as it
arrives (a `StepBatch`, with env ids and truncation flags, which buffers that
compute n-step returns need), samples batches for a training phase, and hands
back the learner's per-sample TD errors (`update_priorities`), which
prioritized buffers use and the uniform one ignores. `make_replay_buffer`
chooses the buffer from the configuration.

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

from offpolicy.steps import StepBatch

if TYPE_CHECKING:
    from offpolicy.config import OffPolicyConfig

FIELDS = ("observations", "next_observations", "actions", "rewards", "terminated")
"""What `TransitionBuffer` stores of each step."""
BATCH_FIELDS = FIELDS + ("indices", "weights")
BLOCK_TRANSITIONS = 4096


@dataclass
class TransitionBatch:
    """A batch of transitions, each field batched along the first dimension."""

    observations: torch.Tensor
    next_observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    """1.0 where the episode really ended (no bootstrapping); time-limit truncations are 0.0."""
    indices: torch.Tensor
    """Where each transition sits in the buffer: what `ReplayBuffer.update_priorities` takes back."""
    weights: torch.Tensor
    """Importance-sampling weight of each transition, to scale its loss by (all ones for uniform sampling)."""


def _storage_dtype(array: np.ndarray) -> torch.dtype:
    if array.dtype == np.float64:
        return torch.float32
    if array.dtype == np.bool_:
        return torch.float32
    return torch.from_numpy(np.zeros(0, dtype=array.dtype)).dtype


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


def make_replay_buffer(config: "OffPolicyConfig", device: torch.device | str, seed: int) -> ReplayBuffer:
    """The replay buffer `config` asks for, on `device`, sampling from `seed`."""
    return TransitionBuffer(config.replay_buffer_size, device, seed)


class TransitionBuffer(ReplayBuffer):
    """Fixed-capacity FIFO of transitions sampled uniformly; once full, each push overwrites the oldest."""

    def __init__(self, capacity: int, device: torch.device | str = "cpu", seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.device = torch.device(device)
        self._storage: dict[str, torch.Tensor] = {}
        self._host_views: dict[str, np.ndarray] = {}
        self._position = 0
        self._size = 0
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed)

    def __len__(self) -> int:
        return self._size

    def push(self, steps: StepBatch) -> None:
        """Append a chunk of steps; truncation is not termination (a truncated step still bootstraps)."""
        arrays = {name: getattr(steps, name) for name in FIELDS}
        count = len(steps)
        if count == 0:
            return
        if not self._storage:
            self._allocate(arrays)
        if count > self.capacity:
            arrays = {name: array[-self.capacity :] for name, array in arrays.items()}
            count = self.capacity
        start = self._position
        first = min(count, self.capacity - start)
        for name, array in arrays.items():
            if self._host_views:  # CPU storage: NumPy writes into the tensors' memory, no torch op per field
                target, source = self._host_views[name], np.asarray(array)
            else:
                target = self._storage[name]
                source = torch.as_tensor(np.asarray(array)).to(self.device, target.dtype)
            target[start : start + first] = source[:first]
            if first < count:
                target[: count - first] = source[first:]
        self._position = (start + count) % self.capacity
        self._size = min(self._size + count, self.capacity)

    def sample(self, batch_size: int) -> TransitionBatch:
        """Draw `batch_size` transitions uniformly, with replacement, from the filled part."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        indices = torch.randint(
            self._size, (batch_size,), generator=self._generator, device=self.device
        )
        return TransitionBatch(
            **{name: torch.index_select(self._storage[name], 0, indices) for name in FIELDS},
            indices=indices,
            weights=torch.ones(batch_size, device=self.device),
        )

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
                (self.capacity, *array.shape[1:]), dtype=_storage_dtype(array), device=self.device
            )
        if self.device.type == "cpu":
            self._host_views = {name: tensor.numpy() for name, tensor in self._storage.items()}

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage tensors."""
        return sum(t.numel() * t.element_size() for t in self._storage.values())

    def state_dict(self) -> dict[str, Any]:
        """The filled part and the write position, for saving a buffer with a checkpoint."""
        return {
            "storage": {name: t[: self._size].clone() for name, t in self._storage.items()},
            "position": self._position,
            "size": self._size,
            "generator": self._generator.get_state(),
        }

    def sampling_state(self) -> torch.Tensor:
        """The sampling generator's state alone, saved with every checkpoint (the contents only on request)."""
        return self._generator.get_state()

    def load_sampling_state(self, state: torch.Tensor) -> None:
        self._generator.set_state(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        storage = state["storage"]
        if storage:
            self._allocate({name: t[:0].cpu().numpy() for name, t in storage.items()})
            for name, t in storage.items():
                self._storage[name][: len(t)] = t.to(self.device)
        self._position = int(state["position"]) % self.capacity
        self._size = min(int(state["size"]), self.capacity)
        self._generator.set_state(state["generator"])
