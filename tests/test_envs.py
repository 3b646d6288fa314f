"""Envs users bring: Discrete observations, constructor arguments, and envs registered by their own
packages (`module:EnvId` ids and `env_packages`), on every backend."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from offpolicy import ConfigError, RunConfig, train
from offpolicy.envs import EnvError

SMALL = {"num_envs": 4, "autobatch_size": 4, "eval_interval": 1_000, "eval_episodes": 2, "train_interval": 4,
         "train_steps": 2, "replay_buffer_size": 10_000, "warmup_steps": 500}


def test_dqn_learns_a_grid_world_with_discrete_observations():
    """FrozenLake's observation is one integer, one-hot encoded inside the network; with is_slippery false
    (an env argument) the greedy policy reaches the goal (return 1) within 6,000 steps."""
    config = RunConfig(agent="dqn", env="FrozenLake-v1", env_kwargs={"is_slippery": False}, num_steps=6_000,
                       strategy=SMALL, hyperparameters={"exploration_decay": 1_500.0, "lr": 1e-3})
    result = train(config, save=False, quiet=True)
    assert result.stats.best_eval_return == 1.0


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_discrete_observations_on_every_backend(backend):
    config = RunConfig(agent="dqn", env="FrozenLake-v1", num_steps=1_200,
                       strategy=dict(SMALL, backend=backend, eval_interval=600))
    result = train(config, save=False, quiet=True)
    assert result.stats.step == 1_200 and result.stats.train_steps > 0


@pytest.mark.parametrize("backend", ["inprocess", "processes"])
def test_an_env_of_ones_own_by_module_and_id(backend):
    """`module:EnvId` imports the module in the trainer and in every worker process, whose registration runs
    there; constructor arguments reach every copy."""
    config = RunConfig(agent="dqn", env="registered_envs:Corridor-v0", env_kwargs={"length": 4}, num_steps=3_000,
                       strategy=dict(SMALL, backend=backend), hyperparameters={"exploration_decay": 800.0})
    result = train(config, save=False, quiet=True)
    assert result.stats.best_eval_return == 1.0


def test_an_env_package_is_imported_before_envs_are_made(tmp_path):
    config = RunConfig(agent="dqn", env="Corridor-v0", env_packages=["registered_envs"], num_steps=1_000,
                       strategy=dict(SMALL, eval_interval=500))
    result = train(config, run_dir=tmp_path / "run", quiet=True)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["env_packages"] == ["registered_envs"] and result.stats.step == 1_000


@pytest.mark.parametrize(
    "values, words",
    [
        ({"env": "no_such_module:Maze-v0"}, "cannot import 'no_such_module'"),
        ({"env": "Corridor-v0", "env_packages": ["no_such_package"]}, "cannot import 'no_such_package'"),
        ({"env": "FrozenLake-v1", "env_kwargs": {"no_such_argument": 1}}, "no_such_argument"),
        ({"env": "Maze-v0"}, "--env-package PACKAGE or MODULE:ENV_ID"),
    ],
)
def test_env_mistakes_are_named(values, words):
    with pytest.raises(EnvError, match=words):
        train(RunConfig(agent="dqn", num_steps=100, **values), save=False, quiet=True)


def test_a_callable_in_the_config_points_at_train_env():
    with pytest.raises(ConfigError, match=r"train\(config, env=\.\.\.\)"):
        RunConfig(env=lambda: gym.make("CartPole-v1"))


@pytest.mark.parametrize("kwargs", [{1: 2}, {"a": object()}])
def test_env_kwargs_must_be_json(kwargs):
    with pytest.raises(ConfigError, match="env_kwargs"):
        RunConfig(env_kwargs=kwargs)


def test_a_discrete_observation_is_one_hot_inside_the_network():
    from offpolicy.agents.networks import make_encoder

    encoder = make_encoder(gym.spaces.Discrete(4, start=1), "DQN")
    rows = encoder(torch.tensor([1, 4, 2]))
    assert np.array_equal(rows.numpy(), np.eye(4, dtype=np.float32)[[0, 3, 1]])


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
    gym.spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), (2,), np.float64),
    gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
    gym.spaces.Discrete(5, start=2),
    gym.spaces.MultiBinary(6),
    gym.spaces.MultiDiscrete([3, 4]),
], ids=str)
def test_spaces_survive_json(space):
    from offpolicy.spaces import space_from_json, space_to_json

    assert space_from_json(json.loads(json.dumps(space_to_json(space)))) == space


class Unregistered(gym.Wrapper):
    """An env no registry knows: the run can only be given it as a callable."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))


def test_a_policy_trained_on_a_callable_loads_without_its_env(tmp_path):
    """The run directory and a saved policy carry the env's spaces, so neither needs the env to load."""
    from offpolicy import load_policy

    result = train("dqn", env=Unregistered, num_steps=1_000, run_dir=tmp_path / "run", quiet=True, eval_interval=500)
    result.save(tmp_path / "saved")
    observations = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    expected = [result.policy.predict(observation) for observation in observations]
    for where in (tmp_path / "run", tmp_path / "saved"):
        loaded = load_policy(where, "last").policy
        assert [loaded.predict(observation) for observation in observations] == expected


class BrightSide(gym.Env):
    """A one-step task from pixels: a 10x10 grey image with one bright pixel; action 0 pays 1 when it is
    in the left half, action 1 when in the right (a continuous action: its sign)."""

    def __init__(self, continuous: bool = False):
        self.observation_space = gym.spaces.Box(0, 255, (10, 10, 1), np.uint8)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        self.continuous = continuous

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.row, self.column = self.np_random.integers(10, size=2)
        image = np.full((10, 10, 1), 40, np.uint8)
        image[self.row, self.column] = 255
        return image, {}

    def step(self, action):
        right = self.column >= 5
        chose_right = float(action[0]) > 0 if self.continuous else action == 1
        image = np.full((10, 10, 1), 40, np.uint8)
        return image, float(chose_right == right), True, False, {}


def test_an_image_observation_gets_a_convolutional_network():
    from offpolicy.agents.networks import ImageEncoder, make_encoder

    for space in (gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
                  gym.spaces.Box(0, 1, (10, 10, 6), bool)):
        encoder = make_encoder(space, "DQN")
        assert isinstance(encoder, ImageEncoder)
        assert encoder(torch.as_tensor(np.stack([space.sample(), space.sample()]))).shape == (2, encoder.features)
    assert not isinstance(make_encoder(gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32), "DQN"), ImageEncoder)


@pytest.mark.parametrize("shape, dtype", [((84, 84, 4), np.uint8), ((4, 84, 84), np.uint8), ((10, 10, 4), bool)])
def test_the_image_encoder_computes_what_plain_convolutions_do(shape, dtype):
    """The encoder's memory layouts are a speed choice: its features and gradients are those of the same
    convolutions on contiguous channel-first images, flattened in channel, row, column order."""
    from torch.nn import functional as F

    from offpolicy.agents.networks import ImageEncoder

    space = gym.spaces.Box(0, 1 if dtype is bool else 255, shape, dtype)
    encoder = ImageEncoder(space)
    observations = torch.as_tensor(np.stack([space.sample() for _ in range(3)]))
    images = observations.float() * (1.0 if dtype is bool else 1 / 255)
    if shape[-1] < shape[0]:
        images = images.permute(0, 3, 1, 2)
    images = images.contiguous()
    convolutions = [module for module in encoder.modules() if isinstance(module, torch.nn.Conv2d)]
    reference = images
    for index, convolution in enumerate(convolutions):
        weight = convolution.weight.detach().contiguous().requires_grad_()
        reference = F.relu(F.conv2d(reference, weight, convolution.bias, convolution.stride))
        if index == 0:
            first_weight = weight
    reference = reference.flatten(1)
    features = encoder(observations)
    torch.testing.assert_close(features, reference)
    signal = torch.randn_like(reference)
    features.backward(signal)
    reference.backward(signal)
    torch.testing.assert_close(convolutions[0].weight.grad, first_weight.grad)


def test_the_network_option_overrides_the_choice():
    from offpolicy.agents.networks import FlattenEncoder, ImageEncoder, make_encoder

    image = gym.spaces.Box(0, 255, (10, 10, 1), np.uint8)
    assert isinstance(make_encoder(image, "DQN", "mlp"), FlattenEncoder)
    assert isinstance(make_encoder(image, "DQN", "cnn"), ImageEncoder)
    result = train("dqn", env=BrightSide, num_steps=300, save=False, quiet=True, network="mlp", warmup_steps=100,
                   eval_interval=300, eval_episodes=1)
    assert isinstance(result.learner.q_network.encoder, FlattenEncoder)


@pytest.mark.parametrize("agent", ["dqn", "sac"])
def test_the_activation_is_a_choice(agent):
    """--activation reaches every network of the agent; DQN's NumPy fast path, written for ReLU, steps aside."""
    from offpolicy.agents import make_learner

    actions = gym.spaces.Discrete(2) if agent == "dqn" else gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    learner = make_learner(agent, gym.spaces.Box(-1.0, 1.0, (4,), np.float32), actions, {"activation": "tanh"}, "cpu", 0)
    networks = [learner.q_network] if agent == "dqn" else [learner.actor]
    for network in networks:
        kinds = {type(module) for module in network.modules()}
        assert torch.nn.Tanh in kinds and torch.nn.ReLU not in kinds
    if agent == "dqn":
        assert type(learner).__name__ == "DQNLearner"
    else:
        assert learner.critic.activation is torch.tanh


def test_dqn_learns_from_pixels():
    """Which half of the image holds the bright pixel decides the paying action: a convolutional DQN finds it
    (evaluation return 1 of 1) within 1,500 one-step episodes (seeds 0-5 all at the first evaluation, 500)."""
    result = train("dqn", env=BrightSide, num_steps=1_500, save=False, quiet=True, num_envs=4, autobatch_size=4,
                   train_interval=4, train_steps=4, warmup_steps=200, eval_interval=500, eval_episodes=20,
                   exploration_decay=400.0, lr=1e-3, hidden=64)
    assert result.stats.best_eval_return >= 0.9


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_continuous_agents_take_images(agent):
    result = train(agent, env=lambda: BrightSide(continuous=True), num_steps=400, save=False, quiet=True,
                   warmup_steps=100, eval_interval=200, eval_episodes=2, hidden=32, train_batch_size=32)
    assert result.stats.train_steps > 0


def test_minatar_games_work_by_id():
    """MinAtar's package registers its games only when asked; its id alone is enough (the registration runs
    wherever envs are made, as `module:EnvId` imports do). Its 10x10 boolean frames get the small
    convolutional network."""
    pytest.importorskip("minatar")
    result = train("dqn", "MinAtar/Breakout-v1", num_steps=600, save=False, quiet=True,
                   num_envs=2, autobatch_size=2, warmup_steps=100, eval_interval=300, eval_episodes=1)
    assert result.stats.step == 600 and result.stats.train_steps > 0
    assert type(result.learner.q_network.encoder).__name__ == "ImageEncoder"
