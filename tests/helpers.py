"""Small, exactly predictable stand-ins for environments, policies and learners."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from fake_envs import CountingEnv, FailingEnv, SlowEnv  # noqa: F401  (re-exported for tests)
from offpolicy.buffer import TransitionBatch
from offpolicy.policy import Policy, PolicyLearner, PolicyOutput, PolicyState, TrainOutput


class StubPolicy(Policy):
    """Always action 0; its parameters are one counter (`version`). Records what it saw."""

    def __init__(self, log: dict[str, list] | None = None) -> None:
        self.device = torch.device("cpu")
        self.version = torch.zeros(())
        self.log = log if log is not None else {"batches": [], "updates": []}

    def __deepcopy__(self, memo: dict) -> "StubPolicy":
        copy = StubPolicy(self.log)  # copies share the log, so tests see every copy's calls
        copy.version = self.version.clone()
        return copy

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        self.log["batches"].append((len(observations), deterministic, float(self.version)))
        return PolicyOutput(torch.zeros(len(observations), dtype=torch.int64), {"version": float(self.version)})

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(observations), 2)

    def state(self) -> PolicyState:
        return {"version": self.version.clone()}

    def update(self, state: PolicyState) -> None:
        self.log["updates"].append(float(state["version"]))
        self.version = state["version"].clone()

    def to(self, device: torch.device | str) -> "StubPolicy":
        return self


class StubLearner(PolicyLearner):
    """Counts its optimisation steps; each one bumps the policy's version."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._policy = StubPolicy()
        self.train_calls = 0
        self.batch_sizes: list[int] = []

    def train(self, batch: TransitionBatch) -> TrainOutput:
        self.train_calls += 1
        self.batch_sizes.append(len(batch.rewards))
        self._policy.version += 1
        return {"loss": torch.tensor(1.0 / self.train_calls)}

    def policy(self) -> StubPolicy:
        return self._policy

    def state_dict(self) -> dict[str, Any]:
        return {"train_calls": self.train_calls, "version": self._policy.version.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.train_calls = int(state["train_calls"])
        self._policy.version = state["version"].clone()

