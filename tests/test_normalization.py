"""Observation and reward normalisation: the statistics are NumPy's over the collected training steps in every
backend, the acting policy and the learner apply them, and checkpoints, resume and load_policy keep them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import offpolicy
from offpolicy import ConfigError, load_policy
from offpolicy.agents import make_learner
from offpolicy.buffer import TransitionBatch
from offpolicy.events import StepsCollected
from offpolicy.normalization import CLIP, EPSILON, RunningMoments
from offpolicy.steps import StepBatch

GAMMA = 0.99


class Recorder:
    """Every collected training step the run reports."""

    def __init__(self) -> None:
        self.batches: list[StepBatch] = []

    def __call__(self, event, stats) -> None:
        if isinstance(event, StepsCollected):
            self.batches.append(event.steps)

    def observations(self) -> np.ndarray:
        return np.concatenate([batch.observations for batch in self.batches]).astype(np.float64)

    def discounted_returns(self) -> np.ndarray:
        """Each step's env's discounted return so far, step by step as a person would compute it."""
        running: dict[int, float] = {}
        values = []
        for batch in self.batches:
            for env, reward, done in zip(batch.env_ids, batch.rewards, batch.done):
                running[int(env)] = running.get(int(env), 0.0) * GAMMA + float(reward)
                values.append(running[int(env)])
                if done:
                    running[int(env)] = 0.0
        return np.array(values)


def test_running_moments_equal_numpys_over_uneven_chunks():
    rng = np.random.default_rng(0)
    rows = rng.normal(3.0, 2.0, (257, 3, 2)) * rng.uniform(0.1, 10.0, (3, 2))
    moments = RunningMoments((3, 2))
    start = 0
    for size in (1, 7, 0, 100, 1, 148):
        moments.update(rows[start : start + size])
        start += size
    assert moments.count == 257
    np.testing.assert_allclose(moments.mean, rows.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(moments.var, rows.var(axis=0), rtol=1e-12)


def short_run(tmp_path, recorder, backend="inprocess", num_steps=600, **settings):
    return offpolicy.train("dqn", "CartPole-v1", run_dir=tmp_path / "run", num_steps=num_steps, warmup_steps=100,
                           eval_interval=300, num_envs=2, autobatch_size=2, backend=backend,
                           normalize_observations=True, normalize_rewards=True, gamma=GAMMA, quiet=True,
                           callbacks=[recorder], **settings)


@pytest.mark.parametrize("backend", ["inprocess", "threads", "processes", "ray"])
def test_statistics_are_numpys_over_the_training_steps_in_every_backend(tmp_path, backend):
    recorder = Recorder()
    result = short_run(tmp_path, recorder, backend)
    observations = recorder.observations()
    assert len(observations) == 600  # training steps only: evaluation episodes are not counted
    mean, var = result.policy.statistics
    np.testing.assert_allclose(mean, observations.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var, observations.var(axis=0), rtol=1e-9)
    returns = recorder.discounted_returns()
    assert result.learner.return_moments.count == len(returns)
    np.testing.assert_allclose(result.learner.return_moments.var, returns.var(), rtol=1e-9)

    loaded = load_policy(tmp_path / "run", "last").policy
    np.testing.assert_array_equal(loaded.statistics[0], mean)
    np.testing.assert_array_equal(loaded.statistics[1], var)
    for observation in observations[::97]:
        assert loaded.predict(observation.astype(np.float32)) == result.policy.predict(observation.astype(np.float32))


def test_resume_continues_the_statistics(tmp_path):
    recorder = Recorder()
    first = short_run(tmp_path, recorder)
    extended = first.config.__class__(**{**first.config.to_dict(), "num_steps": 900})
    resumed = offpolicy.train(extended, run_dir=tmp_path / "run", resume=True, quiet=True, callbacks=[recorder])
    observations = recorder.observations()
    assert len(observations) == 900
    np.testing.assert_allclose(resumed.policy.statistics[0], observations.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(resumed.policy.statistics[1], observations.var(axis=0), rtol=1e-9)
    np.testing.assert_allclose(resumed.learner.return_moments.var, recorder.discounted_returns().var(), rtol=1e-9)


def steps_of(observations: np.ndarray, rewards: np.ndarray) -> StepBatch:
    n = len(observations)
    return StepBatch(env_ids=np.zeros(n, np.int64), observations=observations, next_observations=observations,
                     actions=np.zeros(n, np.int64), rewards=rewards, terminated=np.zeros(n, bool),
                     truncated=np.zeros(n, bool), episode_returns=np.cumsum(rewards), episode_lengths=np.arange(1, n + 1),
                     context={})


def test_the_policy_acts_and_the_learner_trains_on_normalized_data():
    space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    learner = make_learner("sac", space, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), {"hidden": 16}, "cpu", 0,
                           normalize_observations=True, normalize_rewards=True)
    rng = np.random.default_rng(1)
    seen = (rng.normal(size=(50, 3)) * [1.0, 100.0, 0.01] + [5.0, -300.0, 0.0]).astype(np.float32)
    rewards = rng.normal(2.0, 3.0, 50)
    learner.collected(steps_of(seen, rewards))
    mean, var = seen.astype(np.float64).mean(axis=0), seen.astype(np.float64).var(axis=0)

    def normalized(x):
        return np.clip((x - mean) / np.sqrt(var + EPSILON), -CLIP, CLIP).astype(np.float32)

    policy = learner.policy()
    probe = np.concatenate([seen[:5], [[1e6, 1e6, 1e6]]]).astype(np.float32)  # the last is clipped
    actions, _ = policy.act_arrays(probe, True)
    expected, _ = policy.inner.act_arrays(normalized(probe), True)
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)

    returns = np.cumsum(rewards * GAMMA ** -np.arange(50)) * GAMMA ** np.arange(50)  # r_t + gamma * G_(t-1)
    batch = TransitionBatch(*(torch.as_tensor(x) for x in (probe, probe, np.zeros((6, 2), np.float32),
                                                           np.float32([1, -2, 3, 100, 0, -1e9]))),
                            terminated=torch.zeros(6), discounts=torch.full((6,), GAMMA), indices=torch.arange(6),
                            weights=torch.ones(6))
    trained_on = learner.normalize_batch(batch)
    np.testing.assert_allclose(trained_on.observations.numpy(), normalized(probe), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(trained_on.rewards.numpy(),
                               np.clip(np.float32([1, -2, 3, 100, 0, -1e9]) / np.sqrt(returns.var() + EPSILON),
                                       -CLIP, CLIP), rtol=1e-5)


def test_rewards_alone_may_be_normalized_for_any_observation(tmp_path):
    result = offpolicy.train("dqn", "FrozenLake-v1", run_dir=tmp_path / "run", num_steps=300, warmup_steps=50,
                             eval_interval=300, normalize_rewards=True, quiet=True)
    assert result.stats.step == 300 and result.learner.return_moments.count == 300


@pytest.mark.parametrize("env", ["FrozenLake-v1", "MinAtar/Breakout-v1"])
def test_observations_that_are_not_floats_are_refused(tmp_path, env):
    with pytest.raises(ConfigError, match="normalize_observations needs float observations"):
        offpolicy.train("dqn", env, run_dir=tmp_path / "run", num_steps=100, normalize_observations=True,
                        quiet=True)
