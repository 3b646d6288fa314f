import gymnasium as gym
import numpy as np
import pytest
import torch

from helpers import disturb

from offpolicy.agents import make_learner
from offpolicy.agents.dqn import DQNConfig, DQNLearner
from offpolicy.agents.fast_cpu import FastDQNLearner, supports
from offpolicy.agents.qrdqn import QRDQNConfig, QRDQNLearner
from offpolicy.buffer import TransitionBuffer
from offpolicy.checkpoint import load_state, save_state
from offpolicy.config import ConfigError
from offpolicy.envs import EnvError
from offpolicy.steps import StepBatch

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


def filled_buffer(seed=0, size=300, gamma=0.99):
    rng = np.random.default_rng(seed)
    buffer = TransitionBuffer(1000, seed=seed, gamma=gamma)
    buffer.push(StepBatch.of_transitions(
        rng.normal(size=(size, 4)).astype(np.float32),
        rng.normal(size=(size, 4)).astype(np.float32),
        rng.integers(3, size=size),
        rng.normal(size=size).astype(np.float32),
        rng.random(size) < 0.1,
    ))
    return buffer


LEARNERS = [DQNLearner, FastDQNLearner]


def test_unsupported_spaces_are_named():
    with pytest.raises(EnvError, match=r"DQN needs a Discrete action space, got Box"):
        DQNLearner(OBS, gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(EnvError, match=r"Box, Discrete, MultiBinary, Dict or Tuple observation space, got Text"):
        DQNLearner(gym.spaces.Text(5), ACTIONS)


def test_bad_hyperparameter_is_named():
    with pytest.raises(ConfigError, match="gamma"):
        DQNLearner(OBS, ACTIONS, DQNConfig(gamma=1.5))
    with pytest.raises(ConfigError, match="double_q must be true or false, got 'no'"):
        DQNLearner(OBS, ACTIONS, DQNConfig(double_q="no"))  # a string would have counted as true


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("learner_class", LEARNERS)
def test_update_follows_double_dqn_huber_and_soft_target(learner_class, double_q):
    """The double-DQN target (or with double_q off the target network's maximum), the weighted Huber loss,
    TD errors and the soft target update, on both paths."""
    config = DQNConfig(hidden=16, tau=0.25, lr=1e-2, gamma=0.9, double_q=double_q)
    learner = learner_class(OBS, ACTIONS, config, seed=1)
    disturb(learner.target_network)  # a target unlike the online network: the two targets then differ
    batch = filled_buffer(gamma=0.9).sample(64)
    assert torch.equal(batch.discounts, torch.full((64,), 0.9))  # one-step returns: discounted by gamma
    batch.weights = torch.linspace(0.2, 1.0, 64)  # importance weights scale each transition's loss
    target_before = [p.clone() for p in learner.target_network.parameters()]
    online, target_net = learner.q_network, learner.target_network
    with torch.no_grad():
        next_a = (online if double_q else target_net)(batch.next_observations).argmax(1, keepdim=True)
        expected_target = batch.rewards + 0.9 * (1 - batch.terminated) * target_net(batch.next_observations).gather(1, next_a).squeeze(1)
        q = online(batch.observations).gather(1, batch.actions.view(-1, 1)).squeeze(1)
        huber = torch.nn.functional.smooth_l1_loss(q, expected_target, reduction="none")
        expected_loss = (batch.weights * huber).mean()
    output = learner.train(batch)
    assert torch.allclose(output.metrics["loss"], expected_loss)
    assert torch.allclose(output.td_errors, (q - expected_target).abs(), atol=1e-6)
    for before, after, current in zip(target_before, target_net.parameters(), online.parameters()):
        assert torch.allclose(after, before + 0.25 * (current - before), atol=1e-6)


def test_exploration_decays_and_deterministic_is_greedy():
    learner = DQNLearner(OBS, ACTIONS, DQNConfig(exploration_decay=1000), seed=0)
    policy = learner.policy()
    obs = torch.zeros(10, 4)
    assert policy.act(obs, False).context["exploration_rate"] == pytest.approx(0.99)
    policy.set_env_steps(1000)
    assert policy.act(obs, False).context["exploration_rate"] == pytest.approx(0.05 + 0.94 / np.e)
    output = policy.act(obs, True)
    assert output.context == {} and torch.equal(output.actions, policy.q_values(obs).argmax(1))


@pytest.mark.parametrize("learner_class", LEARNERS + [QRDQNLearner])
def test_target_update_interval_copies_every_interval_updates(learner_class):
    config_class = QRDQNConfig if learner_class is QRDQNLearner else DQNConfig
    learner = learner_class(OBS, ACTIONS, config_class(hidden=16, lr=1e-2, target_update_interval=3), seed=1)
    buffer = filled_buffer()
    initial = [p.clone() for p in learner.target_network.parameters()]
    for update in range(1, 7):
        learner.train(buffer.sample(32))
        target, online = list(learner.target_network.parameters()), list(learner.q_network.parameters())
        if update % 3 == 0:
            assert all(torch.equal(t, o) for t, o in zip(target, online)), f"no copy after update {update}"
            initial = [p.clone() for p in target]
        else:
            assert all(torch.equal(t, i) for t, i in zip(target, initial)), f"the target moved at update {update}"


def test_linear_exploration_falls_from_start_to_end_over_the_decay():
    policy = DQNLearner(OBS, ACTIONS, DQNConfig(exploration_start=1.0, exploration_end=0.01, exploration_decay=1000,
                                                exploration_schedule="linear"), seed=0).policy()
    obs = torch.zeros(1, 4)
    for steps, rate in [(0, 1.0), (500, 0.505), (1000, 0.01), (5000, 0.01)]:
        policy.set_env_steps(steps)
        assert policy.act(obs, False).context["exploration_rate"] == pytest.approx(rate)
    with pytest.raises(ConfigError, match="exploration_schedule must be one of exponential, linear"):
        DQNConfig(exploration_schedule="cosine").validate()
    with pytest.raises(ConfigError, match="target_update_interval must be 0"):
        DQNConfig(target_update_interval=-1).validate()


@pytest.mark.parametrize("learner_class", LEARNERS)
def test_saved_and_restored_learner_trains_identically(tmp_path, learner_class):
    a = learner_class(OBS, ACTIONS, DQNConfig(hidden=32), seed=2)
    buffer = filled_buffer(1)
    for _ in range(5):
        a.train(buffer.sample(32))
    save_state(tmp_path, "learner", a.state_dict())
    b = learner_class(OBS, ACTIONS, DQNConfig(hidden=32), seed=99)
    b.load_state_dict(load_state(tmp_path, "learner"))
    for _ in range(5):
        batch = buffer.sample(32)
        a.train(batch)
        b.train(batch)
    for pa, pb in zip(list(a.q_network.parameters()) + list(a.target_network.parameters()),
                      list(b.q_network.parameters()) + list(b.target_network.parameters())):
        assert torch.equal(pa, pb)


def assert_same_training(fast, plain, buffer, batch_size, loss_rtol=1e-5):
    """30 updates of both learners on the same batches (every other one with importance weights, every third
    with n-step discounts gamma^m, m from 1 to 3): the same losses, Q-values and TD errors throughout, and the
    same parameters at the end."""
    for learner in (fast, plain):
        disturb(learner.target_network)
    rng = np.random.default_rng(0)
    weights = torch.from_numpy(rng.uniform(0.1, 1.0, batch_size).astype(np.float32))
    discounts = torch.from_numpy((0.97 ** rng.integers(1, 4, batch_size)).astype(np.float32))
    for index in range(30):
        batch = buffer.sample(batch_size)
        if index % 2:
            batch.weights = weights
        if index % 3 == 0:
            batch.discounts = discounts
        out_fast, out_plain = fast.train(batch), plain.train(batch)
        for name in ("loss", "q_values"):
            assert torch.allclose(out_fast.metrics[name], out_plain.metrics[name], rtol=loss_rtol, atol=1e-6)
        assert torch.allclose(out_fast.td_errors, out_plain.td_errors, rtol=1e-4, atol=1e-5)
    for a, b in zip(list(fast.q_network.parameters()) + list(fast.target_network.parameters()),
                    list(plain.q_network.parameters()) + list(plain.target_network.parameters())):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layers, hidden, double_q", [(2, 8, True), (3, 64, True), (4, 32, True), (3, 64, False)])
def test_fast_path_matches_autograd(layers, hidden, double_q):
    config = DQNConfig(hidden=hidden, layers=layers, lr=1e-3, max_grad_norm=0.5, double_q=double_q)
    fast = FastDQNLearner(OBS, ACTIONS, config, seed=5)
    plain = DQNLearner(OBS, ACTIONS, config, seed=5)
    assert_same_training(fast, plain, filled_buffer(7), 64)


MINATAR_LIKE = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)
"""MinAtar's observations: a bool grid, channels last."""
SMALL_PIXELS = gym.spaces.Box(0, 255, (3, 12, 12), np.uint8)
"""Small uint8 images, channels first: scaled by 1/255 inside the network."""


def image_buffer(space, seed=0, size=300):
    rng = np.random.default_rng(seed)

    def images():
        if space.dtype == np.bool_:
            return rng.random((size, *space.shape)) < 0.15
        return rng.integers(0, 256, (size, *space.shape), dtype=np.uint8)

    buffer = TransitionBuffer(1000, seed=seed)
    buffer.push(StepBatch.of_transitions(images(), images(), rng.integers(3, size=size),
                                         rng.normal(size=size).astype(np.float32), rng.random(size) < 0.1))
    return buffer


@pytest.mark.parametrize("space", [MINATAR_LIKE, SMALL_PIXELS], ids=["bool-channels-last", "uint8-channels-first"])
@pytest.mark.parametrize("optimizer, double_q, max_grad_norm", [("rmsprop", True, 10.0), ("adam", False, 0.05)])
def test_fast_path_matches_autograd_on_small_images(space, optimizer, double_q, max_grad_norm):
    """The small image encoder (one 3x3 convolution) by NumPy: the same greedy actions, losses, TD errors
    and parameters as autograd's, with RMSProp or Adam, the gradient norm clipped or not."""
    config = DQNConfig(net_arch=(32,), lr=1e-3, optimizer=optimizer, double_q=double_q, max_grad_norm=max_grad_norm,
                       target_update_interval=7)
    assert FastDQNLearner.covers(space, config)
    fast = FastDQNLearner(space, ACTIONS, config, seed=5)
    torch.rand(3)  # whatever happened to torch's global generator in between, the seed decides the networks
    plain = DQNLearner(space, ACTIONS, config, seed=5)
    for a, b in zip(fast.q_network.parameters(), plain.q_network.parameters()):
        assert torch.equal(a, b)
    buffer = image_buffer(space, 7)
    assert_same_training(fast, plain, buffer, 32, loss_rtol=1e-4)
    observations = buffer.sample(64).observations
    with torch.no_grad():
        expected = plain.policy().q_values(observations).argmax(1).numpy()
    assert np.array_equal(fast.policy().act_arrays(observations.numpy(), deterministic=True)[0], expected)


@pytest.mark.parametrize("space, network", [(OBS, dict(hidden=32, layers=3)), (OBS, dict(hidden=16, layers=2)),
                                            (MINATAR_LIKE, dict(net_arch=(32,), optimizer="rmsprop"))],
                         ids=["flat-3-layers", "flat-2-layers", "minatar-like"])
def test_fast_path_matches_autograd_with_dueling_heads(space, network):
    """A dueling network's heads computed as one linear layer, their gradients split back: the same losses,
    TD errors, parameters and greedy actions as autograd's forward of V + A - mean(A)."""
    config = DQNConfig(lr=1e-3, dueling=True, max_grad_norm=0.5, **network)
    fast = FastDQNLearner(space, ACTIONS, config, seed=5)
    plain = DQNLearner(space, ACTIONS, config, seed=5)
    buffer = filled_buffer(7) if space is OBS else image_buffer(space, 7)
    assert_same_training(fast, plain, buffer, 32, loss_rtol=1e-4)
    observations = buffer.sample(64).observations
    with torch.no_grad():
        expected = plain.policy().q_values(observations).argmax(1).numpy()
    assert np.array_equal(fast.policy().act_arrays(observations.numpy(), deterministic=True)[0], expected)


def test_acting_through_numpy_follows_training_and_parameter_handover():
    """The NumPy forward used for acting sees in-place training updates and parameters swapped in by
    `update()` (new storage), and picks the same greedy actions as torch's forward."""
    learner = FastDQNLearner(OBS, ACTIONS, DQNConfig(hidden=32), seed=3)
    acting = FastDQNLearner(OBS, ACTIONS, DQNConfig(hidden=32), seed=4).policy()
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)

    def greedy(policy):
        through_numpy = policy.act_arrays(obs, deterministic=True)[0]
        with torch.no_grad():
            through_torch = policy.q_values(torch.as_tensor(obs)).argmax(1).numpy()
        assert np.array_equal(through_numpy, through_torch)
        return through_numpy

    live = learner.policy()
    before = greedy(live)
    greedy(acting)
    buffer = filled_buffer(1)
    for _ in range(200):
        learner.train(buffer.sample(64))
    after = greedy(live)
    acting.update(learner.policy().state())
    assert np.array_equal(greedy(acting), after)
    assert not np.array_equal(before, after)  # training did change the actions


def test_acting_on_arrays_draws_what_act_draws():
    """Runners act through `act_arrays` (NumPy in and out): it must choose the actions `act` chooses, draw
    for draw, with the same context and step count, through NumPy or (a network NumPy does not cover) torch."""
    rng = np.random.default_rng(5)
    for learner_class in LEARNERS:
        config = DQNConfig(hidden=32, exploration_decay=200)
        through_torch, through_arrays = (learner_class(OBS, ACTIONS, config, seed=6).policy() for _ in range(2))
        for count in (1, 4, 8, 3) * 10:
            obs = rng.normal(size=(count, 4)).astype(np.float32)
            for deterministic in (False, True):
                expected = through_torch.act(torch.as_tensor(obs), deterministic)
                actions, context = through_arrays.act_arrays(obs, deterministic)
                assert isinstance(actions, np.ndarray) and actions.dtype == np.int64
                assert np.array_equal(actions, expected.actions.numpy()) and context == expected.context
        assert through_arrays.env_steps == through_torch.env_steps == 160
        assert through_arrays.predict(obs[0]) == int(expected.actions[0])


def test_fast_path_covers_relu_networks_dueling_or_not_and_is_chosen_where_it_applies():
    from collections import OrderedDict

    from torch import nn

    from offpolicy.agents.networks import DuelingQNetwork, EncodedMLP, FlattenEncoder

    encoder = FlattenEncoder(OBS)
    assert supports(EncodedMLP(encoder, 3, [8, 8])) and supports(DuelingQNetwork(encoder, 3, [8, 8]))
    assert not supports(DuelingQNetwork(encoder, 3, [8, 8], atoms=5))  # QR-DQN's quantiles: autograd
    tanh = EncodedMLP(encoder, 3, [8])
    tanh[1] = nn.Tanh()
    assert not supports(tanh) and not supports(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    assert not supports(nn.Sequential(OrderedDict(encoder=nn.Conv2d(1, 1, 1), head=nn.Linear(4, 2))))
    assert isinstance(make_learner("dqn", OBS, ACTIONS, {}, "cpu", 0), FastDQNLearner)
    minatar = {"net_arch": (16,), "optimizer": "rmsprop"}
    assert isinstance(make_learner("dqn", MINATAR_LIKE, ACTIONS, minatar, "cpu", 0), FastDQNLearner)
    atari = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # the Nature CNN: autograd
    assert not isinstance(make_learner("dqn", atari, ACTIONS, {"net_arch": (16,)}, "cpu", 0), FastDQNLearner)
    assert isinstance(make_learner("dqn", MINATAR_LIKE, ACTIONS, dict(minatar, dueling=True), "cpu", 0),
                      FastDQNLearner)
    assert not isinstance(make_learner("dqn", OBS, ACTIONS, {"activation": "tanh"}, "cpu", 0), FastDQNLearner)


@pytest.mark.parametrize("learner_class", LEARNERS)
def test_rmsprop_takes_the_dqn_papers_centred_step_and_survives_a_checkpoint(tmp_path, learner_class):
    """With optimizer rmsprop an update is one step of centred RMSProp (decay 0.95, epsilon 0.01) on the
    gradient, on both paths, and resume keeps its state."""
    config = DQNConfig(hidden=16, lr=1e-2, optimizer="rmsprop")
    learner, buffer = learner_class(OBS, ACTIONS, config, seed=1), filled_buffer()
    batch = buffer.sample(64)
    before = [p.detach().clone() for p in learner.q_network.parameters()]
    learner.train(batch)
    grads = [p.grad for p in learner.q_network.parameters()]
    assert sum(float(g.pow(2).sum()) for g in grads) ** 0.5 < config.max_grad_norm  # not clipped
    for start, grad, after in zip(before, grads, learner.q_network.parameters()):
        mean, square = 0.05 * grad, 0.05 * grad ** 2  # the running averages after one step from zero
        assert torch.allclose(after, start - 1e-2 * grad / ((square - mean ** 2).sqrt() + 0.01), atol=1e-6)
    for _ in range(3):
        learner.train(buffer.sample(32))
    save_state(tmp_path, "learner", learner.state_dict())
    resumed = learner_class(OBS, ACTIONS, config, seed=9)
    resumed.load_state_dict(load_state(tmp_path, "learner"))
    batch = buffer.sample(32)
    learner.train(batch), resumed.train(batch)
    for a, b in zip(learner.q_network.parameters(), resumed.q_network.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ConfigError, match="optimizer must be one of adam, rmsprop, got 'sgd'"):
        DQNConfig(optimizer="sgd").validate()


def test_exploration_state_survives_a_checkpoint(tmp_path):
    a = DQNLearner(OBS, ACTIONS, seed=3).policy()
    observations = torch.zeros(64, 4)
    a.act(observations, False)
    save_state(tmp_path, "exploration", a.exploration_state())
    b = DQNLearner(OBS, ACTIONS, seed=3).policy()
    b.load_exploration_state(load_state(tmp_path, "exploration"))
    first = a.act(observations, False).actions
    assert torch.equal(first, b.act(observations, False).actions)
    assert not torch.equal(first, a.act(observations, False).actions)  # the draws go on, not repeat


def test_seeding_exploration_gives_each_copy_its_own_draws():
    policy = DQNLearner(OBS, ACTIONS, seed=3).policy()
    observations = torch.zeros(64, 4)
    drawn = {}
    for seed in (1, 2, 1):
        policy.seed_exploration(seed)
        policy.set_env_steps(0)  # the same exploration rate for each draw
        drawn.setdefault(seed, []).append(policy.act(observations, False).actions)
    assert torch.equal(*drawn[1])
    assert not torch.equal(drawn[1][0], drawn[2][0])
