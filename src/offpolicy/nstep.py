"""n-step returns, kept up to date as steps arrive, so that sampling them costs what sampling one step does.

Each stored step s owns a window: itself and up to n - 1 of the same env's
following steps. The buffer keeps, per slot, the window's discounted return
R = sum_k gamma^k r_{s+k}, whether it ended by termination, gamma^m for the m
steps it holds, and in place of s's own next observation, that of the window's
last step, which the target bootstraps from. A window stops growing at n steps, after a step that ended its
episode (terminated: no bootstrap; truncated: bootstrap from the true final
observation), and where the env starts a new episode without ending the old one
(an env restarted after a failure); until its env's next step arrives it simply
holds fewer steps, so it never reaches past the write cursor. Each new step
extends the windows of its up to n - 1 predecessors, one vectorised pass per
distance for a whole chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from offpolicy.steps import StepBatch

WINDOW_FIELDS = ("rewards", "terminated", "discounts")
"""What a buffer stores per slot for its windows beside the bootstrap observation: return, termination,
gamma^m."""


class NStepWindows:
    """The links between stored steps and the arithmetic that grows their windows (host NumPy arrays)."""

    def __init__(self, capacity: int, n_step: int, gamma: float) -> None:
        self.capacity, self.n_step, self.gamma = capacity, n_step, gamma
        self.previous = np.full(capacity, -1, np.int64)
        """Per slot, the serial number of the same env's previous step in the episode (-1: none)."""
        self.done = np.zeros(capacity, bool)
        """Per slot, whether that step ended its episode."""
        self.newest = np.full(0, -1, np.int64)
        """Per env id, the serial number of its newest step."""

    def new_fields(self, count: int) -> dict[str, np.ndarray]:
        """The window fields of `count` freshly pushed steps, beyond their reward and termination: one step
        each."""
        return {"discounts": np.full(count, self.gamma, np.float32)}

    def add(
        self, steps: StepBatch, serials: np.ndarray, oldest: int, fields: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Link the steps just written (serial s in slot s % capacity; `oldest` is the oldest serial still
        stored) and extend their predecessors' windows in `fields` (`WINDOW_FIELDS` arrays, updated in
        place). Returns the slots whose windows grew, each once, and for each the row of `steps` that now
        ends its window: the slot's bootstrap observation is that row's next observation."""
        slots = serials % self.capacity
        env_ids = steps.env_ids
        if len(self.newest) <= env_ids.max():
            grown = np.full(int(env_ids.max()) + 1, -1, np.int64)
            grown[: len(self.newest)] = self.newest
            self.newest = grown
        order = np.argsort(env_ids, kind="stable")
        sorted_envs, sorted_serials = env_ids[order], serials[order]
        starts_group = np.ones(len(order), bool)
        starts_group[1:] = sorted_envs[1:] != sorted_envs[:-1]
        previous = np.empty_like(sorted_serials)
        previous[1:] = sorted_serials[:-1]
        previous[starts_group] = self.newest[sorted_envs[starts_group]]
        self.newest[sorted_envs[np.roll(starts_group, -1)]] = sorted_serials[np.roll(starts_group, -1)]
        linked = np.empty_like(previous)
        linked[order] = previous
        linked[steps.episode_lengths == 1] = -1  # an episode's first step continues nothing
        self.previous[slots] = linked
        self.done[slots] = steps.done

        rewards, terminated = steps.rewards.astype(np.float32), steps.terminated
        touched, ends = [], []
        predecessor, growing = serials, np.ones(len(serials), bool)
        for distance in range(1, self.n_step):
            predecessor = np.where(growing, self.previous[predecessor % self.capacity], -1)
            growing &= predecessor >= oldest
            predecessor_slots = predecessor[growing] % self.capacity
            growing[growing] = ~self.done[predecessor_slots]
            if not growing.any():
                break
            at = predecessor[growing] % self.capacity
            fields["rewards"][at] += np.float32(self.gamma**distance) * rewards[growing]
            fields["terminated"][at] = terminated[growing]
            fields["discounts"][at] = self.gamma ** (distance + 1)
            touched.append(at)
            ends.append(np.flatnonzero(growing))
        if not touched:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        # A slot grown twice in one chunk ends at the later (longer-distance) step: keep its last entry.
        touched_slots, end_rows = np.concatenate(touched)[::-1], np.concatenate(ends)[::-1]
        slots_once, first = np.unique(touched_slots, return_index=True)
        return slots_once, end_rows[first]

    def state_dict(self, size: int) -> dict[str, Any]:
        return {
            "previous": torch.from_numpy(self.previous[:size].copy()),
            "done": torch.from_numpy(self.done[:size].copy()),
            "newest": torch.from_numpy(self.newest.copy()),
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore what `state_dict` returned; None (a buffer saved without windows) links nothing."""
        self.previous[:] = -1
        self.done[:] = False
        self.newest = np.full(0, -1, np.int64)
        if state is None:
            return
        previous = state["previous"].numpy()
        self.previous[: len(previous)] = previous
        self.done[: len(previous)] = state["done"].numpy()
        self.newest = state["newest"].numpy().copy()
