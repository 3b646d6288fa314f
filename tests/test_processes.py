"""The process backend: same semantics as the others, clean shutdown, failures named."""

import functools
import multiprocessing
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from fake_envs import CountingEnv, FailingEnv, OddSeedsSlowEnv, RecordingEnv, SlowEnv
from helpers import StubPolicy, observation_ids
from offpolicy.policy import PolicyOutput
from offpolicy.runners import EnvRunnerError, InProcessMultiEnvRunner, ProcessMultiEnvRunner, StepBatch


def runner(num_envs=4, autobatch=4, workers=2, factory=functools.partial(CountingEnv, 5)):
    return ProcessMultiEnvRunner(factory, list(range(num_envs)), StubPolicy(), autobatch, num_workers=workers)


def alive(pids):
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split()[2] != "Z":
                    alive.append(pid)
        except (ProcessLookupError, FileNotFoundError):
            pass
    return alive


@pytest.mark.parametrize("num_envs, autobatch, workers", [(4, 4, 2), (5, 2, 2), (3, 1, 3)])
def test_run_steps_keeps_every_env_one_step_ahead(num_envs, autobatch, workers):
    """Each env has taken every step handed back, and one more (its next, under way or done)."""
    counts = multiprocessing.get_context("spawn").Array("q", num_envs)
    factory = functools.partial(RecordingEnv, counts)
    handed = np.zeros(num_envs, np.int64)
    with ProcessMultiEnvRunner(factory, list(range(num_envs)), StubPolicy(), autobatch, num_workers=workers) as r:
        for count in (1, 6, 4, 11):
            steps = r.run_steps(count)
            assert len(steps) == count
            assert (steps.actions == observation_ids(torch.as_tensor(steps.observations)).numpy()).all()
            handed += np.bincount(steps.env_ids, minlength=num_envs)
            deadline = time.monotonic() + 10
            while sum(counts[:]) < handed.sum() + num_envs and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.02)  # long enough for an env that ran further ahead to show it
            assert list(counts[:]) == (handed + 1).tolist()


@pytest.mark.parametrize("factory", [functools.partial(CountingEnv, 5), SlowEnv])
def test_a_full_batch_is_answered_by_one_inference_call(factory):
    """With autobatch_size == num_envs every call answers all envs, whether the workers' replies
    arrive together (fast envs) or one by one (slow ones)."""
    log = {"batches": [], "updates": []}
    with ProcessMultiEnvRunner(factory, list(range(8)), StubPolicy(log), 8, num_workers=2) as batched:
        for _ in range(20):
            batched.run_steps(8)
    assert [size for size, _, _ in log["batches"]] == [8] * 21  # the first answers the resets


def test_timesteps_follow_each_env_and_keep_final_observation():
    with runner(3, 3, 2, functools.partial(CountingEnv, 3, 0.0, True)) as r:
        timesteps = r.run_steps(30).timesteps()
    for env_id in range(3):
        own = [t for t in timesteps if t.env_id == env_id]
        assert len(own) >= 5
        for previous, current in zip(own, own[1:]):
            if previous.done:
                assert previous.next_observation[0] == 3.0 and previous.truncated and not previous.terminated
                assert current.episode_length == 1 and current.observation[0] == 0.0
            else:
                assert current.episode_length == previous.episode_length + 1
                assert (current.observation == previous.next_observation).all()


def test_whole_episodes():
    with runner(2, 2, 2, functools.partial(CountingEnv, 4)) as r:
        r.run_steps(3)
        episodes = r.run_episodes(4)
    assert [e.episode_lengths.tolist() for e in episodes] == [[1, 2, 3, 4]] * 4


def test_env_error_names_the_env_and_leaves_no_worker():
    r = runner(2, 2, 2, functools.partial(FailingEnv, 3))
    pids = r.worker_pids
    with pytest.raises(EnvRunnerError, match=r"environment \d failed in step\(\) at its step 4: RuntimeError\('simulator exploded'\) \(in a worker process\)"):
        r.run_steps(50)
    r.close()
    assert alive(pids) == []


def test_killed_worker_is_reported():
    r = runner(2, 2, 2, functools.partial(SlowEnv, 1000))
    pids = r.worker_pids
    r.run_steps(2)
    os.kill(pids[0], signal.SIGKILL)
    with pytest.raises(EnvRunnerError, match=r"worker process of environments \[0\] died \(exit code -9\)"):
        for _ in range(100):
            r.run_steps(2)
    r.close()
    assert alive(pids) == []


def test_close_stops_every_worker():
    r = runner(4, 4, 2)
    pids = r.worker_pids
    assert len(alive(pids)) == 2
    r.run_steps(5)
    r.close()
    deadline = time.time() + 5
    while alive(pids) and time.time() < deadline:
        time.sleep(0.05)
    assert alive(pids) == []


def test_requests_queue_in_a_workers_ring_and_wrap_around():
    """One worker owning five envs, a request per env: up to five requests wait in its ring at once and the
    ring wraps around many times; every env's steps come back in order, none lost or repeated."""
    with runner(5, 1, 1, functools.partial(CountingEnv, 1000)) as r:
        steps = r.run_steps(600)
        assert max(r._requests_sent) > 10 * r.arrays["request_counts"].shape[1]
    for env_id in range(5):
        own = steps.observations[steps.env_ids == env_id][:, 0]
        assert len(own) >= 100 and (own == range(len(own))).all()


def test_a_worker_left_by_its_trainer_exits_by_itself():
    """A worker sleeping for its next request notices when the trainer's end of the pipe closes (the trainer
    was killed), and leaves within a few of its wake-ups."""
    r = runner(2, 2, 2)
    pids = r.worker_pids
    r.run_steps(4)
    time.sleep(0.1)  # past their polling: both sleep on their semaphores
    for connection in r._connections:
        connection.close()
    deadline = time.time() + 5
    while alive(pids) and time.time() < deadline:
        time.sleep(0.05)
    assert alive(pids) == []
    r._connections = []
    r.close()


class RequestLog(ProcessMultiEnvRunner):
    """Records every request's env ids (the first ones go out while the runner starts)."""

    def __init__(self, *args, **kwargs):
        self.requests = []
        super().__init__(*args, **kwargs)

    def _request(self, worker, env_ids):
        if env_ids:
            self.requests.append((worker, list(env_ids)))
        super()._request(worker, env_ids)


@pytest.mark.parametrize("autobatch, largest", [(8, 4), (4, 2), (2, 1)])
def test_a_worker_gets_a_batch_in_as_many_requests_as_batches_under_way(autobatch, largest):
    """8 envs in 2 workers, worker 1's envs slow: worker 0 runs ahead and its envs fill whole batches. With
    8 / autobatch batches under way they still go out in requests of at most 4 / batches, so worker 0
    always has one queued while the trainer answers another."""
    with RequestLog(OddSeedsSlowEnv, list(range(8)), StubPolicy(), autobatch, num_workers=2) as r:
        r.run_steps(200)
    assert max(len(env_ids) for _, env_ids in r.requests) == largest
    assert all(env_id % 2 == worker for worker, env_ids in r.requests for env_id in env_ids)
    if autobatch < 8:  # one batch of all envs waits for the slow ones; smaller ones let worker 0 run ahead
        workers = [worker for worker, _ in r.requests]
        assert workers.count(0) > 2 * workers.count(1)


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="Unix priorities")
def test_workers_run_below_the_trainers_priority():
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with runner() as lowered:
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in lowered.worker_pids] == [min(19, own + 19)] * 2
    with ProcessMultiEnvRunner(CountingEnv, [0, 1], StubPolicy(), 2, num_workers=2, worker_niceness=0) as level:
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in level.worker_pids] == [own] * 2


class ObservationParityPolicy(StubPolicy):
    """Acts on what it sees (a pseudo-random function of the cart's position), so every env's
    transitions are fixed by its seed alone, whatever batches the backend forms."""

    def act(self, observations, deterministic):
        actions = (observations[:, 0] * 1e4).floor().long() % 2
        return PolicyOutput(actions, {"version": float(self.version)})


def test_each_env_gets_the_same_transitions_as_in_process():
    """Per env, the processes backend hands back exactly the in-process backend's steps: the observation
    acted on, the action, reward, flags, true next observation, episode return and length, and context."""
    seeds, compared = [11, 12, 13, 14, 15], 40
    make = functools.partial(gym.make, "CartPole-v1")
    with InProcessMultiEnvRunner(make, seeds, ObservationParityPolicy(), 2) as reference:
        expected = reference.run_steps(compared * len(seeds))
    with ProcessMultiEnvRunner(make, seeds, ObservationParityPolicy(), 2, num_workers=2) as r:
        chunks = [r.run_steps(count) for count in (1, 7, 150)]  # how many steps each env takes depends on timing
        for _ in range(100):  # an env that never gets its turn fails the length check below
            if min(np.bincount(StepBatch.concatenate(chunks).env_ids, minlength=len(seeds))) >= compared:
                break
            chunks.append(r.run_steps(50))
    got = StepBatch.concatenate(chunks)
    ends = 0
    for env_id in range(len(seeds)):
        mine, theirs = got[got.env_ids == env_id][:compared], expected[expected.env_ids == env_id][:compared]
        assert len(mine) == len(theirs) == compared
        for field in ("observations", "actions", "rewards", "next_observations", "terminated", "truncated",
                      "episode_returns", "episode_lengths"):
            np.testing.assert_array_equal(getattr(mine, field), getattr(theirs, field), field)
        np.testing.assert_array_equal(mine.context["version"], theirs.context["version"])
        ends += int(mine.done.sum())
    assert ends >= 5  # episodes ended and restarted within the comparison


def test_what_a_worker_process_imports_loads_no_torch():
    """Spawned workers import the worker module (and the env factory's): no torch, so they start in a
    fraction of a second."""
    import subprocess
    import sys

    code = ("import sys, offpolicy.runners.worker; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path):
    """Spawned workers import the main script again; one that trains at import kills them while starting,
    and the error says so instead of only 'worker process died'."""
    import subprocess
    import sys

    script = tmp_path / "train_at_import.py"
    script.write_text("import offpolicy\n\noffpolicy.train('dqn', 'CartPole-v1', num_steps=200, backend='processes', "
                      "num_envs=2, autobatch_size=2, save=False, quiet=True)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert ("train_at_import.py starts training when imported, and each worker imports it again; put the code "
            'that trains under `if __name__ == "__main__":`') in result.stderr
