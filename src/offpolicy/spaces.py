"""Observation and action spaces as JSON, stored beside a run's config and a saved policy's, so that a
policy can be rebuilt without making its env (an env given as a callable, or one not installed here).

Box, Discrete, MultiBinary and MultiDiscrete are written, and Dict and Tuple spaces of them (keys kept in
order); a space of another kind is not, and loading then makes the env to read its spaces as before.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

SPACES_FILE = "spaces.json"


def _bound(values: np.ndarray) -> Any:
    """One number where every entry is the same (the usual case), else the flat list; infinities as text."""
    flat = values.reshape(-1)
    if len(flat) and np.array_equal(flat, np.full_like(flat, flat[0]), equal_nan=True):
        return _number(flat[0])
    return [_number(value) for value in flat]


def _number(value: Any) -> Any:
    value = value.item()
    return str(value) if isinstance(value, float) and not np.isfinite(value) else value


def _array(bound: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    values = [float(v) if isinstance(v, str) else v for v in (bound if isinstance(bound, list) else [bound])]
    return np.broadcast_to(np.array(values, dtype=np.float64), (int(np.prod(shape)),)).reshape(shape).astype(dtype)


def space_to_json(space: gym.Space) -> dict[str, Any] | None:
    """`space` as a JSON-ready dict, or None for a kind this module does not write."""
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype),
                "low": _bound(space.low), "high": _bound(space.high)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist(),
                "dtype": str(space.dtype)}
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        items = list(space.spaces.items()) if isinstance(space, gym.spaces.Dict) else list(enumerate(space.spaces))
        parts = [(key, space_to_json(subspace)) for key, subspace in items]
        if any(part is None for _, part in parts):
            return None
        if isinstance(space, gym.spaces.Tuple):
            return {"type": "Tuple", "spaces": [part for _, part in parts]}
        return {"type": "Dict", "spaces": [[key, part] for key, part in parts]}  # a list: the order matters
    return None


def space_from_json(data: dict[str, Any]) -> gym.Space:
    """The space `space_to_json` described."""
    kind = data.get("type")
    if kind == "Box":
        shape, dtype = tuple(data["shape"]), np.dtype(data["dtype"])
        return gym.spaces.Box(_array(data["low"], shape, dtype), _array(data["high"], shape, dtype), shape, dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(data["n"], start=data.get("start", 0))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(data["n"])
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(data["nvec"], dtype=data.get("dtype", "int64"), start=data.get("start"))
    if kind == "Dict":
        return gym.spaces.Dict(OrderedDict((key, space_from_json(part)) for key, part in data["spaces"]))
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_json(part) for part in data["spaces"]])
    raise ValueError(f"unknown space type {kind!r}")


def spaces_json(observation_space: gym.Space, action_space: gym.Space) -> dict[str, Any] | None:
    """Both spaces for `SPACES_FILE`, or None when either is of a kind not written."""
    observation, action = space_to_json(observation_space), space_to_json(action_space)
    if observation is None or action is None:
        return None
    return {"observation_space": observation, "action_space": action}


def read_spaces(directory: Path) -> tuple[gym.Space, gym.Space] | None:
    """The spaces stored in `directory`, or None where none were."""
    import json

    path = Path(directory) / SPACES_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return space_from_json(data["observation_space"]), space_from_json(data["action_space"])
