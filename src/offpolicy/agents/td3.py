"""TD3: a deterministic actor, twin critics, delayed actor updates, target policy smoothing.

One update (`TD3Learner.train`), as in the paper and Stable-Baselines3 (d is the batch's discount: gamma,
or gamma^m where r sums m rewards):
1. critics: a' = clip(actor_target(s') + clip(N(0, target_noise), +-noise_clip), -1, 1);
   y = r + d * (1 - terminated) * min_i Q_target_i(s', a');
   loss = sum_i mean_b w_b (Q_i(s, a) - y)^2, with the batch's importance weights w;
2. every `policy_delay` updates: actor loss = -mean Q_1(s, actor(s)), then both targets move by tau
   (`actor_loss` is reported on those updates only).
Acting adds N(0, exploration_noise) to tanh(actor(s)) in [-1, 1] before scaling to the env's
bounds, after the run's first `random_steps` steps, which are drawn uniformly from the bounds; the
deterministic action has no noise.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym
import torch

from offpolicy.agents.common import (
    ActionScale, bounded_box_actions, frozen, hidden_widths, soft_update, validate_common,
)
from offpolicy.agents.custom_encoder import CustomEncoder
from offpolicy.agents.exploration import GaussianNoise
from offpolicy.agents.networks import EncodedMLP, Encoder, TwinCritic, make_encoder
from offpolicy.agents.optim import LeanAdam
from offpolicy.buffer import TransitionBatch
from offpolicy.config import ConfigError
from offpolicy.policy import ParameterHandover, Policy, PolicyLearner, PolicyOutput, PolicyState, TrainOutput


@dataclass
class TD3Config:
    """TD3 hyperparameters; each is also a `offpolicy train td3` option."""

    lr: float = 1e-3
    """Adam learning rate of the actor, and of the critics unless `critic_lr` is set."""
    critic_lr: float = 0.0
    """Adam learning rate of the critics; 0 uses `lr`."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft target update rate, applied at each delayed actor update."""
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
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to actions while collecting, in units of half the action range."""
    random_steps: int = 0
    """Environment steps at the run's start acted uniformly at random over the action range, before the
    policy acts (Stable-Baselines3 and CleanRL do so until learning starts); 0 acts with the policy from the
    first step."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise, in the same units."""
    target_noise_clip: float = 0.5
    """The smoothing noise is clipped to +- this."""

    def validate(self) -> None:
        validate_common(self)
        if self.policy_delay < 1:
            raise ConfigError(f"policy_delay must be at least 1, got {self.policy_delay}")
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be 0 or more, got {getattr(self, name)}")


class TD3Policy(Policy):
    """tanh(actor(s)) plus Gaussian exploration noise; no noise when deterministic."""

    def __init__(self, actor: EncodedMLP, scale: ActionScale, exploration: GaussianNoise) -> None:
        self.actor = actor
        self.scale = scale
        self.device = next(actor.parameters()).device
        self._handover = ParameterHandover(actor)
        self._exploration = exploration

    @property
    def exploration(self) -> GaussianNoise:
        return self._exploration

    def act(self, observations: torch.Tensor, deterministic: bool) -> PolicyOutput:
        with torch.no_grad():
            unit = torch.tanh(self.actor(observations))
            if not deterministic:
                unit = self.exploration.perturb(unit)
            return PolicyOutput(self.scale.to_env(unit), {})

    def state(self) -> PolicyState:
        return self._handover.snapshot()

    def update(self, state: PolicyState) -> None:
        self._handover.adopt(state)

    def to(self, device: torch.device | str) -> "TD3Policy":
        self.actor.to(device)
        self.scale.to(device)
        self.device = torch.device(device)
        return self


class TD3Learner(PolicyLearner):
    """Trains the twin critics every step and the actor every `policy_delay` steps."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: TD3Config | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
        custom_encoder: CustomEncoder | None = None,
    ) -> None:
        self.config = c = config or TD3Config()
        c.validate()
        action_size = bounded_box_actions("TD3", action_space)
        self.device = torch.device(device)
        self.gamma = c.gamma
        torch.manual_seed(seed)
        self.scale = ActionScale(action_space).to(self.device)

        def encoder() -> Encoder:  # each network its own (a convolutional one has parameters)
            return make_encoder(observation_space, "TD3", c.network, custom_encoder)

        self.actor = EncodedMLP(encoder(), action_size, hidden_widths(c, "actor_net_arch"), c.activation)
        self.actor.to(self.device)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = TwinCritic(encoder(), action_size, hidden_widths(c, "critic_net_arch"), activation=c.activation)
        self.critic.to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = LeanAdam(self.actor.parameters(), c.lr)
        self.critic_optimizer = LeanAdam(self.critic.parameters(), c.critic_lr or c.lr)
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed + 1)
        self._policy = TD3Policy(self.actor, self.scale, GaussianNoise(c.exploration_noise, seed, c.random_steps))
        self.updates = 0

    def train(self, batch: TransitionBatch) -> TrainOutput:
        c = self.config
        observations, next_observations = batch.observations, batch.next_observations
        actions = self.scale.to_unit(batch.actions)

        with torch.no_grad():
            smoothing = torch.randn(actions.shape, generator=self._generator, device=self.device)
            smoothing = (smoothing * c.target_noise).clamp(-c.target_noise_clip, c.target_noise_clip)
            next_actions = (torch.tanh(self.target_actor(next_observations)) + smoothing).clamp(-1.0, 1.0)
            next_q = self.target_critic(next_observations, next_actions).min(dim=0).values
            target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * next_q
        q_values = self.critic(observations, actions)
        critic_loss = (batch.weights * (q_values - target).pow(2)).mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        q_values = q_values.detach()
        metrics = {"loss": critic_loss.detach(), "q_values": q_values.mean()}
        self.updates += 1
        if self.updates % c.policy_delay == 0:
            with frozen(self.critic):
                actor_loss = -self.critic(observations, torch.tanh(self.actor(observations)))[0].mean()
                self.actor_optimizer.zero_grad(set_to_none=True)
                actor_loss.backward()
            self.actor_optimizer.step()
            soft_update(self.target_critic, self.critic, c.tau)
            soft_update(self.target_actor, self.actor, c.tau)
            metrics["actor_loss"] = actor_loss.detach()
        return TrainOutput(metrics, (q_values - target).abs().mean(dim=0))

    def policy(self) -> TD3Policy:
        return self._policy

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "target_actor": self.target_actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self._generator.get_state(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.target_actor.load_state_dict(state["target_actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self._generator.set_state(state["generator"])
        self.updates = int(state["updates"])
