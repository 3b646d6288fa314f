"""Networks of the widths one asks for: `--net-arch` for DQN and QR-DQN, `--actor-net-arch` and
`--critic-net-arch` for SAC and TD3, kept in the run's config and used again by resume and `load_policy`."""

import gymnasium as gym
import numpy as np
import pytest

from offpolicy import RunConfig, load_policy, train
from offpolicy.agents import make_learner
from offpolicy.config import ConfigError

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
SMALL = {"num_envs": 2, "autobatch_size": 2, "eval_interval": 300, "eval_episodes": 1, "train_interval": 4,
         "train_steps": 1, "replay_buffer_size": 1_000, "warmup_steps": 100, "train_batch_size": 16}


def linear_shapes(state, prefix=""):
    return [tuple(tensor.shape) for name, tensor in state.items() if name.startswith(prefix) and name.endswith("weight")
            and tensor.dim() == 2]


@pytest.mark.parametrize("agent, dueling", [("dqn", False), ("qrdqn", False), ("dqn", True)])
def test_q_networks_take_the_widths_given(agent, dueling):
    learner = make_learner(agent, BOX, gym.spaces.Discrete(2), {"net_arch": [32, 16], "dueling": dueling}, "cpu", 0)
    shapes = linear_shapes(learner.policy().state())
    atoms = 50 if agent == "qrdqn" else 1  # QR-DQN's default quantiles per action
    if dueling:
        assert shapes == [(32, 3), (16, 32), (atoms, 16), (2 * atoms, 16)]
    else:
        assert shapes == [(32, 3), (16, 32), (2 * atoms, 16)]


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_actor_and_critic_take_their_own_widths(agent):
    learner = make_learner(agent, BOX, gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                           {"actor_net_arch": [24], "critic_net_arch": [40, 20, 10]}, "cpu", 0)
    outputs = 4 if agent == "sac" else 2  # SAC's actor gives a mean and a log-std per action dimension
    assert linear_shapes(learner.policy().state()) == [(24, 3), (outputs, 24)]
    critic = learner.state_dict()["critic"]
    assert [tuple(weight.shape) for name, weight in critic.items() if name.startswith("weights")] == [
        (2, 5, 40), (2, 40, 20), (2, 20, 10), (2, 10, 1)]


def test_widths_of_zero_are_refused():
    with pytest.raises(ConfigError, match=r"net_arch must list whole numbers of at least 1, got \[64, 0\]"):
        make_learner("dqn", BOX, gym.spaces.Discrete(2), {"net_arch": [64, 0]}, "cpu", 0)


def test_a_run_with_its_own_widths_resumes_and_loads(tmp_path):
    config = RunConfig(agent="sac", env="Pendulum-v1", num_steps=300, strategy=SMALL,
                       hyperparameters={"actor_net_arch": [16, 16], "critic_net_arch": [32]})
    train(config, run_dir=tmp_path / "run", quiet=True)
    result = train(RunConfig(**dict(config.to_dict(), num_steps=600)), run_dir=tmp_path / "run", resume=True,
                   quiet=True)
    assert result.stats.step == 600
    policy = load_policy(tmp_path / "run", checkpoint="last").policy
    assert linear_shapes(policy.state()) == [(16, 3), (16, 16), (2, 16)]
    assert policy.predict(np.zeros(3, np.float32)).shape == (1,)
