"""Frame-stack replay against a brute-force reference that stores whole observations: 8 envs interleaved,
random episode lengths, terminations, truncations and restarts without an end, wrap-around, n-step windows;
resume; choosing it from the env; the inputs it refuses."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch

import offpolicy
from offpolicy import ConfigError, OffPolicyConfig
from offpolicy.buffer import TransitionBuffer, make_replay_buffer
from offpolicy.frame_stack import FrameStackBuffer, frame_stack_of
from offpolicy.steps import StepBatch

ENVS, STACK, FRAME = 8, 4, (3, 2)


@dataclass
class Transition:
    episode: int
    observation: np.ndarray
    next_observation: np.ndarray
    action: int
    reward: float
    terminated: bool
    done: bool


def make_steps(rng: np.random.Generator, count: int, padding: str, max_chunk: int = 20):
    """`count` steps of 8 envs interleaved at random, with random frames, stacked as FrameStackObservation
    stacks them; episodes of random length end by termination or truncation, and now and then an env starts
    a new episode without ending the old one (a restarted env). Returns the chunks and each env's transitions."""
    def reset_stack() -> np.ndarray:
        frame = rng.integers(0, 256, FRAME, dtype=np.uint8)
        padded = np.repeat(frame[None], STACK, 0) if padding == "reset" else np.zeros((STACK, *FRAME), np.uint8)
        padded[-1] = frame
        return padded

    stacks = [reset_stack() for _ in range(ENVS)]
    episode, t = np.zeros(ENVS, int), np.zeros(ENVS, int)
    lengths = rng.integers(1, 25, ENVS)
    history: dict[int, list[Transition]] = {k: [] for k in range(ENVS)}
    rows = []
    for _ in range(count):
        k = int(rng.integers(ENVS))
        if t[k] > 0 and rng.random() < 0.01:  # restarted: a new episode, the old one never ended
            stacks[k], episode[k], t[k] = reset_stack(), episode[k] + 1, 0
        done = bool(t[k] + 1 >= lengths[k])
        terminated = done and rng.random() < 0.5
        following = np.concatenate([stacks[k][1:], rng.integers(0, 256, (1, *FRAME), dtype=np.uint8)])
        action, reward = int(rng.integers(6)), float(rng.normal())
        rows.append((k, stacks[k], following, action, reward, terminated, done and not terminated, t[k] + 1))
        history[k].append(Transition(int(episode[k]), stacks[k], following, action, reward, terminated, done))
        stacks[k], t[k] = following, t[k] + 1
        if done:
            stacks[k], episode[k], t[k], lengths[k] = reset_stack(), episode[k] + 1, 0, rng.integers(1, 25)
    chunks, start = [], 0
    while start < len(rows):
        size = int(rng.integers(1, max_chunk))
        part = rows[start : start + size]
        start += size
        env_ids, observations, next_observations, actions, rewards, terminated, truncated, lengths_so_far = map(
            np.array, zip(*part))
        chunks.append(StepBatch(env_ids, observations, next_observations, actions, rewards, terminated, truncated,
                                np.zeros(len(part)), lengths_so_far, {}))
    return chunks, history


def still_held(transitions: list[Transition], column: int) -> set[int]:
    """Which of an env's transitions a stream of `column` frames still rebuilds, counted the plain way: one
    frame for each episode's first observation and one per step, and a transition needs its observation's
    frames from its episode's first on."""
    position, newest, needed = -1, [], []
    for serial, step in enumerate(transitions):
        starts = serial == 0 or transitions[serial - 1].episode != step.episode
        if starts:
            position += 1
            first = position
        newest.append(position)
        needed.append(max(position - STACK + 1, first))
        position += 1
    written = position + 1
    return {s for s in range(len(transitions)) if s >= len(transitions) - column and needed[s] >= written - column}


def expected_window(transitions: list[Transition], serial: int, n_step: int, gamma: float):
    """Brute force: return, termination, discount and bootstrap observation of the n-step window at `serial`."""
    total, last = 0.0, serial
    for distance in range(n_step):
        step = transitions[serial + distance] if serial + distance < len(transitions) else None
        if step is None or step.episode != transitions[serial].episode:
            break
        total, last = total + gamma**distance * step.reward, serial + distance
        if step.done:
            break
    end = transitions[last]
    return total, end.terminated, gamma ** (last - serial + 1), end.next_observation


@pytest.mark.parametrize("padding, n_step, max_chunk", [
    ("reset", 1, 20), ("zero", 1, 20), ("reset", 3, 20), ("reset", 1, 90),
], ids=["reset padding", "zero padding", "3-step returns", "chunks longer than a column"])
def test_batches_match_a_brute_force_reference(padding, n_step, max_chunk):
    rng = np.random.default_rng(11)
    chunks, history = make_steps(rng, 3_000, padding, max_chunk)  # 375 a env: each 40-frame column wraps many times
    gamma, column = 0.9, 40
    buffer = FrameStackBuffer(ENVS * column, ENVS, STACK, padding, seed=4, gamma=gamma, n_step=n_step)
    for chunk in chunks:
        buffer.push(chunk)
    held = {k: still_held(transitions, column) for k, transitions in history.items()}
    assert len(buffer) == sum(map(len, held.values()))
    assert column * ENVS * 0.7 < len(buffer) < column * ENVS  # the episodes' first frames take the rest

    batch = buffer.sample(20_000)
    sampled = set()
    for row, index in enumerate(batch.indices.tolist()):
        k, slot = divmod(index, column)
        last = len(history[k]) - 1
        serial = last - (last - slot) % column
        assert serial in held[k], "sampled a transition whose frames are gone"
        sampled.add((k, serial))
        step = history[k][serial]
        reward, terminated, discount, bootstrap = expected_window(history[k], serial, n_step, gamma)
        assert np.array_equal(batch.observations[row].numpy(), step.observation)
        assert np.array_equal(batch.next_observations[row].numpy(), bootstrap)
        assert batch.actions[row].item() == step.action
        assert batch.rewards[row].item() == pytest.approx(reward, rel=1e-5, abs=1e-6)
        assert batch.terminated[row].item() == float(terminated)
        assert batch.discounts[row].item() == pytest.approx(discount, rel=1e-6)
    assert sampled == {(k, s) for k, serials in held.items() for s in serials}  # every one held, uniformly reachable
    assert batch.observations.dtype == torch.uint8


def test_matches_the_buffer_of_whole_observations_where_both_hold_a_transition():
    """The same steps pushed to the plain buffer (which stores observation and next observation whole): each
    transition both hold is byte for byte the same, n-step windows included."""
    chunks, _ = make_steps(np.random.default_rng(2), 400, "reset")
    frames = FrameStackBuffer(ENVS * 100, ENVS, STACK, seed=1, n_step=3)
    whole = TransitionBuffer(400, seed=1, n_step=3)
    for chunk in chunks:
        frames.push(chunk)
        whole.push(chunk)
    ours = frames.sample(3_000)
    theirs = whole.sample(400 * 8)
    key = {bytes(obs.numpy()) + bytes(nxt.numpy()): (r, d) for obs, nxt, r, d in
           zip(theirs.observations, theirs.next_observations, theirs.rewards.tolist(), theirs.discounts.tolist())}
    matched = 0
    for obs, nxt, reward, discount in zip(ours.observations, ours.next_observations, ours.rewards.tolist(),
                                          ours.discounts.tolist()):
        found = key.get(bytes(obs.numpy()) + bytes(nxt.numpy()))
        assert found is not None, "a transition the buffer of whole observations never held"
        assert found == (reward, discount)
        matched += 1
    assert matched == 3_000


def test_a_restored_buffer_samples_what_the_original_would():
    chunks, _ = make_steps(np.random.default_rng(1), 500, "reset")
    original = FrameStackBuffer(ENVS * 30, ENVS, STACK, seed=5)
    for chunk in chunks[:-3]:
        original.push(chunk)
    original.sample(64)
    restored = FrameStackBuffer(ENVS * 30, ENVS, STACK, seed=99)
    restored.load_state_dict(original.state_dict())
    for chunk in chunks[-3:]:  # both go on storing alike
        original.push(chunk)
        restored.push(chunk)
    for _ in range(3):
        expected, got = original.sample(32), restored.sample(32)
        for name in ("observations", "next_observations", "actions", "rewards", "terminated", "indices"):
            assert torch.equal(getattr(expected, name), getattr(got, name)), name
    with pytest.raises(ConfigError, match="resume with the run's num_envs and replay_buffer_size"):
        FrameStackBuffer(ENVS * 31, ENVS, STACK).load_state_dict(original.state_dict())


def test_each_frame_is_stored_once():
    """A transition costs one frame plus its share of its episode's first frame, not 2 x 4 frames."""
    side = 84
    buffer = FrameStackBuffer(1_000, 1, STACK)
    stack = np.zeros((1, STACK, side, side), np.uint8)
    following = np.zeros_like(stack)
    steps = StepBatch(np.zeros(1, int), stack, following, np.zeros(1, int), np.zeros(1), np.zeros(1, bool),
                      np.zeros(1, bool), np.zeros(1), np.ones(1, int), {})
    buffer.push(steps)
    assert buffer.nbytes / 1_000 < side * side + 40


def fake_image_env(padding: str = "reset", stack: int = STACK) -> gym.Env:
    env = gym.make("CartPole-v1")
    env = gym.wrappers.TransformObservation(
        env, lambda obs: np.full((5, 5), int(abs(obs[0]) * 100) % 256, np.uint8),
        gym.spaces.Box(0, 255, (5, 5), np.uint8))
    return gym.wrappers.FrameStackObservation(env, stack, padding_type=padding)


def test_chosen_for_frame_stacked_envs_only():
    config = OffPolicyConfig(replay_buffer_size=800, num_envs=4)
    stacked = make_replay_buffer(config, "cpu", 0, 0.99, 1_000, fake_image_env)
    assert isinstance(stacked, FrameStackBuffer) and stacked.stack_size == STACK and stacked.columns == 4
    assert frame_stack_of(fake_image_env("zero")) == (STACK, "zero")
    assert frame_stack_of(gym.wrappers.FlattenObservation(fake_image_env())) is None  # changed after stacking
    assert frame_stack_of(gym.make("CartPole-v1")) is None
    assert isinstance(make_replay_buffer(config, "cpu", 0, 0.99, 1_000, lambda: gym.make("CartPole-v1")),
                      TransitionBuffer)
    prioritized = OffPolicyConfig(replay_buffer_size=800, num_envs=4, prioritized=True)
    assert not isinstance(make_replay_buffer(prioritized, "cpu", 0, 0.99, 1_000, fake_image_env), FrameStackBuffer)


def test_what_it_refuses():
    with pytest.raises(ConfigError, match="must hold at least 5 frames per env"):
        FrameStackBuffer(8 * 4, 8, STACK)
    chunks, _ = make_steps(np.random.default_rng(0), 50, "reset")
    with pytest.raises(ValueError, match="observations of 3 stacked frames"):
        FrameStackBuffer(800, ENVS, 3).push(chunks[0])
    shuffled = chunks[0]
    shuffled.next_observations = shuffled.next_observations[:, ::-1].copy()
    with pytest.raises(ValueError, match="its observation shifted by one frame"):
        FrameStackBuffer(800, ENVS, STACK).push(shuffled)
    zero_padded, _ = make_steps(np.random.default_rng(0), 50, "zero")
    with pytest.raises(ValueError, match="not padded as FrameStackObservation"):
        FrameStackBuffer(800, ENVS, STACK, "reset").push(zero_padded[0])


def test_dqn_learns_from_frame_stacks_and_resumes_with_its_buffer(tmp_path):
    """End to end: the stacked pixel corridor is stored a frame at a time, solved (walk right to the end:
    5 steps), and the saved buffer comes back on resume."""
    settings = dict(num_steps=3_000, warmup_steps=300, eval_interval=1_500, eval_episodes=3, num_envs=4,
                    replay_buffer_size=2_000, exploration_decay=600, save_buffer=True, quiet=True)
    first = offpolicy.train("dqn", "registered_envs:StackedCorridor-v0", run_dir=tmp_path / "run", **settings)
    assert first.stats.last_eval_return == 1.0
    extended = first.config.__class__(**{**first.config.to_dict(), "num_steps": 3_500})
    resumed = offpolicy.train(extended, run_dir=tmp_path / "run", resume=True, quiet=True)
    assert resumed.stats.step == 3_500 and resumed.stats.last_eval_return == 1.0
