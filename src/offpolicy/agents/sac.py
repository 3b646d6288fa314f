"""SAC: a squashed-Gaussian actor, twin critics with soft-updated targets, automatic entropy tuning.

One update (`SACLearner.train`), as in the paper and Stable-Baselines3 (d is the batch's discount: gamma,
or gamma^m where r sums m rewards):
1. entropy: alpha <- minimise -log_alpha * (log pi(a|s) + target_entropy), target = -action dims;
   steps 2 and 3 use alpha as it was before this step, as Stable-Baselines3 and CleanRL do;
2. critics: y = r + d * (1 - terminated) * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'));
   loss = 1/2 * sum_i mean_b w_b (Q_i(s, a) - y)^2, with the batch's importance weights w;
3. actor: loss = mean(alpha * log pi(a|s) - min_i Q_i(s, a)), a ~ pi(.|s) reparameterised;
4. targets: Q_target <- (1 - tau) Q_target + tau Q.
Actions are tanh-squashed to [-1, 1] and scaled to the env's bounds, after the run's first
`random_steps` steps, which are drawn uniformly from the bounds; the deterministic action is tanh(mean).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym
import torch
from torch.nn import functional as F

from offpolicy.agents.common import (
    ActionScale, bounded_box_actions, frozen, hidden_widths, soft_update, validate_common,
)
from offpolicy.agents.custom_encoder import CustomEncoder
from offpolicy.agents.exploration import PolicySampling
from offpolicy.agents.networks import EncodedMLP, Encoder, TwinCritic, make_encoder
from offpolicy.agents.optim import LeanAdam
from offpolicy.buffer import TransitionBatch
from offpolicy.config import ConfigError
from offpolicy.policy import ParameterHandover, Policy, PolicyLearner, PolicyOutput, PolicyState, TrainOutput

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class SACConfig:
    """SAC hyperparameters; each is also a `offpolicy train sac` option."""

    lr: float = 3e-4
    """Adam learning rate of the actor and the entropy coefficient, and of the critics unless `critic_lr` is set."""
    critic_lr: float = 0.0
    """Adam learning rate of the critics; 0 uses `lr`. A faster critic than actor is CleanRL's choice (1e-3 and
    3e-4)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft target update rate per optimisation step."""
    hidden: int = 256
    """Width of each hidden layer (actor and critics)."""
    layers: int = 3
    """Linear layers in the actor and in each critic (2 or more)."""
    actor_net_arch: tuple[int, ...] = ()
    """Widths of the actor's hidden layers, e.g. 256,256 (`--actor-net-arch 256,256`); when given, `hidden`
    and `layers` are not used for it."""
    critic_net_arch: tuple[int, ...] = ()
    """Widths of each critic's hidden layers, e.g. 256,256 (`--critic-net-arch 256,256`); when given, `hidden`
    and `layers` are not used for it."""
    network: str = "auto"
    """How observations are encoded: auto (convolutions for images, else flattened), mlp (always flattened)
    or cnn (convolutions; needs image observations)."""
    activation: str = "relu"
    """The activation between hidden layers: relu, tanh, elu or gelu."""
    entropy_coef: float = 0.0
    """Fixed entropy coefficient alpha; 0 tunes it automatically towards entropy -action dims."""
    initial_entropy_coef: float = 1.0
    """Starting alpha when tuned automatically."""
    random_steps: int = 0
    """Environment steps at the run's start acted uniformly at random over the action range, before the
    policy acts (Stable-Baselines3 and CleanRL do so until learning starts); 0 acts with the policy from the
    first step."""

    def validate(self) -> None:
        validate_common(self)
        if not self.initial_entropy_coef > 0:
            raise ConfigError(f"initial_entropy_coef must be positive, got {self.initial_entropy_coef}")
        if self.entropy_coef < 0:
            raise ConfigError(f"entropy_coef must be 0 (automatic) or positive, got {self.entropy_coef}")


def squashed_sample(actor: torch.nn.Module, observations: torch.Tensor, generator: torch.Generator | None):
    """A reparameterised action in [-1, 1] and its log-probability (with the tanh correction)."""
    mean, log_std = actor(observations).chunk(2, dim=-1)
    log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
    noise = torch.randn(mean.shape, generator=generator, device=mean.device)
    pre_tanh = mean + log_std.exp() * noise
    # log N(u) - log(1 - tanh(u)^2), the second term written stably as 2 (log 2 - u - softplus(-2u))
    log_prob = (-0.5 * noise.pow(2) - log_std - HALF_LOG_2PI).sum(-1)
    log_prob = log_prob - (2 * (math.log(2) - pre_tanh - F.softplus(-2 * pre_tanh))).sum(-1)
    return torch.tanh(pre_tanh), log_prob


class SACPolicy(Policy):
    """Samples from the squashed Gaussian; deterministic actions are tanh(mean)."""

    def __init__(self, actor: EncodedMLP, scale: ActionScale, seed: int, random_steps: int = 0) -> None:
        self.actor = actor
        self.scale = scale
        self.device = next(actor.parameters()).device
        self._handover = ParameterHandover(actor)
        self._exploration = PolicySampling(self.device, seed, random_steps)

    @property
    def exploration(self) -> PolicySampling:
        return self._exploration

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        with torch.no_grad():
            if deterministic:
                unit = torch.tanh(self.actor(observations).chunk(2, dim=-1)[0])
            else:
                unit, _ = squashed_sample(self.actor, observations, self.exploration.generator)
                if self.exploration.random_start(len(unit)):
                    unit = self.exploration.uniform(unit.shape)
            return PolicyOutput(self.scale.to_env(unit), {})

    def state(self) -> PolicyState:
        return self._handover.snapshot()

    def update(self, state: PolicyState) -> None:
        self._handover.adopt(state)

    def to(self, device: torch.device | str) -> "SACPolicy":
        self.actor.to(device)
        self.scale.to(device)
        self.device = torch.device(device)
        self.exploration.to(self.device)
        return self


class SACLearner(PolicyLearner):
    """Trains actor, twin critics and (by default) the entropy coefficient."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SACConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
        custom_encoder: CustomEncoder | None = None,
    ) -> None:
        self.config = c = config or SACConfig()
        c.validate()
        action_size = bounded_box_actions("SAC", action_space)
        self.device = torch.device(device)
        self.gamma = c.gamma
        torch.manual_seed(seed)
        self.scale = ActionScale(action_space).to(self.device)

        def encoder() -> Encoder:  # each network its own (a convolutional one has parameters)
            return make_encoder(observation_space, "SAC", c.network, custom_encoder)

        self.actor = EncodedMLP(encoder(), 2 * action_size, hidden_widths(c, "actor_net_arch"), c.activation)
        self.actor.to(self.device)
        self.critic = TwinCritic(encoder(), action_size, hidden_widths(c, "critic_net_arch"), activation=c.activation)
        self.critic.to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = LeanAdam(self.actor.parameters(), c.lr)
        self.critic_optimizer = LeanAdam(self.critic.parameters(), c.critic_lr or c.lr)
        self.auto_entropy = c.entropy_coef == 0
        start = c.initial_entropy_coef if self.auto_entropy else c.entropy_coef
        self.log_alpha = torch.tensor(math.log(start), device=self.device, requires_grad=self.auto_entropy)
        self.alpha_optimizer = LeanAdam([self.log_alpha], c.lr) if self.auto_entropy else None
        self.target_entropy = -float(action_size)
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed + 1)
        self._policy = SACPolicy(self.actor, self.scale, seed, c.random_steps)
        self.updates = 0

    def train(self, batch: TransitionBatch) -> TrainOutput:
        c = self.config
        observations, next_observations = batch.observations, batch.next_observations
        actions = self.scale.to_unit(batch.actions)

        policy_actions, log_prob = squashed_sample(self.actor, observations, self._generator)
        alpha = self.log_alpha.detach().exp()  # this update's alpha: the value before its own step
        if self.alpha_optimizer is not None:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()

        with torch.no_grad():
            next_actions, next_log_prob = squashed_sample(self.actor, next_observations, self._generator)
            next_q = self.target_critic(next_observations, next_actions).min(dim=0).values
            target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * (next_q - alpha * next_log_prob)
        q_values = self.critic(observations, actions)
        critic_loss = 0.5 * (batch.weights * (q_values - target).pow(2)).mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        with frozen(self.critic):
            actor_loss = (alpha * log_prob - self.critic(observations, policy_actions).min(dim=0).values).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
        self.actor_optimizer.step()

        soft_update(self.target_critic, self.critic, c.tau)
        self.updates += 1
        q_values = q_values.detach()
        metrics = {
            "loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "entropy_coef": alpha,
            "q_values": q_values.mean(),
        }
        return TrainOutput(metrics, (q_values - target).abs().mean(dim=0))

    def policy(self) -> SACPolicy:
        return self._policy

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict() if self.alpha_optimizer else None,
            "generator": self._generator.get_state(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if self.alpha_optimizer is not None and state["alpha_optimizer"] is not None:
            self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self._generator.set_state(state["generator"])
        self.updates = int(state["updates"])
