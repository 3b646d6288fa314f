"""The two interfaces every agent implements: the acting `Policy` and the `PolicyLearner`.

They are split as in the seed: the policy is what environments act with (it
may live on another device, in another thread, or be a lagging copy), the
learner owns everything needed to improve it (networks, targets, optimiser).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from offpolicy.agents.exploration import Exploration
    from offpolicy.buffer import TransitionBatch
    from offpolicy.observations import ObservationLayout
    from offpolicy.steps import StepBatch

PolicyState = dict[str, torch.Tensor]
"""The acting policy's parameters, as handed from the learner to the acting copies."""

TrainMetrics = dict[str, torch.Tensor]
"""What one optimisation step reports (loss and friends), as 0-d tensors.

Tensors rather than floats: reading a value forces a device sync, so metrics
read them in bulk, off the hot path.
"""


@dataclass
class TrainOutput:
    """What one optimisation step hands back: its metrics and, where the learner has them, its TD errors."""

    metrics: TrainMetrics
    td_errors: torch.Tensor | None = None
    """The absolute TD error of each transition of the batch, in batch order: prioritized replay buffers
    take them as new priorities (`ReplayBuffer.update_priorities`)."""


@dataclass
class PolicyOutput:
    """Actions for a batch of observations, and how they were chosen."""

    actions: torch.Tensor
    """One action per observation, batched along the first dimension."""
    context: dict[str, float]
    """The action context, e.g. {"exploration_rate": 0.3}; it applies to every item of the batch."""


class Policy(ABC):
    """Maps a batch of observations to a batch of actions.

    An agent's policy implements the abstract members; the rest follows from
    them. Its `exploration` holds every random draw it makes while collecting,
    so checkpoints keep that state and copies acting side by side are seeded apart.
    """

    device: torch.device
    observation_layout: "ObservationLayout | None" = None
    """How the env's observations are stored (`make_learner` sets it), so that `predict` can take a
    Dict or Tuple observation as the env returns it."""

    @abstractmethod
    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        """Choose actions; `deterministic` turns exploration off (evaluation)."""

    @property
    @abstractmethod
    def exploration(self) -> "Exploration":
        """The random stream and schedule exploration draws from (`NoExploration()` if there is none)."""

    @abstractmethod
    def state(self) -> PolicyState:
        """A snapshot of the parameters, safe to hand to another thread or device."""

    @abstractmethod
    def update(self, state: PolicyState) -> None:
        """Take new parameters (from `state()` of the learner's policy)."""

    @abstractmethod
    def to(self, device: torch.device | str) -> "Policy":
        """Move to `device` and return self."""

    def act_arrays(self, observations: np.ndarray, deterministic: bool) -> tuple[np.ndarray, dict[str, float]]:
        """`act` for NumPy observations, returning NumPy actions and the context, without gradients.

        Runners hold observations and actions as arrays (shared memory, step batches), so this is what
        they call. A policy that can act without torch may override it; the result must be what `act`
        would give.
        """
        with torch.no_grad():
            output = self.act(torch.as_tensor(observations, device=self.device), deterministic)
        return output.actions.cpu().numpy(), output.context

    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """The action for one observation as the env returned it, ready for `env.step`.

        The convenient call for using a trained policy (SB3's `model.predict`):
        NumPy (or a dict of NumPy arrays, for a Dict observation space) in, an int (discrete actions) or a
        NumPy array out, no gradients.
        """
        layout = self.observation_layout
        if layout is not None and layout.structured:
            observation = layout.pack(observation, "predict()")
        elif isinstance(observation, (Mapping, tuple)):
            raise TypeError("this policy was not told its observation space, so it cannot take a dict or "
                            "tuple observation: load it with offpolicy.load_policy or build it with make_learner")
        actions, _ = self.act_arrays(np.asarray(observation)[None], deterministic)
        return actions[0].item() if actions[0].ndim == 0 else actions[0]

    @property
    def env_steps(self) -> int:
        """Environment steps acted so far, which progress-dependent schedules (exploration) follow."""
        return self.exploration.env_steps

    def set_env_steps(self, steps: int) -> None:
        """Tell the policy how many environment steps were taken so far.

        Schedules that depend on progress (exploration) then continue where a
        resumed run stopped, or follow the whole run when envs act on several copies.
        """
        self.exploration.env_steps = steps

    def exploration_state(self) -> dict[str, Any]:
        """The random state exploration draws from, saved in checkpoints so a resumed run continues it."""
        return self.exploration.state()

    def load_exploration_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `exploration_state` returned."""
        self.exploration.load_state(state)

    def seed_exploration(self, seed: int) -> None:
        """Start exploration's random draws afresh from `seed`.

        Copies of one policy that act side by side (one per Ray actor) would
        otherwise draw the same numbers, and their envs explore in lockstep.
        """
        self.exploration.seed(seed)


class PolicyLearner(ABC):
    """The agent being trained: one optimisation step at a time."""

    device: torch.device
    """Where it trains; the replay buffer keeps its samples there."""
    gamma: float
    """The discount of its targets; the replay buffer discounts n-step returns by it."""

    def collected(self, steps: "StepBatch") -> None:
        """The training steps just collected, as they enter the replay buffer (evaluation steps never come
        here). A learner that keeps statistics of its data (`offpolicy.normalization`) updates them here;
        most need nothing."""

    @abstractmethod
    def train(self, batch: "TransitionBatch") -> TrainOutput:
        """Run one optimisation step on `batch` (each transition's loss scaled by `batch.weights`) and
        report its metrics, and its per-sample TD errors where it has them."""

    @abstractmethod
    def policy(self) -> Policy:
        """The current policy; its `state()` is the snapshot acting copies receive."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: networks, targets, optimiser, counters."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""


class ParameterHandover:
    """Hands a module's parameters from the learner's policy to acting copies, cheaply.

    `snapshot()` makes one private copy of each tensor; `adopt()` swaps such a
    snapshot in without copying again when it is already on the right device,
    so a training phase's parameters reach the actors with a single copy and
    without `load_state_dict`'s per-call overhead.
    """

    def __init__(self, module: nn.Module) -> None:
        named = module.state_dict(keep_vars=True)
        self.names = list(named)
        self.tensors = list(named.values())

    def snapshot(self) -> PolicyState:
        return {name: tensor.detach().clone() for name, tensor in zip(self.names, self.tensors)}

    def adopt(self, state: PolicyState) -> None:
        for name, tensor in zip(self.names, self.tensors):
            new = state[name]
            if new.device == tensor.device and new.dtype == tensor.dtype and new.shape == tensor.shape:
                tensor.data = new
            else:
                tensor.data.copy_(new)
