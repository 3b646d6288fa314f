"""Observation and reward normalisation (`--normalize-observations`, `--normalize-rewards`), as
Stable-Baselines3's `VecNormalize` does it, kept with the policy instead of the env.

Statistics come from the collected training steps only: the running mean and
variance of their observations, and the running variance of each env's
discounted return (reset at each episode's end). Both are computed in float64
with Chan et al.'s parallel update, so they equal NumPy's over the same steps.
The replay buffer keeps raw steps; each sampled batch is normalised with the
statistics of the moment:

    observation -> clip((observation - mean) / sqrt(var + eps), -clip, clip)
    reward      -> clip(reward / sqrt(var_return + eps), -clip, clip)

(an n-step reward, a discounted sum, is scaled the same way). The acting policy
applies the same observation statistics: they travel in its state with the
parameters, so every acting copy in every backend, evaluation (which never
updates them), checkpoints, `--resume` and `load_policy` see them.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

import gymnasium as gym
import numpy as np
import torch

from offpolicy.config import ConfigError
from offpolicy.observations import ObservationLayout
from offpolicy.policy import Policy, PolicyLearner, PolicyOutput, PolicyState, TrainOutput

if TYPE_CHECKING:
    from offpolicy.agents.exploration import Exploration
    from offpolicy.buffer import TransitionBatch
    from offpolicy.steps import StepBatch

CLIP = 10.0
"""Normalised observations and rewards are clipped to [-CLIP, CLIP] (Stable-Baselines3's default)."""
EPSILON = 1e-8
"""Added to a variance before its square root, so that a constant feature does not divide by zero."""
MEAN, VARIANCE = "normalizer.observation_mean", "normalizer.observation_var"
"""The names of the statistics in a policy's state (and so in `policy.safetensors`)."""


class RunningMoments:
    """Mean and (population) variance of every row seen so far, updated a batch at a time, in float64."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 0

    def update(self, rows: np.ndarray) -> None:
        """Fold in `rows` (batched along the first dimension)."""
        if len(rows) == 0:
            return
        rows = np.asarray(rows, np.float64)
        batch_mean, batch_var, n = rows.mean(axis=0), rows.var(axis=0), len(rows)
        total = self.count + n
        delta = batch_mean - self.mean
        squares = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.mean, self.var = np.asarray(self.mean + delta * (n / total)), np.asarray(squares / total)
        self.count = total

    def state(self) -> dict[str, Any]:
        return {"mean": torch.from_numpy(self.mean.copy()), "var": torch.from_numpy(self.var.copy()),
                "count": self.count}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.mean = state["mean"].numpy().astype(np.float64)
        self.var = state["var"].numpy().astype(np.float64)
        self.count = int(state["count"])


def check_normalizable(observation_space: gym.Space) -> tuple[int, ...]:
    """The shape the observation statistics take (one stored observation's), or an error: normalising needs
    float observations, a Box of floats or a Dict or Tuple whose leaves are all float Boxes."""
    layout = ObservationLayout(observation_space)
    floats = layout.dtype.kind == "f" and (
        not layout.structured or all(isinstance(leaf.space, gym.spaces.Box) for leaf in layout.leaves))
    if not floats:
        raise ConfigError(
            f"normalize_observations needs float observations (a Box of floats, or a Dict or Tuple of them), got "
            f"{observation_space}; images are scaled inside the network and Discrete cells one-hot encoded already")
    return layout.shape


class NormalizedPolicy(Policy):
    """A policy that acts on normalised observations: `inner` sees (observation - mean) / sqrt(var + eps),
    clipped; the statistics are part of `state()` and set by `update()`."""

    def __init__(self, inner: Policy, shape: tuple[int, ...]) -> None:
        self.inner = inner
        self.observation_layout = inner.observation_layout
        self.set_statistics(np.zeros(shape), np.ones(shape))

    @property
    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """The observation mean and variance it normalises with (float64)."""
        return self._mean.copy(), self._var.copy()

    def set_statistics(self, mean: np.ndarray, var: np.ndarray) -> None:
        self._mean, self._var = np.array(mean, np.float64), np.array(var, np.float64)
        self._shift = self._mean.astype(np.float32)
        self._scale = (1.0 / np.sqrt(self._var + EPSILON)).astype(np.float32)
        self._torch = (torch.from_numpy(self._shift).to(self.device), torch.from_numpy(self._scale).to(self.device))

    def normalize(self, observations: torch.Tensor) -> torch.Tensor:
        shift, scale = self._torch
        return ((observations.to(torch.float32) - shift) * scale).clamp(-CLIP, CLIP)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.inner.device

    @property
    def exploration(self) -> "Exploration":
        return self.inner.exploration

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        return self.inner.act(self.normalize(observations), deterministic)

    def act_arrays(self, observations: np.ndarray, deterministic: bool) -> tuple[np.ndarray, dict[str, float]]:
        normalized = np.clip((observations.astype(np.float32) - self._shift) * self._scale, -CLIP, CLIP)
        return self.inner.act_arrays(normalized, deterministic)

    def state(self) -> PolicyState:
        return {**self.inner.state(), MEAN: torch.from_numpy(self._mean.copy()),
                VARIANCE: torch.from_numpy(self._var.copy())}

    def update(self, state: PolicyState) -> None:
        self.set_statistics(state[MEAN].cpu().numpy(), state[VARIANCE].cpu().numpy())
        self.inner.update({name: tensor for name, tensor in state.items() if name not in (MEAN, VARIANCE)})

    def to(self, device: torch.device | str) -> "NormalizedPolicy":
        self.inner.to(device)
        self.set_statistics(self._mean, self._var)
        return self

    def __deepcopy__(self, memo: dict) -> "NormalizedPolicy":
        twin = NormalizedPolicy.__new__(NormalizedPolicy)
        twin.inner = copy.deepcopy(self.inner, memo)
        twin.observation_layout = self.observation_layout
        twin.set_statistics(self._mean, self._var)
        return twin


class NormalizedLearner(PolicyLearner):
    """Trains `inner` on normalised batches and keeps the statistics from the steps it is shown
    (`collected`); its policy is `inner`'s, acting on normalised observations."""

    def __init__(self, inner: PolicyLearner, observation_space: gym.Space, observations: bool, rewards: bool) -> None:
        self.inner = inner
        self.device, self.gamma = inner.device, inner.gamma
        self.observation_moments = RunningMoments(check_normalizable(observation_space)) if observations else None
        self.return_moments = RunningMoments() if rewards else None
        self.returns = np.zeros(0, np.float64)
        """Each env's discounted return so far in its episode, by env id."""
        shape = self.observation_moments.mean.shape if self.observation_moments else None
        self._policy: Policy = NormalizedPolicy(inner.policy(), shape) if shape is not None else inner.policy()
        self._reward_scale = 1.0

    def collected(self, steps: "StepBatch") -> None:
        if self.observation_moments is not None:
            self.observation_moments.update(steps.observations)
            assert isinstance(self._policy, NormalizedPolicy)
            self._policy.set_statistics(self.observation_moments.mean, self.observation_moments.var)
        if self.return_moments is not None:
            self.return_moments.update(self._discounted_returns(steps))
            self._reward_scale = float(1.0 / np.sqrt(self.return_moments.var + EPSILON))

    def _discounted_returns(self, steps: "StepBatch") -> np.ndarray:
        """Each step's env's discounted return including it; an episode's end starts the next at 0."""
        if len(steps) and steps.env_ids.max() >= len(self.returns):
            self.returns = np.concatenate([self.returns, np.zeros(steps.env_ids.max() + 1 - len(self.returns))])
        values = np.empty(len(steps), np.float64)
        for row, (env, reward, done) in enumerate(zip(steps.env_ids.tolist(), steps.rewards.tolist(),
                                                      steps.done.tolist())):
            values[row] = self.returns[env] = self.returns[env] * self.gamma + reward
            if done:
                self.returns[env] = 0.0
        return values

    def normalize_batch(self, batch: "TransitionBatch") -> "TransitionBatch":
        """`batch` as the inner learner trains on it."""
        changes: dict[str, torch.Tensor] = {}
        if isinstance(self._policy, NormalizedPolicy):
            learner_side = self._policy.normalize
            changes["observations"] = learner_side(batch.observations)
            changes["next_observations"] = learner_side(batch.next_observations)
        if self.return_moments is not None:
            changes["rewards"] = (batch.rewards * self._reward_scale).clamp(-CLIP, CLIP)
        return dataclasses.replace(batch, **changes)

    def train(self, batch: "TransitionBatch") -> TrainOutput:
        return self.inner.train(self.normalize_batch(batch))

    def policy(self) -> Policy:
        return self._policy

    def state_dict(self) -> dict[str, Any]:
        normalizer: dict[str, Any] = {"returns": torch.from_numpy(self.returns.copy())}
        if self.observation_moments is not None:
            normalizer["observations"] = self.observation_moments.state()
        if self.return_moments is not None:
            normalizer["discounted_returns"] = self.return_moments.state()
        return {**self.inner.state_dict(), "normalizer": normalizer}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        normalizer = state.pop("normalizer", None)
        if normalizer is None:
            raise ConfigError("this checkpoint was saved without normalisation statistics; resume it without "
                              "normalize_observations and normalize_rewards")
        self.inner.load_state_dict(state)
        self.returns = normalizer["returns"].numpy().astype(np.float64)
        if self.observation_moments is not None:
            self.observation_moments.load_state(normalizer["observations"])
            assert isinstance(self._policy, NormalizedPolicy)
            self._policy.set_statistics(self.observation_moments.mean, self.observation_moments.var)
        if self.return_moments is not None:
            self.return_moments.load_state(normalizer["discounted_returns"])
            self._reward_scale = float(1.0 / np.sqrt(self.return_moments.var + EPSILON))


__all__ = ["NormalizedLearner", "NormalizedPolicy", "RunningMoments", "check_normalizable"]
