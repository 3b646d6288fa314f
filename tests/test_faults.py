"""Fault injection: broken environments, hangs and divergence stop the run with one clear error
naming the env and the step, within a bounded time, leaving the last good checkpoint, readable
logs and no worker processes behind."""

import functools
import json
import multiprocessing
import threading
import time

import pytest
import torch

from fake_envs import BrokenEnv
from helpers import CountingEnv, StubLearner
from offpolicy.policy import TrainOutput
from offpolicy import OffPolicyConfig, RunConfig, train
from offpolicy.checkpoint import Checkpointer, NonFiniteStateError
from offpolicy.events import EventProcessor
from offpolicy.interrupt import Interrupter
from offpolicy.runners import EnvRunnerError
from offpolicy.strategy import OffPolicyStrategy, TrainingComponents

BREAKS_AT = 150  # each env's own step; with 2 envs the run is near step 300, after checkpoints at 100 and 200

FAULTS = {
    "raise": r"environment [01] failed in step\(\) at its step 150: RuntimeError\('simulator exploded'\)",
    "reset": r"environment [01] failed in reset\(\) after its step 1[56][0-9]: RuntimeError\('reset exploded'\)",
    "nan": r"environment [01] returned a NaN or infinite observation at step [\d,]+ of the run",
    "inf_reward": r"environment [01] returned a NaN or infinite reward at step [\d,]+ of the run",
    "shape": r"environment [01] returned an observation of shape \(3,\) from step\(\), but its observation "
    r"space has shape \(2,\) \(at its step 150\)",
    "hang": r"environment [01] did not finish (step\(\)|a step) within 1 s \(at its step 150\)",
}


def config_for(backend):
    return RunConfig(
        num_steps=2000,
        env_timeout=1.0,
        strategy=OffPolicyConfig(num_envs=2, autobatch_size=2, train_interval=4, train_steps=1, train_batch_size=16,
                                 replay_buffer_size=500, eval_interval=100, eval_episodes=1, backend=backend),
        hyperparameters={"hidden": 8},
    )


@pytest.mark.parametrize("backend", ["inprocess", "threads", "processes"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_broken_env_stops_the_run_with_a_named_error(tmp_path, backend, fault):
    env = functools.partial(BrokenEnv, fault, BREAKS_AT)
    threads_before = threading.active_count()
    started = time.monotonic()
    with pytest.raises(EnvRunnerError, match=FAULTS[fault]):
        train(config_for(backend), env=env, run_dir=tmp_path / "run", quiet=True)
    assert time.monotonic() - started < 30

    checkpointer = Checkpointer(tmp_path / "run" / "checkpoints")
    assert checkpointer.latest is not None and checkpointer.latest.step in (200, 300)
    checkpointer.load(checkpointer.latest.step)
    for name in ("train.jsonl", "eval.jsonl"):
        for line in (tmp_path / "run" / "metrics" / name).read_text().splitlines():
            json.loads(line)
    assert multiprocessing.active_children() == []
    if not (fault == "hang" and backend == "threads"):  # a thread stuck in a call cannot be stopped
        assert threading.active_count() == threads_before


class DivergingLearner(StubLearner):
    """Its loss and parameters become NaN at its 50th update."""

    def train(self, batch):
        output = super().train(batch)
        if self.train_calls >= 50:
            self._policy.version = torch.tensor(float("nan"))
            return TrainOutput({"loss": torch.tensor(float("nan"))})
        return output


def test_divergence_stops_with_the_last_good_checkpoint(tmp_path):
    interrupter = Interrupter()
    checkpointer = Checkpointer(tmp_path)
    components = TrainingComponents(1000, EventProcessor([], interrupter), interrupter, checkpointer, torch.device("cpu"))
    strategy = OffPolicyStrategy(OffPolicyConfig(num_envs=2, autobatch_size=2, train_interval=4, train_steps=2,
                                                 train_batch_size=8, eval_interval=40))
    with pytest.raises(NonFiniteStateError, match=r"training diverged at step 104 after 50 updates \(loss nan\)"):
        strategy.train_loop(components, DivergingLearner(), 0, functools.partial(CountingEnv, 5))
    assert [e.step for e in checkpointer.entries] == [40, 80]
    _, state = checkpointer.load(80)
    assert torch.isfinite(state["version"])


@pytest.mark.parametrize("backend", ["inprocess", "threads", "processes"])
@pytest.mark.parametrize("fault", ["raise", "nan", "hang"])
def test_restart_recreates_failed_envs_and_goes_on(tmp_path, backend, fault):
    import dataclasses

    config = dataclasses.replace(config_for(backend), on_env_error="restart", num_steps=900)
    result = train(config, env=functools.partial(BrokenEnv, fault, BREAKS_AT), run_dir=tmp_path / "run", quiet=True)
    assert result.stats.step == 900 and result.interrupted is None
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics" / "train.jsonl").read_text().splitlines()]
    restarts = [row for row in rows if row["event"] == "env_restart"]
    assert restarts and restarts[-1]["restarts"] == result.stats.env_restarts == len(restarts)
    assert "environment" in restarts[0]["error"]
    assert multiprocessing.active_children() == []


def test_restart_gives_up_on_envs_that_fail_at_once(tmp_path):
    import dataclasses

    config = dataclasses.replace(config_for("inprocess"), on_env_error="restart")
    with pytest.raises(EnvRunnerError, match="simulator exploded"):
        train(config, env=functools.partial(BrokenEnv, "raise", 1), run_dir=tmp_path / "run", quiet=True)
    rows = (tmp_path / "run" / "metrics" / "train.jsonl").read_text().splitlines()
    assert sum('"env_restart"' in row for row in rows) == 3
