"""Checkpoints: save, retain, restore, without ever executing code on load.

A checkpoint is a folder `RUN_DIR/checkpoints/step_<STEP>/` holding
`policy.safetensors`, `learner.safetensors` (every tensor) and `learner.json`
(the rest of the state: counters, hyperparameters, nested structure), plus
optional parts saved the same way (`progress`, `buffer`, ...).
`checkpoints/index.json` lists them with their evaluation return. Folders and
the index are written under a temporary name, flushed to disk and renamed,
and old checkpoints are deleted only after the new index is in place, so a
process killed at any moment leaves the previous checkpoint whole and listed.
The last `keep_last` and the best by evaluation return are kept. A state with
a NaN or infinite tensor is refused: a diverged run never overwrites a good
checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors.torch import load_file, save_file

from offpolicy.policy import Policy, PolicyLearner, PolicyState


class CheckpointError(RuntimeError):
    """A checkpoint is missing or unreadable; the message names it."""


class NonFiniteStateError(RuntimeError):
    """Training produced a NaN or infinite value; the message says where and what to do."""


def _encode(value: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().clone().contiguous()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise NonFiniteStateError(f"{path} holds NaN or infinite values")
        tensors[path] = tensor
        return {"__tensor__": path}
    if isinstance(value, Mapping):
        if all(isinstance(key, str) for key in value):
            return {key: _encode(item, tensors, f"{path}.{key}") for key, item in value.items()}
        return {"__items__": [[key, _encode(item, tensors, f"{path}.{key}")] for key, item in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_encode(item, tensors, f"{path}.{index}") for index, item in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} at {path!r} in a checkpoint")


def _decode(value: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__tensor__"}:
            return tensors[value["__tensor__"]]
        if set(value) == {"__items__"}:
            return {key: _decode(item, tensors) for key, item in value["__items__"]}
        return {key: _decode(item, tensors) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item, tensors) for item in value]
    return value


def _flush_to_disk(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_state(directory: Path, name: str, state: Mapping[str, Any]) -> None:
    """Write a nested state as `name.safetensors` (tensors) and `name.json` (everything else), flushed."""
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(state, tensors, name)
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(structure), encoding="utf-8")
    for suffix in (".safetensors", ".json"):
        _flush_to_disk(directory / f"{name}{suffix}")


def load_state(directory: Path, name: str) -> dict[str, Any]:
    """Read what `save_state` wrote; only tensors and JSON are parsed, nothing is executed."""
    try:
        tensors = load_file(str(directory / f"{name}.safetensors"))
        structure = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    except Exception as error:  # OSError, bad JSON, or safetensors' own error for a corrupt file
        raise CheckpointError(f"cannot read checkpoint {directory / name}: {error}") from error
    return _decode(structure, tensors)


@dataclass
class CheckpointInfo:
    step: int
    eval_return: float | None


class Checkpointer:
    """Saves policy and learner state keyed by environment step, keeping the last N and the best."""

    def __init__(self, directory: Path, keep_last: int = 2) -> None:
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.entries = [e for e in self._read_index() if self.path(e.step).is_dir()]
        if self.directory.is_dir():
            for leftover in self.directory.glob("*.tmp"):  # a write that was cut short
                if leftover.is_dir():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink(missing_ok=True)

    def path(self, step: int) -> Path:
        return self.directory / f"step_{step:09d}"

    def checkpoint(
        self,
        policy: Policy,
        learner: PolicyLearner,
        step: int,
        eval_return: float | None,
        parts: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Path:
        """Save the policy, the learner and any extra `parts` at `step`, then apply retention.

        Raises `NonFiniteStateError` (writing nothing) if any tensor is NaN or infinite.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(step)
        staging = final.with_name(final.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            save_state(staging, "policy", policy.state())
            save_state(staging, "learner", learner.state_dict())
            for name, state in (parts or {}).items():
                save_state(staging, name, state)
        except NonFiniteStateError as error:
            shutil.rmtree(staging, ignore_errors=True)
            raise NonFiniteStateError(f"not saving the checkpoint at step {step:,}: {error}") from None
        replaced = final.with_name(final.name + ".old.tmp")
        if final.exists():
            os.replace(final, replaced)
        os.replace(staging, final)
        _flush_to_disk(self.directory)
        self.entries = [e for e in self.entries if e.step != step] + [CheckpointInfo(step, eval_return)]
        self._retain()
        shutil.rmtree(replaced, ignore_errors=True)
        return final

    @property
    def latest(self) -> CheckpointInfo | None:
        return max(self.entries, key=lambda e: e.step, default=None)

    @property
    def best(self) -> CheckpointInfo | None:
        rated = [e for e in self.entries if e.eval_return is not None]
        return max(rated, key=lambda e: (e.eval_return, e.step), default=None)

    def load(self, step: int) -> tuple[PolicyState, dict[str, Any]]:
        """The policy state and learner state saved at `step`."""
        path = self.path(step)
        if not path.is_dir():
            raise CheckpointError(f"no checkpoint for step {step} in {self.directory}")
        return load_state(path, "policy"), load_state(path, "learner")

    def load_part(self, step: int, name: str) -> dict[str, Any] | None:
        """An extra part saved at `step` (e.g. "buffer"), or None if that checkpoint has none."""
        path = self.path(step)
        if not (path / f"{name}.json").exists():
            return None
        return load_state(path, name)

    def _retain(self) -> None:
        """List only what is kept, then delete the rest: the index never names a missing folder."""
        by_step = sorted(self.entries, key=lambda e: e.step)
        keep = {e.step for e in by_step[-self.keep_last :]}
        if self.best is not None:
            keep.add(self.best.step)
        self.entries = [e for e in by_step if e.step in keep]
        self._write_index()
        for entry in by_step:
            if entry.step not in keep:
                shutil.rmtree(self.path(entry.step), ignore_errors=True)

    def _write_index(self) -> None:
        best = self.best
        index = {
            "checkpoints": [{"step": e.step, "eval_return": e.eval_return} for e in self.entries],
            "latest": self.latest.step if self.latest else None,
            "best": best.step if best else None,
        }
        staging = self.directory / "index.json.tmp"
        staging.write_text(json.dumps(index, indent=1), encoding="utf-8")
        _flush_to_disk(staging)
        os.replace(staging, self.directory / "index.json")

    def _read_index(self) -> list[CheckpointInfo]:
        index_path = self.directory / "index.json"
        if not index_path.exists():
            return []
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            return [CheckpointInfo(int(e["step"]), e["eval_return"]) for e in index["checkpoints"]]
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"checkpoint index {index_path} is corrupted: {error}") from error
