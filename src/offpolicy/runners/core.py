"""The runner interface, and what every runner shares.

A runner owns environments and the acting policy (or its inference server):
the strategy asks it for steps, for whole episodes, and hands it new
parameters. Subclasses implement `run_steps`; the rest has a default here,
which a backend overrides where it acts differently (through a server, across
processes, on Ray actors).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Sequence, TypeVar

from typing import TYPE_CHECKING

import numpy as np

from offpolicy.steps import StepBatch

if TYPE_CHECKING:  # torch stays out of worker processes, which import this module
    import torch

    from offpolicy.policy import Policy, PolicyState

Chunk = TypeVar("Chunk", StepBatch, np.ndarray)


class EnvRunnerError(RuntimeError):
    """An environment failed while a runner stepped it; the message names the env.

    `env_ids` names the envs to replace to go on, where the runner knows them.
    """

    def __init__(self, message: str, env_ids: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.env_ids = tuple(int(env_id) for env_id in env_ids)


def pop_steps(ready: "deque[Chunk]", wanted: int) -> Chunk:
    """The oldest ready chunk (a `StepBatch`, or env ids), cut to at most `wanted` steps; the rest stays first."""
    chunk = ready.popleft()
    if len(chunk) > wanted:
        chunk, rest = chunk[:wanted], chunk[wanted:]
        ready.appendleft(rest)
    return chunk


class EnvRunner(ABC):
    """Steps environments with a policy and hands back timesteps."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        """The acting policy (the trainer's copy, for backends that act elsewhere)."""

    @property
    def device(self) -> "torch.device":
        """Where the acting policy runs (the inference device)."""
        return self.policy.device

    @abstractmethod
    def run_steps(self, count: int) -> StepBatch:
        """The next `count` steps, in the order they completed."""

    def run_episodes(self, count: int) -> list[StepBatch]:
        """`count` complete episodes, each a batch of its steps, in the order they end.

        Episodes already under way when called are stepped through but not
        returned, since their start was handed out earlier.
        """
        episodes: list[StepBatch] = []
        current: dict[int, list[StepBatch]] = {}
        while len(episodes) < count:
            step = self.run_steps(1)
            env_id = int(step.env_ids[0])
            if step.episode_lengths[0] == 1:
                current[env_id] = []
            steps = current.get(env_id)
            if steps is None:
                continue
            steps.append(step)
            if step.done[0]:
                episodes.append(StepBatch.concatenate(current.pop(env_id)))
        return episodes

    def update_policy(self, state: PolicyState) -> None:
        """Act with these parameters from now on."""
        self.policy.update(state)

    def policy_state(self) -> PolicyState:
        """The parameters the runner acts with."""
        return self.policy.state()

    def replace_failed(self, env_ids: Sequence[int], seeds: Sequence[int]) -> bool:
        """Replace the workers of the failed envs `env_ids` (new envs seeded from `seeds`, indexed by env id)
        and keep the others stepping; False when this runner cannot, and all its envs must be recreated."""
        return False

    def close(self) -> None:
        """Release environments and workers."""

    def __enter__(self) -> "EnvRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
