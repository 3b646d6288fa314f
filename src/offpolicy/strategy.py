"""The off-policy strategy: the seed's `train_loop`, step for step.

Until the total is reached or a stop is asked for:
1. collect `train_interval` steps from the multi-env runner and push them;
2. once the buffer holds a batch and warm-up is over, hand the acting policy
   the parameters of the *previous* phase (acting never waits for training),
   then run `train_steps` optimisation steps;
3. when progress crosses an evaluation point (a multiple of `eval_interval`),
   run deterministic episodes with the current policy and write a checkpoint.

Two choices differ from the seed, on purpose: evaluation points are the
multiples of `eval_interval` (the seed's are one step earlier, which shifts on
resume), and the last chunk is cut to the total so a run takes exactly
`num_steps` steps. A checkpoint is also written where the loop stops, if that
step has none yet, so a run can always resume exactly where it ended.

Faults stop the loop with an error and leave the last good checkpoint: an
environment that fails, hangs (`env_timeout`) or returns NaN, and a NaN or
infinite training output (a diverged run is never checkpointed). With
`on_env_error="restart"` a failing chunk is dropped instead, the failed envs are
recreated with fresh seeds (episodes under way are abandoned; the Ray backend
replaces only the failed actor, the other backends recreate all their envs) and
the loop goes on; envs that fail again before any chunk succeeds stop it after a few tries.
"""

from __future__ import annotations

import copy
import logging
import math
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from offpolicy.buffer import ReplayBuffer, make_replay_buffer
from offpolicy.checkpoint import Checkpointer, NonFiniteStateError
from offpolicy.config import OffPolicyConfig
from offpolicy.envs import EVALUATION_ENV, TRAINING_ENVS, EnvFactory, derive_seeds, evaluation_env_factory
from offpolicy.events import (
    EnvsRestarted,
    EvaluationEnded,
    EvaluationStarted,
    EventProcessor,
    StepsCollected,
    TrainingPhaseEnded,
    TrainStep,
)
from offpolicy.interrupt import Interrupter
from offpolicy.policy import Policy, PolicyLearner, TrainMetrics
from offpolicy.progress import RunProgress
from offpolicy.runners import make_collection_runner, make_evaluation_runner
from offpolicy.runners.core import EnvRunner, EnvRunnerError
from offpolicy.runners.options import BackendOptions
from offpolicy.runners.watchdog import HangWatchdog
from offpolicy.steps import StepBatch

log = logging.getLogger("offpolicy")

MAX_FAILURES_IN_A_ROW = 3
"""With on_env_error='restart', envs that fail again before a single chunk succeeds stop the run after this many."""


@dataclass
class TrainingComponents:
    """What the loop needs besides the learner (the seed's `RLComponents`)."""

    num_steps: int
    """Total environment steps of the run."""
    events: EventProcessor
    interrupter: Interrupter
    checkpointer: Checkpointer | None
    inference_device: torch.device
    progress: RunProgress = field(default_factory=RunProgress)
    """The loop's counts: restored from the checkpoint when resuming, advanced by the loop, checkpointed
    (the same object the event processor's statistics show)."""
    seed: int = 0
    backend_options: BackendOptions = field(default_factory=BackendOptions)
    """The env timeout and the Ray fleet."""
    save_buffer: bool = False
    """Also store the replay buffer's contents in each checkpoint."""
    on_env_error: str = "stop"
    """'restart' recreates the training envs after a failure instead of stopping the run."""


def push_steps(buffer: ReplayBuffer, steps: StepBatch, first_step: int = 0) -> None:
    """Store a chunk of steps as one batched push; truncation is not termination.

    NaN or infinite observations and rewards are refused here, with one
    vectorised test per chunk, before they can poison the buffer.
    """
    for what, values in (("reward", steps.rewards), ("observation", steps.observations),
                         ("observation", steps.next_observations)):
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            bad = int(np.flatnonzero(~np.isfinite(values.reshape(len(steps), -1)).all(axis=1))[0])
            raise EnvRunnerError(
                f"environment {steps.env_ids[bad]} returned a NaN or infinite {what} "
                f"at step {first_step + bad + 1:,} of the run",
                [steps.env_ids[bad]],
            )
    buffer.push(steps)


def phase_means(outputs: list[TrainMetrics]) -> dict[str, float]:
    """Each metric's mean over the updates that reported it (TD3 reports `actor_loss` on delayed updates
    only), read with one device sync."""
    names = [name for output in outputs for name in output]
    values = torch.stack([value for output in outputs for value in output.values()]).float().tolist()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, value in zip(names, values):
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sums}


def check_finite(means: dict[str, float], step: int, updates: int) -> None:
    """Stop a diverged run at the end of the phase where it diverged: a NaN or infinite output of any
    update makes its phase mean NaN or infinite."""
    if not all(math.isfinite(value) for value in means.values()):
        shown = ", ".join(f"{name} {value:g}" for name, value in means.items())
        raise NonFiniteStateError(
            f"training diverged at step {step:,} after {updates:,} updates ({shown}); the last good "
            "checkpoint is kept. Lower the learning rate or scale the rewards, then start again"
        )


class OffPolicyStrategy:
    """Off-policy training with multi-env collection and double batching."""

    def __init__(self, config: OffPolicyConfig) -> None:
        self.config = config

    def train_loop(
        self,
        components: TrainingComponents,
        learner: PolicyLearner,
        starting_step: int,
        env_factory: EnvFactory,
    ) -> Policy:
        config = self.config
        events = components.events
        interrupter = components.interrupter
        checkpointer = components.checkpointer
        progress = components.progress
        total = components.num_steps

        acting_policy = copy.deepcopy(learner.policy()).to(components.inference_device)
        acting_policy.set_env_steps(starting_step)
        buffer = make_replay_buffer(config, learner.device, components.seed, learner.gamma, total, env_factory)
        progress.step = starting_step
        if checkpointer is not None and starting_step:
            restore_progress(checkpointer, starting_step, acting_policy, buffer, progress)

        def save(step: int, eval_return: float | None) -> None:
            assert checkpointer is not None
            parts = {"progress": progress_state(acting_policy, buffer, progress)}
            if components.save_buffer:
                parts["buffer"] = buffer.state_dict()
            checkpointer.checkpoint(learner.policy(), learner, step, eval_return, parts)

        with ExitStack() as cleanup:
            options = components.backend_options
            watchdog = HangWatchdog(options.env_timeout)
            cleanup.callback(watchdog.close)

            def training_seeds(step: int) -> list[int]:
                restarts = progress.env_restarts
                return derive_seeds(components.seed, config.num_envs, TRAINING_ENVS, step, restarts)

            def training_envs(step: int) -> EnvRunner:
                return make_collection_runner(
                    config.backend, env_factory, training_seeds(step), acting_policy, config.autobatch_size,
                    options, watchdog,
                )

            env_runner: EnvRunner | None = None  # made in the loop, so that failing to start is a failure too
            cleanup.callback(lambda: env_runner is not None and env_runner.close())
            eval_runner = cleanup.enter_context(
                make_evaluation_runner(
                    config.backend,
                    evaluation_env_factory(env_factory),
                    derive_seeds(components.seed, 1, EVALUATION_ENV, starting_step)[0],
                    copy.deepcopy(learner.policy()).to(components.inference_device),
                    options,
                    watchdog,
                )
            )

            step = starting_step
            next_eval = (starting_step // config.eval_interval + 1) * config.eval_interval
            intermediary_update = None
            failures_in_a_row = 0
            failed_envs: tuple[int, ...] | None = None  # to restart before the next chunk
            while step < total:
                if interrupter.should_stop():
                    log.info("Training interrupted: %s", interrupter.reason or "reason unknown")
                    break

                previous_step = step
                try:
                    if failed_envs is not None and env_runner is not None and not env_runner.replace_failed(
                        failed_envs, training_seeds(step)
                    ):
                        env_runner.close()
                        env_runner = None
                    failed_envs = None
                    if env_runner is None:
                        env_runner = training_envs(step)
                    steps = env_runner.run_steps(min(config.train_interval, total - step))
                    push_steps(buffer, steps, previous_step)
                    learner.collected(steps)
                except EnvRunnerError as error:
                    failures_in_a_row += 1
                    if components.on_env_error != "restart" or failures_in_a_row > MAX_FAILURES_IN_A_ROW:
                        raise
                    failed_envs = error.env_ids
                    progress.env_restarts += 1
                    events.process(EnvsRestarted(step, progress.env_restarts, str(error)))
                    continue
                failures_in_a_row = 0
                step = progress.step = step + len(steps)
                progress.episodes += int(np.count_nonzero(steps.done))
                events.process(StepsCollected(step, steps))

                if len(buffer) >= config.train_batch_size and step >= config.warmup_steps:
                    if intermediary_update is not None:
                        env_runner.update_policy(intermediary_update)
                    phase: list[TrainMetrics] = []
                    for batch in buffer.sample_batches(config.train_batch_size, config.train_steps):
                        output = learner.train(batch)
                        if output.td_errors is not None:
                            buffer.update_priorities(batch.indices, output.td_errors)
                        progress.train_steps += 1
                        phase.append(output.metrics)
                        events.process(TrainStep(step, output.metrics))
                    means = phase_means(phase)
                    check_finite(means, step, progress.train_steps)
                    events.process(TrainingPhaseEnded(step, len(phase), means))
                    intermediary_update = learner.policy().state()

                if previous_step < next_eval <= step:
                    events.process(EvaluationStarted(step, config.eval_episodes))
                    eval_runner.update_policy(learner.policy().state())
                    episodes = eval_runner.run_episodes(config.eval_episodes)
                    evaluation = EvaluationEnded(
                        step,
                        returns=[float(episode.episode_returns[-1]) for episode in episodes],
                        lengths=[int(episode.episode_lengths[-1]) for episode in episodes],
                        successes=[float(episode.successes[-1]) for episode in episodes],
                    )
                    progress.record_evaluation(step, evaluation.mean_return)
                    events.process(evaluation)
                    if checkpointer is not None:
                        save(step, evaluation.mean_return)
                    next_eval += config.eval_interval

            if checkpointer is not None and step > starting_step:
                latest = checkpointer.latest
                if latest is None or latest.step != step:
                    save(step, None)
        return learner.policy()


def progress_state(acting_policy: Policy, buffer: ReplayBuffer, progress: RunProgress) -> dict[str, Any]:
    """What a checkpoint keeps besides the learner: random states and the run's counters."""
    return {
        "exploration": acting_policy.exploration_state(),
        "buffer_sampling": buffer.sampling_state(),
        "torch_rng": torch.get_rng_state(),
        "counters": progress.counters(),
    }


def restore_progress(
    checkpointer: Checkpointer, step: int, acting_policy: Policy, buffer: ReplayBuffer, progress: RunProgress
) -> None:
    """Continue random states and counters from the checkpoint at `step`, and its buffer if it has one.

    Checkpoints written before these parts existed resume with fresh ones.
    """
    saved = checkpointer.load_part(step, "progress")
    if saved is not None:
        acting_policy.load_exploration_state(saved["exploration"])
        buffer.load_sampling_state(saved["buffer_sampling"])
        torch.set_rng_state(saved["torch_rng"])
        progress.restore_counters(saved["counters"])
    saved_buffer = checkpointer.load_part(step, "buffer")
    if saved_buffer is not None:
        buffer.load_state_dict(saved_buffer)
