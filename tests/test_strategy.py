"""The loop's counts of training steps, evaluations and checkpoints for given configs."""

import functools

import pytest

import torch

from helpers import CountingEnv, StubLearner
from offpolicy.checkpoint import Checkpointer
from offpolicy.config import OffPolicyConfig
from offpolicy.events import EvaluationEnded, EventProcessor, StepsCollected, TrainingPhaseEnded, TrainStep
from offpolicy.interrupt import Interrupter
from offpolicy.policy import TrainOutput
from offpolicy.progress import RunProgress
from offpolicy.strategy import OffPolicyStrategy, TrainingComponents


class Recorder:
    def __init__(self):
        self.events = []

    def on_event(self, event, stats):
        self.events.append(event)

    def of(self, kind):
        return [e for e in self.events if isinstance(e, kind)]


class SavingCounter(Checkpointer):
    def __init__(self, directory):
        super().__init__(directory)
        self.saved_steps = []

    def checkpoint(self, policy, learner, step, eval_return, parts=None):
        self.saved_steps.append(step)
        return super().checkpoint(policy, learner, step, eval_return, parts)


def run(tmp_path, total, start=0, backend="inprocess", interrupter=None, learner=None, **strategy):
    config = OffPolicyConfig(**strategy, backend=backend)
    learner = learner or StubLearner()
    recorder = Recorder()
    interrupter = interrupter or Interrupter()
    checkpointer = SavingCounter(tmp_path / "checkpoints")
    progress = RunProgress()
    components = TrainingComponents(
        num_steps=total,
        events=EventProcessor([recorder], interrupter, progress),
        interrupter=interrupter,
        checkpointer=checkpointer,
        inference_device="cpu",
        progress=progress,
    )
    policy = OffPolicyStrategy(config).train_loop(components, learner, start, functools.partial(CountingEnv, 7))
    return learner, recorder, checkpointer, policy


CASES = {
    # total, start, strategy -> (training steps, evaluation steps, checkpoint steps, chunk sizes)
    "plain": (
        100, 0, dict(num_envs=2, autobatch_size=2, train_interval=8, train_steps=3, train_batch_size=16,
                     eval_interval=30, eval_episodes=2),
        (36, [32, 64, 96], [32, 64, 96, 100], [8] * 12 + [4]),
    ),
    "warmup": (
        100, 0, dict(num_envs=3, autobatch_size=2, train_interval=10, train_steps=2, train_batch_size=8,
                     eval_interval=50, warmup_steps=45),
        (12, [50, 100], [50, 100], [10] * 10),
    ),
    "resume": (
        100, 40, dict(num_envs=4, autobatch_size=4, train_interval=8, train_steps=1, train_batch_size=16,
                      eval_interval=25),
        (7, [56, 80, 100], [56, 80, 100], [8] * 7 + [4]),
    ),
    "interval_not_dividing": (
        10, 0, dict(num_envs=1, autobatch_size=1, train_interval=4, train_steps=5, train_batch_size=4,
                    eval_interval=100),
        (15, [], [10], [4, 4, 2]),
    ),
}


@pytest.mark.parametrize("backend", ["inprocess", "threads", "processes"])
@pytest.mark.parametrize("case", list(CASES))
def test_counts(tmp_path, case, backend):
    total, start, strategy, (train_steps, eval_steps, checkpoint_steps, chunks) = CASES[case]
    learner, recorder, checkpointer, _ = run(tmp_path, total, start, backend, **strategy)
    assert learner.train_calls == train_steps == len(recorder.of(TrainStep))
    assert [e.step for e in recorder.of(EvaluationEnded)] == eval_steps
    assert all(len(e.returns) == strategy.get("eval_episodes", 1) for e in recorder.of(EvaluationEnded))
    assert checkpointer.saved_steps == checkpoint_steps
    assert [len(e.steps) for e in recorder.of(StepsCollected)] == chunks
    assert recorder.of(StepsCollected)[-1].step == total
    assert set(learner.batch_sizes) <= {strategy["train_batch_size"]}
    phases = recorder.of(TrainingPhaseEnded)
    assert sum(phase.updates for phase in phases) == train_steps
    assert all(phase.updates == strategy["train_steps"] for phase in phases)


class EveryOtherLearner(StubLearner):
    """Reports `loss` = its update count on every update, `actor_loss` = 10 x it on even ones (as TD3's
    delayed actor updates do)."""

    def train(self, batch):
        super().train(batch)
        metrics = {"loss": torch.tensor(float(self.train_calls))}
        if self.train_calls % 2 == 0:
            metrics["actor_loss"] = torch.tensor(10.0 * self.train_calls)
        return TrainOutput(metrics)


def test_each_phase_reports_each_metric_averaged_over_the_updates_that_computed_it(tmp_path):
    learner, recorder, _, _ = run(tmp_path, 24, learner=EveryOtherLearner(), num_envs=1, autobatch_size=1,
                                  train_interval=8, train_steps=3, train_batch_size=8, eval_interval=1000)
    phases = recorder.of(TrainingPhaseEnded)
    assert [phase.step for phase in phases] == [8, 16, 24]
    assert [phase.metrics for phase in phases] == [
        {"loss": 2.0, "actor_loss": 20.0},  # updates 1, 2, 3; actor_loss from update 2 alone
        {"loss": 5.0, "actor_loss": 50.0},  # updates 4, 5, 6: actor_loss from 4 and 6
        {"loss": 8.0, "actor_loss": 80.0},  # updates 7, 8, 9: from 8 alone
    ]


def test_acting_policy_gets_previous_phase_parameters(tmp_path):
    learner, recorder, _, _ = run(
        tmp_path, 40, num_envs=2, autobatch_size=2, train_interval=8, train_steps=3,
        train_batch_size=8, eval_interval=1000,
    )
    # Phases after chunks 1..5; each phase k > 1 first hands over the version after phase k-1.
    # The evaluation copy is only updated at evaluations, and there are none here.
    updates = learner.policy().log["updates"]
    assert updates == [3.0, 6.0, 9.0, 12.0]


def test_interruption_stops_at_chunk_boundary_and_leaves_checkpoint(tmp_path):
    interrupter = Interrupter()

    class StopAfter:
        def on_event(self, event, stats):
            if isinstance(event, StepsCollected) and event.step >= 24:
                interrupter.stop("test asked")

    config = OffPolicyConfig(num_envs=2, autobatch_size=2, train_interval=8, train_batch_size=8, eval_interval=1000)
    learner = StubLearner()
    checkpointer = Checkpointer(tmp_path / "ck")
    components = TrainingComponents(1000, EventProcessor([StopAfter()], interrupter), interrupter, checkpointer, "cpu")
    policy = OffPolicyStrategy(config).train_loop(components, learner, 0, functools.partial(CountingEnv, 7))
    assert policy is learner.policy()
    assert checkpointer.latest.step == 24
    _, learner_state = checkpointer.load(24)
    assert learner_state["train_calls"] == learner.train_calls == 3  # phases at 8, 16, 24


def test_failing_sink_stops_training_cleanly(tmp_path):
    class Broken:
        def on_event(self, event, stats):
            if isinstance(event, StepsCollected) and event.step >= 16:
                raise OSError("disk full")

    interrupter = Interrupter()
    config = OffPolicyConfig(train_interval=8, train_batch_size=8)
    components = TrainingComponents(1000, EventProcessor([Broken()], interrupter), interrupter, None, "cpu")
    OffPolicyStrategy(config).train_loop(components, StubLearner(), 0, functools.partial(CountingEnv, 7))
    assert "disk full" in interrupter.reason
