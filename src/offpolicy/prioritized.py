"""Prioritized experience replay (Schaul et al., 2016): a sum tree and the buffer that samples by it.

A transition i is drawn with probability P(i) = p_i / sum_k p_k, where its
priority p_i = (|delta_i| + epsilon) ** alpha follows the learner's last TD error
for it; a new transition enters at the highest priority seen so far, so each is
replayed soon at least once. The loss of each drawn transition is scaled by its
importance weight w_i = (N * P(i)) ** -beta / max_j w_j (the maximum over the
batch), and beta rises linearly to 1 over the run, where the correction must be
exact.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch

from offpolicy.buffer import TransitionBatch, TransitionBuffer
from offpolicy.steps import StepBatch
from offpolicy.sum_tree import SumTree


class PrioritizedReplayBuffer(TransitionBuffer):
    """`TransitionBuffer` sampling by priority (`SumTree`), with importance weights; n-step returns as there."""

    def __init__(
        self,
        capacity: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        gamma: float = 0.99,
        n_step: int = 1,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        total_steps: int = 0,
    ) -> None:
        super().__init__(capacity, device, seed, gamma, n_step)
        self.alpha, self.beta_start, self.epsilon = alpha, beta, epsilon
        self.total_steps = total_steps
        self.tree = SumTree(capacity)
        self.max_priority = 1.0
        """The highest priority given so far: what new transitions enter with."""
        self._rng = np.random.default_rng(seed)

    @property
    def beta(self) -> float:
        """The importance-sampling exponent now: from `beta_start` at the first step to 1 at `total_steps`
        (with `total_steps` 0, it stays at `beta_start`)."""
        progress = min(1.0, self._pushed / self.total_steps) if self.total_steps > 0 else 0.0
        return self.beta_start + (1.0 - self.beta_start) * progress

    def push(self, steps: StepBatch) -> None:
        count = min(len(steps), self.capacity)
        slots = (self._position + len(steps) - count + np.arange(count)) % self.capacity
        super().push(steps)
        if count:
            self.tree.update(slots, np.full(count, self.max_priority))

    def _draw(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        slots, weights = self.tree.sample(count, self._rng, self.beta)
        return torch.from_numpy(slots).to(self.device), torch.from_numpy(weights).to(self.device)

    def sample_batches(self, batch_size: int, count: int) -> Iterator[TransitionBatch]:
        """One batch at a time, each drawn after the learner's priorities for the one before are in."""
        for _ in range(count):
            yield self.sample(batch_size)

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """p_i = (|delta_i| + epsilon) ** alpha for each sampled transition."""
        highest = self.tree.update_from_errors(
            indices.numpy(force=True), td_errors.numpy(force=True), self.epsilon, self.alpha)
        self.max_priority = max(self.max_priority, highest)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["priorities"] = torch.from_numpy(self.tree.priorities(np.arange(self._size)).copy())
        state["max_priority"] = self.max_priority
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned; a buffer saved without priorities gets the maximum for all."""
        super().load_state_dict(state)
        saved = state.get("priorities")
        priorities = saved.numpy() if saved is not None else np.ones(self._size)
        self.tree = SumTree(self.capacity)
        self.tree.update(np.arange(len(priorities)), priorities)
        self.max_priority = float(state.get("max_priority", 1.0))

    def sampling_state(self) -> Any:
        """The random states of sampling and how far beta has been annealed."""
        return {"generator": self._generator.get_state(), "rng": self._rng.bit_generator.state,
                "pushed": self._pushed}

    def load_sampling_state(self, state: Any) -> None:
        if not isinstance(state, dict):  # a checkpoint written by the uniform buffer
            self._generator.set_state(state)
            return
        self._generator.set_state(state["generator"])
        self._rng.bit_generator.state = state["rng"]
        self._pushed = max(self._pushed, int(state["pushed"]))
