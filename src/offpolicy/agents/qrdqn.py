"""QR-DQN (Dabney et al., 2018): DQN learning the distribution of returns as N quantiles per action.

The network gives N values theta_i(s, a) per action, the return's quantiles at the midpoints
tau_i = (2i + 1) / 2N; Q(s, a) is their mean. One update (`QRDQNLearner.train`), on a batch of
transitions (s, a, r, s', terminated) with importance weights w and discounts d (gamma, or gamma^m
for n-step returns):
1. a* = argmax_a' mean_j theta_j(s', a') with the online network (double-DQN selection; with `double_q` off,
   with the target network);
   target quantiles T_j = r + d * (1 - terminated) * theta_target_j(s', a*);
2. u_ij = T_j - theta_i(s, a); the quantile Huber loss
   rho_i(u) = |tau_i - 1{u < 0}| * huber(u)   (huber with threshold 1);
   loss = mean_b w_b * sum_i mean_j rho_i(u_bij), one Adam step with the gradient norm clipped;
3. target: theta_target <- (1 - tau) * theta_target + tau * theta, or a copy every `target_update_interval`
   updates.
Exploration, acting (argmax of the quantiles' mean), presets and the `dueling` option are DQN's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from offpolicy.agents.common import hidden_widths
from offpolicy.agents.custom_encoder import CustomEncoder
from offpolicy.agents.dqn import DQNConfig, DQNLearner, DQNPolicy
from offpolicy.agents.networks import Encoder, q_network
from offpolicy.buffer import TransitionBatch
from offpolicy.config import ConfigError
from offpolicy.policy import TrainOutput


@dataclass
class QRDQNConfig(DQNConfig):
    """QR-DQN hyperparameters: DQN's, and the number of quantiles."""

    quantiles: int = 50
    """Quantiles of the return learned per action."""

    def validate(self) -> None:
        super().validate()
        if isinstance(self.quantiles, bool) or not isinstance(self.quantiles, int) or self.quantiles < 1:
            raise ConfigError(f"quantiles must be a whole number of at least 1, got {self.quantiles!r}")


def quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample loss sum_i mean_j |tau_i - 1{u_ij < 0}| * huber(u_ij), u_ij = targets_j - quantiles_i,
    for `quantiles` and `targets` of shape (batch, N) and (batch, N')."""
    count = quantiles.shape[1]
    taus = (torch.arange(count, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / count
    errors = targets.unsqueeze(1) - quantiles.unsqueeze(2)  # (batch, i, j)
    size = errors.abs()
    huber = torch.where(size <= 1.0, 0.5 * errors * errors, size - 0.5)
    weight = (taus.view(1, -1, 1) - (errors.detach() < 0).to(errors.dtype)).abs()
    return (weight * huber).mean(dim=2).sum(dim=1)


class QRDQNPolicy(DQNPolicy):
    """Epsilon-greedy over the mean of each action's quantiles."""

    def quantiles(self, observations: torch.Tensor) -> torch.Tensor:
        """theta_i(s, a), shape (batch, actions, quantiles)."""
        return self.q_network(observations).unflatten(1, (self.exploration.num_actions, -1))

    def q_values(self, observations: torch.Tensor) -> torch.Tensor:
        return self.quantiles(observations).mean(dim=2)


class QRDQNLearner(DQNLearner):
    """Trains the quantile network; everything else (exploration, targets, checkpoints) is DQN's."""

    policy_class = QRDQNPolicy
    config: QRDQNConfig

    def __init__(self, observation_space, action_space, config: QRDQNConfig | None = None,
                 device: torch.device | str = "cpu", seed: int = 0,
                 custom_encoder: CustomEncoder | None = None) -> None:
        super().__init__(observation_space, action_space, config or QRDQNConfig(), device, seed, custom_encoder)

    def make_q_network(self, encoder: Encoder, num_actions: int) -> nn.Module:
        """`quantiles` outputs per action."""
        c = self.config
        return q_network(encoder, num_actions, hidden_widths(c), c.dueling, atoms=c.quantiles, activation=c.activation)

    def train(self, batch: TransitionBatch) -> TrainOutput:
        c = self.config
        policy = self._policy
        with torch.no_grad():
            target_quantiles = self.target_quantiles(batch.next_observations)
            # The next action by the online network's mean (double DQN), or by the target's own.
            chooser = policy.q_values(batch.next_observations) if c.double_q else target_quantiles.mean(dim=2)
            next_actions = chooser.argmax(dim=1)
            rows = torch.arange(len(next_actions), device=self.device)
            next_quantiles = target_quantiles[rows, next_actions]
            bootstrap = (batch.discounts * (1.0 - batch.terminated)).unsqueeze(1)
            targets = batch.rewards.unsqueeze(1) + bootstrap * next_quantiles
        quantiles = policy.quantiles(batch.observations)[rows, batch.actions.long()]
        loss = (batch.weights * quantile_huber_loss(quantiles, targets)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, c.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.updates += 1
        self.update_target()
        q_values = quantiles.detach().mean(dim=1)
        td_errors = (q_values - targets.mean(dim=1)).abs()
        return TrainOutput({"loss": loss.detach(), "q_values": q_values.mean()}, td_errors)

    def target_quantiles(self, observations: torch.Tensor) -> torch.Tensor:
        return self.target_network(observations).unflatten(1, (self._policy.exploration.num_actions, -1))
