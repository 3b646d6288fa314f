"""Atari: DQN's preprocessing for every ALE id, the differences between training and evaluation envs, and a
short DQN run on pixels with the frame-stack buffer."""

from __future__ import annotations

import json

import numpy as np
import pytest

import offpolicy
from offpolicy.envs import EnvError, evaluation_env_factory, make_env_factory, missing_extra
from offpolicy.frame_stack import FrameStackBuffer

pytest.importorskip("ale_py")
pytest.importorskip("cv2")


def play(env, steps: int, seed: int = 0):
    """Random play for `steps` steps: the rewards, and per episode the lives left when it ended."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    rewards, lives_at_end = [], []
    for _ in range(steps):
        _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        rewards.append(reward)
        if terminated or truncated:
            lives_at_end.append(env.unwrapped.ale.lives())
            env.reset()
    return np.array(rewards), lives_at_end


def test_every_ale_id_gets_dqns_preprocessing():
    env = make_env_factory("ALE/Breakout-v5")()
    observation, _ = env.reset(seed=0)
    assert observation.shape == (4, 84, 84) and observation.dtype == np.uint8
    assert (observation[:-1] == observation[-1]).all()  # a new episode's stack repeats its first frame
    env.close()


def test_training_ends_episodes_at_a_lost_life_and_clips_rewards_evaluation_plays_whole_games():
    factory = make_env_factory("ALE/SpaceInvaders-v5")
    rewards, lives_at_end = play(factory(), 1_500)
    assert set(np.unique(rewards)) <= {0.0, 1.0}  # aliens are worth 5 to 30 points: clipped to 1
    assert lives_at_end[:2] == [2, 1]  # each lost life ends a training episode, and the game goes on

    rewards, lives_at_end = play(evaluation_env_factory(factory)(), 1_500)
    assert rewards.max() >= 5  # the game's own score
    assert lives_at_end and all(lives == 0 for lives in lives_at_end)  # only a game over ends an episode


def test_a_missing_atari_package_names_the_extra():
    assert missing_extra("ALE/Pong-v5") == "atari"
    with pytest.raises(EnvError, match="drop frameskip"):
        make_env_factory("ALE/Pong-v5", {"frameskip": 4})()


def test_dqn_trains_on_breakout_pixels_and_evaluates_whole_games(tmp_path):
    stored = []

    def check(event, stats):
        from offpolicy.events import StepsCollected

        if isinstance(event, StepsCollected):
            stored.append(event.steps.rewards)

    result = offpolicy.train("dqn", "ALE/Breakout-v5", num_steps=600, warmup_steps=300, num_envs=2, autobatch_size=2,
                             replay_buffer_size=2_000, train_interval=4, train_steps=1, eval_interval=600,
                             eval_episodes=1, run_dir=tmp_path / "run", quiet=True, callbacks=[check])
    assert result.stats.step == 600
    evaluation = json.loads((tmp_path / "run" / "metrics" / "eval.jsonl").read_text().splitlines()[0])
    assert evaluation["mean_length"] > 20  # a whole game of five lives
    assert all(set(np.unique(rewards)) <= {0.0, 1.0} for rewards in stored)


def test_the_buffer_for_atari_stores_frames_once():
    from offpolicy import OffPolicyConfig
    from offpolicy.buffer import make_replay_buffer

    buffer = make_replay_buffer(OffPolicyConfig(replay_buffer_size=1_000, num_envs=2), "cpu", 0, 0.99, 1_000,
                                make_env_factory("ALE/Pong-v5"))
    assert isinstance(buffer, FrameStackBuffer) and buffer.stack_size == 4
