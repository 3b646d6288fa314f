import numpy as np
import pytest
import torch

from offpolicy.buffer import TransitionBuffer
from offpolicy.steps import StepBatch


def push_range(buffer, start, count):
    ids = np.arange(start, start + count)
    buffer.push(StepBatch.of_transitions(
        ids[:, None].astype(np.float64).repeat(3, 1),
        ids[:, None].astype(np.float64).repeat(3, 1) + 0.5,
        ids % 2,
        ids.astype(np.float32),
        (ids % 3 == 0),
    ))


def stored_ids(buffer):
    """Every transition held, by its reward (the id it was pushed with): read back through `state_dict`."""
    return sorted(buffer.state_dict()["storage"]["rewards"].long().tolist())


def test_shapes_and_dtypes_follow_the_first_push():
    buffer = TransitionBuffer(10)
    assert len(buffer) == 0 and buffer.nbytes == 0  # nothing allocated before the first push
    push_range(buffer, 0, 3)
    batch = buffer.sample(4)
    assert batch.observations.shape == (4, 3) and batch.observations.dtype == torch.float32  # float64 stored as 32
    assert batch.actions.dtype == torch.int64
    assert batch.terminated.dtype == torch.float32
    assert batch.observations.device.type == "cpu"
    assert buffer.nbytes == 10 * (3 * 4 + 3 * 4 + 8 + 4 + 4)  # capacity x (obs, next obs, action, reward, flag)


def test_boolean_images_take_one_byte_a_cell_and_sample_as_they_were_pushed():
    """MinAtar's observations: 10x10 grids of boolean channels, stored as bool (the network makes them
    float), while the terminated flags become float for the targets."""
    rng = np.random.default_rng(0)
    frames = rng.random((6, 10, 10, 4)) < 0.2
    buffer = TransitionBuffer(6)
    buffer.push(StepBatch.of_transitions(frames, ~frames, np.arange(6) % 3, np.arange(6, dtype=np.float32),
                                         np.arange(6) == 5))
    batch = buffer.sample(32)
    rows = batch.rewards.long().numpy()
    assert batch.observations.dtype == torch.bool and batch.terminated.dtype == torch.float32
    assert np.array_equal(batch.observations.numpy(), frames[rows])
    assert np.array_equal(batch.next_observations.numpy(), ~frames[rows])
    assert buffer.nbytes == 6 * (2 * 400 + 8 + 4 + 4)


def test_wraps_around_overwriting_oldest():
    buffer = TransitionBuffer(5)
    push_range(buffer, 0, 3)
    push_range(buffer, 3, 4)  # crosses the end: 5, 6 overwrite 0, 1
    assert len(buffer) == 5
    assert stored_ids(buffer) == [2, 3, 4, 5, 6]
    push_range(buffer, 7, 12)  # larger than capacity: only the last five stay
    assert stored_ids(buffer) == [14, 15, 16, 17, 18]


def test_samples_only_filled_slots_and_keeps_transitions_together():
    buffer = TransitionBuffer(1000, seed=3)
    push_range(buffer, 100, 7)
    batch = buffer.sample(500)
    ids = batch.rewards.long()
    assert set(ids.tolist()) <= set(range(100, 107))
    assert len(set(ids.tolist())) == 7  # uniform over all seven
    assert torch.equal(batch.observations[:, 0], ids.float())
    assert torch.equal(batch.next_observations[:, 0], ids.float() + 0.5)
    assert torch.equal(batch.actions, ids % 2)
    assert torch.equal(batch.terminated, (ids % 3 == 0).float())
    assert torch.equal(batch.weights, torch.ones(500))  # uniform sampling: every weight 1
    stored = buffer.state_dict()["storage"]["rewards"]
    assert torch.equal(stored[batch.indices], batch.rewards)  # indices say where each transition sits


def test_sampling_matches_a_brute_force_reference():
    """Each slot of a full buffer is drawn about equally often (chi-square, fixed seed), and only filled slots."""
    buffer = TransitionBuffer(50, seed=4)
    push_range(buffer, 0, 20)
    counts = np.bincount(buffer.sample(20_000).rewards.long().numpy(), minlength=20)
    expected = 20_000 / 20
    assert counts.sum() == 20_000 and ((counts - expected) ** 2 / expected).sum() < 45  # chi2(19) p ~ 0.001
    buffer.update_priorities(torch.arange(5), torch.full((5,), 100.0))  # uniform: priorities change nothing
    after = np.bincount(buffer.sample(20_000).rewards.long().numpy(), minlength=20)
    assert ((after - expected) ** 2 / expected).sum() < 45


def test_same_seed_same_samples_and_state_round_trip():
    a, b = TransitionBuffer(50, seed=1), TransitionBuffer(50, seed=1)
    push_range(a, 0, 60)
    push_range(b, 0, 60)
    assert torch.equal(a.sample(32).rewards, b.sample(32).rewards)
    c = TransitionBuffer(50)
    c.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(32).rewards, c.sample(32).rewards)


def test_empty_buffer_refuses_to_sample():
    with pytest.raises(ValueError, match="empty"):
        TransitionBuffer(4).sample(1)


def test_phase_batches_come_from_the_filled_part_in_blocks():
    buffer = TransitionBuffer(1000, seed=3)
    observations = np.arange(300, dtype=np.float32).reshape(300, 1)
    buffer.push(StepBatch.of_transitions(observations, observations + 1, np.zeros(300, np.int64), observations[:, 0],
                                         np.zeros(300, bool)))
    batches = list(buffer.sample_batches(1000, 7))  # 4096 // 1000 = 4 batches per block: two blocks
    assert len(batches) == 7 and all(len(b.rewards) == 1000 for b in batches)
    for batch in batches:
        assert torch.equal(batch.next_observations, batch.observations + 1)  # transitions stay whole
        assert torch.equal(batch.observations[:, 0], batch.indices.float()) and torch.equal(batch.weights, torch.ones(1000))
        assert torch.equal(batch.rewards, batch.observations[:, 0]) and batch.observations.max() < 300
    assert len({float(b.rewards.sum()) for b in batches}) == 7  # independent draws
