"""QR-DQN's loss and update, and the dueling network, against hand and reference computations."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import disturb

from offpolicy.agents import make_learner
from offpolicy.agents.dqn import DQNConfig, DQNLearner
from offpolicy.agents.networks import DuelingQNetwork, FlattenEncoder
from offpolicy.agents.qrdqn import QRDQNConfig, QRDQNLearner, quantile_huber_loss
from offpolicy.buffer import TransitionBuffer
from offpolicy.checkpoint import load_state, save_state
from offpolicy.config import ConfigError
from offpolicy.steps import StepBatch

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


def test_quantile_huber_loss_by_hand():
    # taus 0.25, 0.75; u = T_j - theta_i: [[0.5, 3], [-0.5, 2]]; huber: [[0.125, 2.5], [0.125, 1.5]];
    # weights |tau_i - 1{u < 0}|: [[0.25, 0.25], [0.25, 0.75]]; mean over j, sum over i:
    # (0.25 * 0.125 + 0.25 * 2.5) / 2 + (0.25 * 0.125 + 0.75 * 1.5) / 2 = 0.328125 + 0.578125
    loss = quantile_huber_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]))
    assert loss.tolist() == [0.90625]


def test_quantile_loss_is_smallest_at_the_true_quantiles():
    samples = torch.randn(1, 4000).sort().values
    true = torch.quantile(samples[0], (torch.arange(4) + 0.5) / 4).unsqueeze(0)
    best = quantile_huber_loss(true, samples)
    for shift in (-0.3, 0.3):
        assert quantile_huber_loss(true + shift, samples) > best


def batch_of(size=64, seed=0, gamma=0.9, n_step=1):
    rng = np.random.default_rng(seed)
    buffer = TransitionBuffer(1000, seed=seed, gamma=gamma, n_step=n_step)
    buffer.push(StepBatch.of_transitions(
        rng.normal(size=(300, 4)).astype(np.float32), rng.normal(size=(300, 4)).astype(np.float32),
        rng.integers(3, size=300), rng.normal(size=300).astype(np.float32), rng.random(300) < 0.1,
    ))
    batch = buffer.sample(size)
    batch.weights = torch.linspace(0.2, 1.0, size)
    return batch


@pytest.mark.parametrize("double_q", [True, False])
def test_qrdqn_update_follows_its_equations(double_q):
    config = QRDQNConfig(hidden=16, quantiles=8, tau=0.25, lr=1e-2, double_q=double_q)
    learner = QRDQNLearner(OBS, ACTIONS, config, seed=3)
    disturb(learner.target_network)  # a target unlike the online network: the two choices of next action differ
    batch = batch_of(n_step=3)  # discounts vary: n-step windows of different lengths
    online, target = learner.q_network, learner.target_network
    target_before = [p.clone() for p in target.parameters()]
    with torch.no_grad():
        z = online(batch.observations).view(64, 3, 8)
        z_next = online(batch.next_observations).view(64, 3, 8)
        z_target = target(batch.next_observations).view(64, 3, 8)
        chosen = (z_next if double_q else z_target).mean(2).argmax(1)
        targets = batch.rewards[:, None] + (batch.discounts * (1 - batch.terminated))[:, None] * z_target[
            torch.arange(64), chosen]
        theta = z[torch.arange(64), batch.actions]
        taus = (torch.arange(8) + 0.5) / 8
        u = targets[:, None, :] - theta[:, :, None]
        huber = torch.where(u.abs() <= 1, 0.5 * u**2, u.abs() - 0.5)
        per_sample = ((taus[None, :, None] - (u < 0).float()).abs() * huber).mean(2).sum(1)
        expected_loss = (batch.weights * per_sample).mean()
    output = learner.train(batch)
    assert torch.allclose(output.metrics["loss"], expected_loss)
    assert torch.allclose(output.td_errors, (theta.mean(1) - targets.mean(1)).abs())
    for before, after, online_p in zip(target_before, target.parameters(), online.parameters()):
        assert torch.allclose(after, 0.75 * before + 0.25 * online_p.detach(), atol=1e-6)


def learned_action_values(learner, seed: int) -> list[float]:
    """Train on terminal transitions whose reward is -1, 0 or +1 for actions 0, 1, 2 (600 batches of 64);
    the mean action values the policy then sees."""
    rng = np.random.default_rng(seed)
    buffer = TransitionBuffer(2000, seed=seed)
    actions = rng.integers(3, size=2000)
    observations = rng.normal(size=(2000, 4)).astype(np.float32)
    buffer.push(StepBatch.of_transitions(observations, observations, actions, (actions - 1).astype(np.float32),
                                         np.ones(2000, bool)))
    for batch in buffer.sample_batches(64, 600):
        learner.train(batch)
    return learner.policy().q_values(torch.randn(50, 4)).mean(0).tolist()


def test_qrdqn_acts_on_the_mean_of_the_quantiles_and_learns_a_fixed_target():
    learner = QRDQNLearner(OBS, ACTIONS, QRDQNConfig(hidden=32, quantiles=5, lr=3e-3), seed=0)
    policy = learner.policy()
    observations = torch.randn(20, 4)
    expected = learner.q_network(observations).view(20, 3, 5).mean(2).argmax(1)
    assert torch.equal(policy.act(observations, deterministic=True).actions, expected)
    # Terminal transitions with rewards -1 / +1 for actions 0 / 2: the quantiles' means find them.
    assert learned_action_values(learner, seed=1) == pytest.approx([-1.0, 0.0, 1.0], abs=0.15)


def test_qrdqn_checkpoint_round_trip(tmp_path):
    config = QRDQNConfig(hidden=16, quantiles=4)
    learner = QRDQNLearner(OBS, ACTIONS, config, seed=0)
    learner.train(batch_of())
    save_state(tmp_path, "learner", learner.state_dict())
    restored = QRDQNLearner(OBS, ACTIONS, config, seed=9)
    restored.load_state_dict(load_state(tmp_path, "learner"))
    observations = torch.randn(10, 4)
    assert torch.equal(restored.policy().q_values(observations), learner.policy().q_values(observations))


def test_bad_quantiles_are_named():
    with pytest.raises(ConfigError, match="quantiles"):
        QRDQNConfig(quantiles=0).validate()


@pytest.mark.parametrize("atoms", [1, 4])
def test_dueling_network_combines_value_and_advantage(atoms):
    torch.manual_seed(0)
    network = DuelingQNetwork(FlattenEncoder(OBS), 3, [16, 16], atoms)
    observations = torch.randn(7, 4)
    q = network(observations).view(7, 3, atoms)
    features = network.trunk(observations)
    value = network.value(features).view(7, 1, atoms)
    advantage = network.advantage(features).view(7, 3, atoms)
    assert torch.allclose(q, value + advantage - advantage.mean(1, keepdim=True), atol=1e-6)
    assert torch.allclose(q.mean(1, keepdim=True), value, atol=1e-6)  # the mean advantage is zero


@pytest.mark.parametrize("autograd", [False, True], ids=["numpy-update", "autograd"])
def test_dueling_dqn_learns_a_fixed_target(autograd):
    """Dueling heads learn the action values of terminal rewards -1 / 0 / +1, on the CPU's NumPy update
    (which `make_learner` picks for them) and through autograd."""
    config = {"hidden": 32, "dueling": True, "lr": 3e-3}
    learner = DQNLearner(OBS, ACTIONS, DQNConfig(**config), seed=0) if autograd else make_learner(
        "dqn", OBS, ACTIONS, config, "cpu", 0)
    assert (type(learner) is DQNLearner) == autograd
    assert learned_action_values(learner, seed=2) == pytest.approx([-1.0, 0.0, 1.0], abs=0.15)
    assert DQNConfig().dueling is False
