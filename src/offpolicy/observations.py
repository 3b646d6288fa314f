"""How observations are held between the env and the network: as the env returns them, or one flat record.

Box, Discrete and MultiBinary observations travel as the arrays the env returns.
A Dict or Tuple observation (nested ones too) is packed into one flat record per
step as it leaves the env: each leaf (a key's value) gets its own stretch of the
record in its own dtype, so images stay one byte a pixel, and every part of the
system that moves observations (step batches, shared memory, Ray, the replay
buffer, checkpoints) handles a record as it handles any other array. Where all
leaves share one dtype (float32 vectors, say) the record is simply their
concatenation in that dtype; otherwise it is raw bytes, and each leaf is read
back by viewing its bytes as its dtype. The network's encoder unpacks the
record (`agents.networks.DictEncoder`); `ObservationLayout.unpack` does the same
in NumPy.

This module imports no torch: worker processes pack observations too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import gymnasium as gym
import numpy as np

from offpolicy.envs import EnvError, ObservationError, check_observation

KeyPath = tuple[Any, ...]
"""Where a leaf sits in a nested observation: Dict keys and Tuple positions, outermost first."""


@dataclass(frozen=True)
class Leaf:
    """One leaf of a structured observation and where it sits in the packed record."""

    path: KeyPath
    space: gym.Space
    """The leaf's space as the env declares it."""
    dtype: np.dtype
    """How it is stored (float64 Boxes as float32)."""
    shape: tuple[int, ...]
    start: int
    """First element of the record it occupies (a byte where the record is bytes)."""
    stop: int

    @property
    def name(self) -> str:
        """The path as text, e.g. `observation` or `sensors/0`."""
        return "/".join(str(part) for part in self.path)

    @property
    def stored_space(self) -> gym.Space:
        """The leaf's space with its stored dtype (what the leaf's encoder is built for)."""
        space = self.space
        if isinstance(space, gym.spaces.Box) and space.dtype != self.dtype:
            return gym.spaces.Box(space.low.astype(self.dtype), space.high.astype(self.dtype), space.shape, self.dtype)
        return space


def _leaf_dtype(space: gym.Space, path: KeyPath) -> tuple[np.dtype, tuple[int, ...]]:
    if isinstance(space, gym.spaces.Box):
        dtype = np.dtype(np.float32) if space.dtype == np.float64 else np.dtype(space.dtype)
        return dtype, tuple(space.shape)
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64), ()
    if isinstance(space, gym.spaces.MultiBinary):
        return np.dtype(space.dtype), tuple(space.shape)
    where = "/".join(str(part) for part in path)
    raise EnvError(f"observation key {where!r} is a {type(space).__name__} space, which cannot be stored; "
                   f"supported inside a Dict or Tuple: Box, Discrete, MultiBinary, Dict and Tuple")


def _walk(space: gym.Space, path: KeyPath) -> Iterator[tuple[KeyPath, gym.Space]]:
    if isinstance(space, gym.spaces.Dict):
        for key, subspace in space.spaces.items():
            yield from _walk(subspace, path + (key,))
    elif isinstance(space, gym.spaces.Tuple):
        for index, subspace in enumerate(space.spaces):
            yield from _walk(subspace, path + (index,))
    else:
        yield path, space


def is_structured(space: gym.Space) -> bool:
    """Whether observations of `space` are packed into records (a Dict or Tuple space)."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


class ObservationLayout:
    """How observations of one space are stored: `shape` and `dtype` of one stored observation, and for
    Dict and Tuple spaces the `leaves` and where each sits in the record."""

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        self.leaves: tuple[Leaf, ...] = ()
        self.bytes = False
        """Whether the record is raw bytes (leaves of different dtypes) rather than one dtype throughout."""
        if not is_structured(space):
            self.shape: tuple[int, ...] | None = None if space.shape is None else tuple(space.shape)
            self.dtype = np.dtype(space.dtype) if space.dtype is not None else None
            return
        found = [(path, subspace, *_leaf_dtype(subspace, path)) for path, subspace in _walk(space, ())]
        if not found:
            raise EnvError(f"observation space {space} has no keys to learn from")
        dtypes = {dtype for _, _, dtype, _ in found}
        self.bytes = len(dtypes) > 1
        self.dtype = np.dtype(np.uint8) if self.bytes else dtypes.pop()
        leaves, position = [], 0
        for path, subspace, dtype, shape in found:
            size = int(np.prod(shape, dtype=np.int64))
            if self.bytes:  # each leaf aligned to its own item size, as C would lay it out
                position = -(-position // dtype.itemsize) * dtype.itemsize
                size *= dtype.itemsize
            leaves.append(Leaf(path, subspace, dtype, shape, position, position + size))
            position += size
        self.leaves = tuple(leaves)
        self.shape = (position,)

    @property
    def structured(self) -> bool:
        """Whether observations are packed into records (Dict and Tuple spaces)."""
        return bool(self.leaves)

    def pack(self, observation: Any, call: str = "step()") -> np.ndarray:
        """One observation as stored: a record for a Dict or Tuple space (a missing key or a wrong shape is
        an `ObservationError` naming the key), the array the env returned otherwise (its shape checked);
        `call` names the env call that returned it, for the error."""
        if not self.leaves:
            array = observation if isinstance(observation, np.ndarray) else np.asarray(observation)
            check_observation(array, self.shape, call)
            return array
        record = np.zeros(self.shape, self.dtype)
        for leaf in self.leaves:
            value = observation
            try:
                for part in leaf.path:
                    value = value[part]
            except (KeyError, IndexError, TypeError):
                raise ObservationError(f"returned an observation without key {leaf.name!r} from {call}, "
                                       f"though its observation space has one") from None
            value = np.asarray(value)
            if value.shape != leaf.shape:
                raise ObservationError(f"returned {leaf.name!r} of shape {value.shape} from {call}, but its "
                                       f"observation space has shape {leaf.shape} there")
            target = record[leaf.start : leaf.stop]
            (target.view(leaf.dtype) if self.bytes else target)[:] = value.reshape(-1)
        return record

    def unpack(self, records: np.ndarray) -> dict[str, np.ndarray]:
        """Each leaf of a batch of records (shape (..., record size)), by name (`Leaf.name`), as arrays of
        shape (..., *leaf shape) in the leaf's stored dtype: views where NumPy can make them."""
        leaves = {}
        for leaf in self.leaves:
            part = records[..., leaf.start : leaf.stop]
            if self.bytes:
                part = np.ascontiguousarray(part).view(leaf.dtype)
            leaves[leaf.name] = part.reshape(*records.shape[:-1], *leaf.shape)
        return leaves

    def leaf(self, name: str) -> Leaf:
        """The leaf called `name` (`Leaf.name`), or an error listing those there are."""
        for leaf in self.leaves:
            if leaf.name == name:
                return leaf
        raise EnvError(f"the observation has no key {name!r}; it has: {', '.join(l.name for l in self.leaves)}")

