"""n-step returns and prioritized replay, each against a brute-force reference."""

import numpy as np
import pytest
import torch

from offpolicy.buffer import TransitionBuffer
from offpolicy.prioritized import PrioritizedReplayBuffer
from offpolicy.sum_tree import SumTree
from offpolicy.steps import StepBatch

GAMMA = 0.9


def random_stream(rng, count, num_envs=8):
    """`count` steps of `num_envs` interleaved envs in a random order, episodes of random lengths ending
    by termination or truncation, and now and then an env restarted mid-episode (its next step is an
    episode's first without the previous one being done, as after `on_env_error="restart"`)."""
    length = np.zeros(num_envs, np.int64)
    rows = []
    for serial in range(count):
        env = int(rng.integers(num_envs))
        if length[env] and rng.random() < 0.02:
            length[env] = 0  # restarted: the abandoned episode just stops
        length[env] += 1
        end = rng.random()
        terminated, truncated = end < 0.08, 0.08 <= end < 0.14
        rows.append((env, serial, float(rng.normal()), terminated, truncated, length[env]))
        if terminated or truncated:
            length[env] = 0
    env_ids, serials, rewards, terminated, truncated, lengths = (np.array(column) for column in zip(*rows))
    return StepBatch(
        env_ids=env_ids.astype(np.int64),
        observations=serials[:, None].astype(np.float32),  # each step's observation is its serial number
        next_observations=serials[:, None].astype(np.float32) + 0.5,
        actions=serials % 3,
        rewards=rewards.astype(np.float32),
        terminated=terminated.astype(bool),
        truncated=truncated.astype(bool),
        episode_returns=np.zeros(count),
        episode_lengths=lengths.astype(np.int64),
        context={},
    )


def reference_window(stream, serial, n):
    """(return, next observation, terminated, discount) of step `serial`, by walking the stream itself."""
    env = stream.env_ids[serial]
    later = [s for s in range(serial + 1, len(stream)) if stream.env_ids[s] == env]
    window = [serial]
    for following in later:
        last = window[-1]
        if len(window) == n or stream.terminated[last] or stream.truncated[last]:
            break
        if stream.episode_lengths[following] == 1:  # the env restarted: a new episode
            break
        window.append(following)
    total = sum(GAMMA**k * float(stream.rewards[s]) for k, s in enumerate(window))
    last = window[-1]
    return total, float(stream.next_observations[last, 0]), float(stream.terminated[last]), GAMMA ** len(window)


def push_in_chunks(buffer, stream, rng):
    start = 0
    while start < len(stream):
        size = int(rng.integers(1, 20))
        buffer.push(stream[start : start + size])
        start += size


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("buffer_class", [TransitionBuffer, PrioritizedReplayBuffer])
def test_nstep_targets_equal_a_brute_force_reference(n, buffer_class):
    rng = np.random.default_rng(n)
    stream = random_stream(rng, 3000)
    buffer = buffer_class(997, seed=n, gamma=GAMMA, n_step=n)  # wraps around three times, mid-chunk
    push_in_chunks(buffer, stream, rng)
    batch = buffer.sample(20_000)
    serials = batch.observations[:, 0].long().numpy()
    assert serials.min() >= len(stream) - 997  # only what is still stored
    assert len(set(serials.tolist())) > 950
    for row in np.unique(serials, return_index=True)[1]:
        expected = reference_window(stream, serials[row], n)
        got = (float(batch.rewards[row]), float(batch.next_observations[row, 0]), float(batch.terminated[row]),
               float(batch.discounts[row]))
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-5), f"step {serials[row]}"
        assert int(batch.actions[row]) == serials[row] % 3  # the first step's action, not the window's last


def test_an_nstep_window_stops_at_the_newest_step_and_grows_as_steps_arrive():
    buffer = TransitionBuffer(100, gamma=GAMMA, n_step=3)
    stream = random_stream(np.random.default_rng(0), 1, num_envs=1)
    first = stream[:1]
    first.terminated[:], first.truncated[:], first.rewards[:] = False, False, 1.0
    buffer.push(first)
    assert buffer.sample(1).discounts.item() == pytest.approx(GAMMA)  # nothing after it yet: one step
    second = StepBatch.of_transitions([[1.0]], [[1.5]], [0], [2.0], [False])
    buffer.push(second)
    batch = buffer.sample(50)
    from_first = batch.observations[:, 0] == 0
    assert torch.allclose(batch.rewards[from_first], torch.tensor(1.0 + GAMMA * 2.0))
    assert torch.all(batch.next_observations[from_first, 0] == 1.5)


def test_with_one_step_the_nstep_buffer_samples_what_the_plain_one_does():
    stream = random_stream(np.random.default_rng(1), 500)
    plain, windowed = TransitionBuffer(300, seed=5), TransitionBuffer(300, seed=5, n_step=1)
    for buffer in (plain, windowed):
        buffer.push(stream)
    a, b = plain.sample(64), windowed.sample(64)
    for name in ("observations", "next_observations", "actions", "rewards", "terminated", "discounts", "indices"):
        assert torch.equal(getattr(a, name), getattr(b, name))


def test_an_nstep_buffer_survives_save_and_load_mid_episode():
    rng = np.random.default_rng(2)
    stream = random_stream(rng, 1500)
    first, rest = stream[:1000], stream[1000:]
    whole = TransitionBuffer(700, seed=3, gamma=GAMMA, n_step=4)
    whole.push(first)
    whole.push(rest)
    saved = TransitionBuffer(700, seed=3, gamma=GAMMA, n_step=4)
    saved.push(first)
    restored = TransitionBuffer(700, gamma=GAMMA, n_step=4)
    restored.load_state_dict(saved.state_dict())
    restored.push(rest)  # episodes under way at the save continue their windows
    a, b = whole.sample(500), restored.sample(500)
    for name in ("observations", "rewards", "next_observations", "terminated", "discounts"):
        assert torch.equal(getattr(a, name), getattr(b, name))


def chi_square_z(counts, probabilities):
    """How many standard deviations the chi-square statistic of `counts` lies above its expectation
    under `probabilities` (Wilson-Hilferty's normal approximation); above 3.1 has p < 0.001."""
    drawn = probabilities > 0
    expected = counts.sum() * probabilities[drawn]
    statistic = ((counts[drawn] - expected) ** 2 / expected).sum()
    k = drawn.sum() - 1
    return ((statistic / k) ** (1 / 3) - (1 - 2 / (9 * k))) / np.sqrt(2 / (9 * k))


IMPLEMENTATIONS = [pytest.param(False, id="numpy"), pytest.param(True, id="compiled")]


def sum_tree(capacity: int, compiled: bool) -> SumTree:
    if compiled:
        pytest.importorskip("numba")
    return SumTree(capacity, compiled=compiled)


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@pytest.mark.parametrize("capacity", [1, 5, 1000, 1024, 4099])
def test_sum_tree_draws_in_proportion_and_never_draws_zero(capacity, compiled):
    rng = np.random.default_rng(capacity)
    priorities = rng.random(capacity) ** 3
    priorities[rng.random(capacity) < 0.3] = 0.0
    priorities[0] = max(priorities[0], 0.01)
    tree = sum_tree(capacity, compiled)
    tree.update(np.arange(capacity), priorities)
    assert tree.total == pytest.approx(priorities.sum())
    draws, weights = tree.sample(200_000, rng, beta=0.5)
    drawn = priorities[draws]
    assert weights.dtype == np.float32 and np.allclose(weights, (drawn / drawn.min()) ** -0.5, rtol=1e-6)
    counts = np.bincount(draws, minlength=capacity)
    assert len(counts) == capacity and counts[priorities == 0].sum() == 0
    if capacity > 1:
        assert chi_square_z(counts, priorities / priorities.sum()) < 3.1


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_sum_tree_updates_in_batches_match_a_fresh_sum(compiled):
    rng = np.random.default_rng(0)
    tree = sum_tree(777, compiled)
    expected = np.zeros(777)
    for _ in range(50):
        slots = rng.integers(777, size=64)
        values = rng.random(64)
        slots, first = np.unique(slots, return_index=True)  # one value per slot, as a learner's batch gives
        tree.update(slots, values[first])
        expected[slots] = values[first]
    assert np.allclose(tree.priorities(np.arange(777)), expected)
    assert tree.total == pytest.approx(expected.sum())
    masses = rng.random(1000) * tree.total
    cumulative = np.cumsum(expected)
    assert np.array_equal(tree.find(masses), np.searchsorted(cumulative, masses, side="right"))


def test_the_compiled_sum_tree_computes_what_numpy_does():
    """Same updates, bit-identical trees; same masses, identical slots, edge cases included."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    fast, plain = SumTree(10_007, compiled=True), SumTree(10_007, compiled=False)
    initial = np.where(rng.random(10_007) < 0.2, 0.0, rng.exponential(size=10_007))
    for tree in (fast, plain):
        tree.update(np.arange(10_007), initial)
    for _ in range(20):
        slots, values = rng.integers(10_007, size=256), rng.exponential(size=256) ** 3
        slots, first = np.unique(slots, return_index=True)
        values = np.where(rng.random(len(slots)) < 0.1, 0.0, values[first])
        fast.update(slots, values)
        plain.update(slots, values)
    assert np.array_equal(fast.nodes, plain.nodes)
    cumulative = np.cumsum(plain.priorities(np.arange(10_007)))
    edges = np.concatenate([[0.0, np.nextafter(plain.total, 0.0), plain.total * (1 - 1e-15)],
                            cumulative[rng.integers(10_007, size=200)]])  # exactly on interval bounds
    masses = np.concatenate([rng.random(5000) * plain.total, edges])
    found = fast.find(masses)
    assert np.array_equal(found, plain.find(masses))
    assert np.all(plain.priorities(found) > 0)
    errors = rng.normal(size=300).astype(np.float32)  # signed, as a learner's TD errors
    slots = rng.choice(10_007, size=300, replace=False)
    highest = [tree.update_from_errors(slots, errors, 1e-3, 0.6) for tree in (fast, plain)]
    expected = (np.abs(errors.astype(np.float64)) + 1e-3) ** 0.6
    assert np.allclose(fast.priorities(slots), expected, rtol=1e-12, atol=0)
    assert np.allclose(plain.priorities(slots), expected, rtol=1e-12, atol=0)
    assert highest[0] == pytest.approx(expected.max(), rel=1e-12) and highest[1] == pytest.approx(highest[0])
    assert fast.total == pytest.approx(plain.total, rel=1e-12)
    draws = [tree.sample(1000, np.random.default_rng(8), beta=0.7) for tree in (fast, plain)]
    assert np.array_equal(draws[0][0], draws[1][0])
    assert np.allclose(draws[0][1], draws[1][1], rtol=1e-6)


def filled_prioritized(size=400, capacity=500, **options):
    buffer = PrioritizedReplayBuffer(capacity, seed=1, gamma=GAMMA, **options)
    buffer.push(random_stream(np.random.default_rng(3), size))
    return buffer


def test_prioritized_sampling_follows_td_errors_and_weights_follow_the_formula():
    buffer = filled_prioritized(alpha=0.7, beta=0.5, epsilon=0.01)
    rng = np.random.default_rng(4)
    errors = rng.random(400) * 3
    errors[::7] = 0.0  # priority epsilon ** alpha: rare, never impossible
    buffer.update_priorities(torch.arange(400), torch.from_numpy(errors).float())
    priorities = (np.abs(errors.astype(np.float32)) + 0.01) ** 0.7
    probabilities = priorities / priorities.sum()
    counts = np.zeros(400)
    for _ in range(200):
        batch = buffer.sample(1000)
        counts += np.bincount(batch.indices.numpy(), minlength=400)
    assert chi_square_z(counts, probabilities) < 3.1
    batch = buffer.sample(256)
    expected = (400 * probabilities[batch.indices.numpy()]) ** -0.5
    assert np.allclose(batch.weights.numpy(), expected / expected.max(), rtol=1e-5)
    assert batch.weights.max().item() == 1.0


def test_new_transitions_enter_at_the_highest_priority_so_far():
    buffer = filled_prioritized(size=10, capacity=20, alpha=1.0, epsilon=1e-6)
    buffer.update_priorities(torch.arange(10), torch.linspace(0.0, 5.0, 10))
    buffer.push(random_stream(np.random.default_rng(9), 4))
    counts = np.bincount(buffer.sample(100_000).indices.numpy(), minlength=20)
    assert counts[14:].sum() == 0  # slots never filled are never drawn
    share = counts[10:14] / counts.sum()
    total = np.linspace(0.0, 5.0, 10).sum() + 1e-5 + 4 * 5.0
    assert np.allclose(share, 5.0 / total, atol=0.01)  # each new one at the maximum, 5


def test_beta_rises_to_one_over_the_run():
    buffer = PrioritizedReplayBuffer(100, beta=0.4, total_steps=1000)
    stream = random_stream(np.random.default_rng(0), 1200)
    assert buffer.beta == pytest.approx(0.4)
    buffer.push(stream[:500])
    assert buffer.beta == pytest.approx(0.7)
    buffer.push(stream[500:])
    assert buffer.beta == 1.0


def test_priorities_and_beta_survive_a_resume():
    buffer = filled_prioritized(total_steps=1000)
    buffer.update_priorities(torch.arange(0, 400, 3), torch.rand(134))
    resumed = PrioritizedReplayBuffer(500, seed=77, gamma=GAMMA, total_steps=1000)
    resumed.load_state_dict(buffer.state_dict())
    resumed.load_sampling_state(buffer.sampling_state())
    assert resumed.beta == buffer.beta == pytest.approx(0.4 + 0.6 * 0.4)
    a, b = buffer.sample(300), resumed.sample(300)
    assert torch.equal(a.indices, b.indices) and torch.equal(a.weights, b.weights)
    stream = random_stream(np.random.default_rng(5), 10)
    buffer.push(stream)
    resumed.push(stream)
    assert torch.equal(buffer.sample(300).indices, resumed.sample(300).indices)  # same maximum priority too


def test_a_checkpoint_without_the_buffer_keeps_beta():
    buffer = filled_prioritized(total_steps=1000)
    fresh = PrioritizedReplayBuffer(500, total_steps=1000)
    fresh.load_sampling_state(buffer.sampling_state())
    assert fresh.beta == buffer.beta
