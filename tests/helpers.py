"""Small, exactly predictable stand-ins for environments, policies and learners."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from fake_envs import CountingEnv, FailingEnv, SlowEnv  # noqa: F401  (re-exported for tests)
from offpolicy.agents.exploration import NoExploration
from offpolicy.buffer import TransitionBatch
from offpolicy.policy import Policy, PolicyLearner, PolicyOutput, PolicyState, TrainOutput


def observation_ids(observations: torch.Tensor) -> torch.Tensor:
    """An id per observation: a `CountingEnv`'s [step, tag] is step + 1000 * tag (one value: that value)."""
    rows = observations.reshape(len(observations), -1).round().long()
    return rows[:, 0] + (1000 * rows[:, 1] if rows.shape[1] > 1 else 0)


class StubPolicy(Policy):
    """Echoes: each observation's action is its own id (`observation_ids`), so a step whose action was
    chosen for another observation shows. Its parameters are one counter (`version`), reported as the
    action context. Records what it saw."""

    def __init__(self, log: dict[str, list] | None = None) -> None:
        self.device = torch.device("cpu")
        self.version = torch.zeros(())
        self.log = log if log is not None else {"batches": [], "updates": []}
        self._exploration = NoExploration()

    @property
    def exploration(self) -> NoExploration:
        return self._exploration

    def __deepcopy__(self, memo: dict) -> "StubPolicy":
        copy = StubPolicy(self.log)  # copies share the log, so tests see every copy's calls
        copy.version = self.version.clone()
        return copy

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        self.log["batches"].append((len(observations), deterministic, float(self.version)))
        return PolicyOutput(observation_ids(observations), {"version": float(self.version)})

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
        self.gamma = 0.99
        self._policy = StubPolicy()
        self.train_calls = 0
        self.batch_sizes: list[int] = []

    def train(self, batch: TransitionBatch) -> TrainOutput:
        self.train_calls += 1
        self.batch_sizes.append(len(batch.rewards))
        self._policy.version += 1
        return TrainOutput({"loss": torch.tensor(1.0 / self.train_calls)})

    def policy(self) -> StubPolicy:
        return self._policy

    def state_dict(self) -> dict[str, Any]:
        return {"train_calls": self.train_calls, "version": self._policy.version.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.train_calls = int(state["train_calls"])
        self._policy.version = state["version"].clone()


def disturb(network: torch.nn.Module, seed: int = 0) -> None:
    """Add the same noise (for a seed) to every parameter: a target network unlike the online one, so that
    double-DQN and plain targets differ."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
