"""Hindsight replay: relabelled batches against a brute-force reference (which goals come from which future
steps, rewards recomputed by compute_reward), with 8 envs interleaved, truncations and wrap-around; resume;
and the inputs it refuses."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import offpolicy
from offpolicy import ConfigError, OffPolicyConfig
from offpolicy.hindsight import HindsightReplayBuffer, env_reward_function
from offpolicy.observations import ObservationLayout
from offpolicy.steps import StepBatch

ENVS, CAPACITY, K = 8, 8 * 40, 4


def goal_space(frame: bool) -> gym.spaces.Dict:
    box = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
    keys = {"observation": box, "achieved_goal": box, "desired_goal": box}
    if frame:  # a uint8 key too: the record is then bytes, each key in its own dtype
        keys["frame"] = gym.spaces.Box(0, 255, (2, 2, 1), np.uint8)
    return gym.spaces.Dict(keys)


def compute_reward(achieved, desired, info):
    assert len(info) == len(achieved)
    return -(np.abs(np.asarray(achieved) - np.asarray(desired)).sum(axis=-1) > 0.5).astype(np.float32)


def identity(env: int, episode: int, t: int) -> np.ndarray:
    return np.array([env, episode, t], np.float32)


def make_steps(rng: np.random.Generator, count: int, frame: bool = False, max_chunk: int = 20):
    """`count` steps of 8 envs interleaved at random, episodes of random length, ended by termination or
    truncation at random; step t of episode e of env k is observed as (k, e, t), reaches (k, e, t + 1), and
    keeps its original goal (k, e, -1). Returns the chunks and, per env, the list of (episode, t, reward, done)."""
    layout = ObservationLayout(goal_space(frame))
    episode, t = np.zeros(ENVS, int), np.zeros(ENVS, int)
    lengths = rng.integers(1, 60, ENVS)
    history: dict[int, list[tuple[int, int, float, bool]]] = {k: [] for k in range(ENVS)}
    rows = []
    for _ in range(count):
        k = int(rng.integers(ENVS))
        done = t[k] + 1 >= lengths[k]
        terminated = bool(done and rng.random() < 0.5)
        record = {"observation": identity(k, episode[k], t[k]), "achieved_goal": identity(k, episode[k], t[k]),
                  "desired_goal": identity(k, episode[k], -1)}
        if frame:
            record["frame"] = np.full((2, 2, 1), t[k] % 256, np.uint8)
        following = dict(record, observation=identity(k, episode[k], t[k] + 1),
                         achieved_goal=identity(k, episode[k], t[k] + 1))
        reward = float(rng.normal())
        rows.append((k, layout.pack(record), layout.pack(following), int(rng.integers(3)), reward, terminated,
                     bool(done and not terminated)))
        history[k].append((int(episode[k]), int(t[k]), reward, bool(done)))
        t[k] += 1
        if done:
            episode[k], t[k], lengths[k] = episode[k] + 1, 0, rng.integers(1, 60)
    chunks, start = [], 0
    while start < len(rows):
        size = int(rng.integers(1, max_chunk))
        part = rows[start : start + size]
        start += size
        env_ids, observations, next_observations, actions, rewards, terminated, truncated = map(np.array, zip(*part))
        chunks.append(StepBatch(env_ids, observations, next_observations, actions, rewards, terminated, truncated,
                                np.zeros(len(part)), np.ones(len(part), int), {}))
    return chunks, history


@pytest.mark.parametrize("frame, max_chunk", [(False, 20), (True, 20), (False, 700)],
                         ids=["float record", "bytes record", "chunks longer than a column"])
def test_relabelled_batches_match_a_brute_force_reference(frame, max_chunk):
    rng = np.random.default_rng(7)
    chunks, history = make_steps(rng, 2_000, frame, max_chunk)  # 250 a env on average: each column (40 slots) wraps many times
    space = goal_space(frame)
    layout = ObservationLayout(space)
    buffer = HindsightReplayBuffer(CAPACITY, ENVS, space, compute_reward, her_k=K, seed=3)
    for chunk in chunks:
        buffer.push(chunk)
    assert len(buffer) == CAPACITY

    stored = {k: steps[-CAPACITY // ENVS :] for k, steps in history.items()}  # what each column still holds
    rewards = {(k, e, t): r for k, steps in stored.items() for e, t, r, _ in steps}
    last_stored = {}  # (env, episode) -> last t stored: the episode's end, or its latest step if under way
    for k, steps in stored.items():
        for e, t, _, _ in steps:
            last_stored[(k, e)] = t

    batch = buffer.sample(4_000)
    unpack = {name: layout.unpack(getattr(batch, name).numpy()) for name in ("observations", "next_observations")}
    relabelled, positions = 0, []
    for row in range(4_000):
        k, e, t = unpack["observations"]["observation"][row].astype(int)
        assert (k, e, t) in rewards, "sampled a step the buffer no longer holds"
        goal = unpack["observations"]["desired_goal"][row]
        np.testing.assert_array_equal(unpack["next_observations"]["desired_goal"][row], goal)
        np.testing.assert_array_equal(unpack["next_observations"]["observation"][row], identity(k, e, t + 1))
        if frame:
            assert unpack["observations"]["frame"][row].ravel()[0] == t % 256
        if goal[2] == -1:  # kept its own goal
            np.testing.assert_array_equal(goal, identity(k, e, -1))
            assert batch.rewards[row].item() == pytest.approx(rewards[(k, e, t)])
            continue
        relabelled += 1
        goal_env, goal_episode, reached = goal.astype(int)
        future = reached - 1  # the goal is what step `future` achieved
        assert (goal_env, goal_episode) == (k, e) and t <= future <= last_stored[(k, e)]
        assert batch.rewards[row].item() == (0.0 if future == t else -1.0)
        positions.append((future - t + 0.5) / (last_stored[(k, e)] - t + 1))
    assert relabelled / 4_000 == pytest.approx(K / (K + 1), abs=0.03)
    assert np.mean(positions) == pytest.approx(0.5, abs=0.03)  # future steps drawn uniformly


def test_a_restored_buffer_samples_what_the_original_would():
    chunks, _ = make_steps(np.random.default_rng(1), 500)
    space = goal_space(False)
    original = HindsightReplayBuffer(CAPACITY, ENVS, space, compute_reward, seed=5)
    for chunk in chunks:
        original.push(chunk)
    original.sample(64)
    restored = HindsightReplayBuffer(CAPACITY, ENVS, space, compute_reward, seed=99)
    restored.load_state_dict(original.state_dict())
    for _ in range(3):
        expected, got = original.sample(32), restored.sample(32)
        for name in ("observations", "next_observations", "actions", "rewards", "terminated", "indices"):
            assert torch.equal(getattr(expected, name), getattr(got, name)), name


def test_her_trains_and_resumes_with_its_buffer(tmp_path):
    settings = dict(env_kwargs={"bits": 4}, her=True, num_steps=600, warmup_steps=100, eval_interval=300,
                    num_envs=2, autobatch_size=2, replay_buffer_size=1_000, save_buffer=True, quiet=True)
    first = offpolicy.train("dqn", "registered_envs:BitFlip-v0", run_dir=tmp_path / "run", **settings)
    extended = first.config.__class__(**{**first.config.to_dict(), "num_steps": 900})
    resumed = offpolicy.train(extended, run_dir=tmp_path / "run", resume=True, quiet=True)
    assert resumed.stats.step == 900


def test_what_her_refuses():
    with pytest.raises(ConfigError, match="her replays one-step transitions uniformly"):
        OffPolicyConfig(her=True, n_step=3)
    with pytest.raises(ConfigError, match="her needs a Dict observation with keys achieved_goal and desired_goal"):
        offpolicy.train("dqn", "CartPole-v1", her=True, num_steps=100, quiet=True, save=False)
    with pytest.raises(ConfigError, match="her needs an env with compute_reward"):
        env_reward_function(gym.make("CartPole-v1"))


@pytest.mark.parametrize("backend", ["inprocess", "threads", "processes"])
def test_success_rates_reach_the_metrics_in_every_backend(tmp_path, backend):
    """An env reporting `is_success` (bit flipping: success is a reward of 0) gets success in the training
    episode rows and a success rate per evaluation, from every backend (Ray's in test_ray.py)."""
    check_success_metrics(tmp_path, backend)


def check_success_metrics(tmp_path, backend: str) -> None:
    import json

    from offpolicy.events import StepsCollected

    checked = []

    def check(event, stats):
        if isinstance(event, StepsCollected) and event.steps.done.any():
            rows = np.flatnonzero(event.steps.done)
            np.testing.assert_array_equal(event.steps.successes[rows], event.steps.rewards[rows] == 0)
            checked.append(len(rows))

    offpolicy.train("dqn", "registered_envs:BitFlip-v0", env_kwargs={"bits": 2}, her=True, num_steps=400,
                    warmup_steps=100, eval_interval=200, eval_episodes=4, num_envs=2, autobatch_size=2, backend=backend,
                    run_dir=tmp_path / "run", quiet=True, callbacks=[check])
    assert sum(checked) >= 10
    evaluations = [json.loads(line) for line in (tmp_path / "run" / "metrics" / "eval.jsonl").read_text().splitlines()]
    assert len(evaluations) == 2 and all(0 <= row["success_rate"] <= 1 for row in evaluations)
    episodes = [json.loads(line) for line in (tmp_path / "run" / "metrics" / "train.jsonl").read_text().splitlines()]
    episodes = [row for row in episodes if row["event"] == "episode"]
    assert episodes and all(isinstance(row["is_success"], bool) for row in episodes)


def test_envs_without_success_report_none(tmp_path):
    import json

    offpolicy.train("dqn", "CartPole-v1", num_steps=300, warmup_steps=100, eval_interval=300, run_dir=tmp_path / "run",
                    quiet=True)
    evaluation = json.loads((tmp_path / "run" / "metrics" / "eval.jsonl").read_text().splitlines()[0])
    assert "success_rate" not in evaluation


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_continuous_agents_train_with_her_on_a_fetch_task(tmp_path, agent):
    result = offpolicy.train(agent, "FetchReach-v4", her=True, num_steps=400, warmup_steps=100, eval_interval=400,
                             eval_episodes=2, run_dir=tmp_path / "run", quiet=True)
    assert result.stats.step == 400 and result.stats.last_eval_success_rate is not None
