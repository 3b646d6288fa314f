import itertools
import time
from collections import Counter

import numpy as np
import pytest
import torch

from helpers import CountingEnv, StubPolicy, observation_ids
from offpolicy.runners.inference import InferenceServer
from offpolicy.runners import (
    AsyncEnvRunner,
    InProcessMultiEnvRunner,
    MultiEnvRunner,
    SingleEnvRunner,
    StepBatch,
)


class TaggedFactory:
    """Makes CountingEnvs tagged 0, 1, 2, ... and keeps them for inspection."""

    def __init__(self, length=5, truncate=False):
        self.envs = []
        self.tags = itertools.count()
        self.length = length
        self.truncate = truncate

    def __call__(self):
        env = CountingEnv(self.length, float(next(self.tags)), self.truncate)
        self.envs.append(env)
        return env


def steps_taken(factory):
    return {int(env.tag): getattr(env, "total", 0) for env in factory.envs}


def multi_runner(backend, factory, num_envs, autobatch):
    seeds = list(range(num_envs))
    if backend == "inprocess":
        return InProcessMultiEnvRunner(factory, seeds, StubPolicy(), autobatch)
    return MultiEnvRunner(factory, seeds, InferenceServer(StubPolicy(), autobatch))


@pytest.fixture(autouse=True)
def count_steps(monkeypatch):
    original = CountingEnv.step

    def step(self, action):
        self.total = getattr(self, "total", 0) + 1
        return original(self, action)

    monkeypatch.setattr(CountingEnv, "step", step)


def settle(factory, expected_total, timeout=5.0):
    deadline = time.time() + timeout
    while sum(steps_taken(factory).values()) < expected_total and time.time() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("backend", ["inprocess", "threads"])
@pytest.mark.parametrize("num_envs, autobatch", [(4, 4), (4, 2), (3, 1)])
def test_run_steps_returns_n_and_keeps_every_env_one_step_ahead(backend, num_envs, autobatch):
    factory = TaggedFactory()
    with multi_runner(backend, factory, num_envs, autobatch) as runner:
        handed = Counter()
        for count in (1, 7, 4, 13):
            steps = runner.run_steps(count)
            assert (steps.actions == observation_ids(torch.as_tensor(steps.observations)).numpy()).all()
            timesteps = steps.timesteps()
            assert len(timesteps) == count
            handed.update(int(t.observation[1]) for t in timesteps)
            settle(factory, sum(handed.values()) + num_envs)
            taken = steps_taken(factory)
            assert taken == {tag: handed[tag] + 1 for tag in range(num_envs)}


@pytest.mark.parametrize("backend", ["inprocess", "threads"])
def test_timesteps_follow_each_env_in_order(backend):
    factory = TaggedFactory(length=3)
    with multi_runner(backend, factory, 2, 2) as runner:
        timesteps = runner.run_steps(20).timesteps()
    for tag in (0, 1):
        own = [t for t in timesteps if int(t.observation[1]) == tag]
        for previous, current in zip(own, own[1:]):
            if previous.done:
                assert current.episode_length == 1 and current.observation[0] == 0
            else:
                assert current.episode_length == previous.episode_length + 1
                assert (current.observation == previous.next_observation).all()


@pytest.mark.parametrize("truncate", [False, True])
def test_episode_end_keeps_true_final_observation_and_flags(truncate):
    factory = TaggedFactory(length=3, truncate=truncate)
    with InProcessMultiEnvRunner(factory, [0], StubPolicy(), 1) as runner:
        timesteps = runner.run_steps(4).timesteps()
    last = timesteps[2]
    assert last.done and last.episode_length == 3 and last.episode_return == 3.0
    assert last.next_observation[0] == 3.0
    assert (last.terminated, last.truncated) == (not truncate, truncate)
    assert timesteps[3].observation[0] == 0.0


@pytest.mark.parametrize("make", ["single", "async", "multi-inprocess", "multi-threads"])
def test_run_episodes_returns_whole_episodes(make):
    factory = TaggedFactory(length=4)
    if make == "single":
        runner = SingleEnvRunner(factory, StubPolicy(), 0, deterministic=True)
    elif make == "async":
        runner = AsyncEnvRunner(factory, InferenceServer(StubPolicy(), 1), 0, deterministic=True)
    else:
        runner = multi_runner(make.split("-")[1], factory, 3, 3)
        runner.run_steps(2)  # episodes under way must not be returned half
    with runner:
        episodes = runner.run_episodes(5)
    assert len(episodes) == 5
    for episode in episodes:
        assert episode.episode_lengths.tolist() == [1, 2, 3, 4]
        assert episode.done[-1] and not episode.done[:-1].any()


def test_evaluation_runner_acts_deterministically():
    policy = StubPolicy()
    with AsyncEnvRunner(TaggedFactory(), InferenceServer(policy, 1), 0, deterministic=True) as runner:
        runner.run_episodes(2)
    assert policy.log["batches"] and all(deterministic for _, deterministic, _ in policy.log["batches"])


def test_threads_batch_requests_across_envs():
    policy = StubPolicy()
    factory = TaggedFactory()
    with MultiEnvRunner(factory, [0, 1, 2, 3], InferenceServer(policy, 4)) as runner:
        runner.run_steps(40)
    sizes = [size for size, _, _ in policy.log["batches"]]
    assert max(sizes) > 1 and sum(sizes) >= 40


def test_step_batch_slices_joins_and_round_trips():
    factory = TaggedFactory(length=3)
    with InProcessMultiEnvRunner(factory, [0, 1], StubPolicy(), 2) as runner:
        steps = runner.run_steps(9)
    again = StepBatch.from_timesteps(steps.timesteps())
    for name in ("env_ids", "observations", "next_observations", "actions", "rewards", "terminated", "truncated",
                 "episode_returns", "episode_lengths"):
        assert np.array_equal(getattr(again, name), getattr(steps, name)), name
    assert again.context.keys() == steps.context.keys() == {"version"}
    joined = StepBatch.concatenate([steps[:4], steps[4:]])
    assert np.array_equal(joined.observations, steps.observations) and len(joined) == 9
    assert np.array_equal(steps[steps.done].episode_lengths, np.full(int(steps.done.sum()), 3))
