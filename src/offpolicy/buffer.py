"""The replay buffer: a circular store of transitions in preallocated tensors.

Storage lives on the learner's device, so sampling a batch is one random index
draw and five gathers, with no host round trip. It is shaped lazily from the
first transitions pushed, so it needs no knowledge of the environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch

FIELDS = ("observations", "next_observations", "actions", "rewards", "terminated")
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


def _storage_dtype(array: np.ndarray) -> torch.dtype:
    if array.dtype == np.float64:
        return torch.float32
    if array.dtype == np.bool_:
        return torch.float32
    return torch.from_numpy(np.zeros(0, dtype=array.dtype)).dtype


class TransitionBuffer:
    """Fixed-capacity FIFO of transitions; once full, each push overwrites the oldest."""

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

    def push(
        self,
        observations: np.ndarray,
        next_observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
    ) -> None:
        """Append a batch of transitions (arrays batched along the first dimension)."""
        arrays = dict(
            observations=observations,
            next_observations=next_observations,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
        )
        count = len(rewards)
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
        return TransitionBatch(**{name: torch.index_select(self._storage[name], 0, indices) for name in FIELDS})

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
            columns = [getattr(block, name).unflatten(0, (batches, batch_size)).unbind(0) for name in FIELDS]
            for fields in zip(*columns):
                yield TransitionBatch(*fields)

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
