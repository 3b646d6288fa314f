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
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import numpy as np
import torch

from offpolicy.buffer import TransitionBuffer
from offpolicy.checkpoint import Checkpointer
from offpolicy.config import OffPolicyConfig
from offpolicy.envs import EVALUATION_ENV, TRAINING_ENVS, EnvFactory, derive_seeds
from offpolicy.events import (
    EvaluationEnded,
    EvaluationStarted,
    EventProcessor,
    StepsCollected,
    TrainStep,
)
from offpolicy.interrupt import Interrupter
from offpolicy.policy import Policy, PolicyLearner
from offpolicy.runners import TimeStep, make_collection_runner, make_evaluation_runner

log = logging.getLogger("offpolicy")


@dataclass
class TrainingComponents:
    """What the loop needs besides the learner (the seed's `RLComponents`)."""

    num_steps: int
    """Total environment steps of the run."""
    events: EventProcessor
    interrupter: Interrupter
    checkpointer: Checkpointer | None
    inference_device: torch.device
    seed: int = 0


def push_timesteps(buffer: TransitionBuffer, timesteps: list[TimeStep]) -> None:
    """Store a chunk of timesteps as one batched push; truncation is not termination."""
    buffer.push(
        np.stack([t.observation for t in timesteps]),
        np.stack([t.next_observation for t in timesteps]),
        np.stack([np.asarray(t.action) for t in timesteps]),
        np.fromiter((t.reward for t in timesteps), np.float32, len(timesteps)),
        np.fromiter((t.terminated for t in timesteps), np.float32, len(timesteps)),
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
        total = components.num_steps

        acting_policy = copy.deepcopy(learner.policy()).to(components.inference_device)
        acting_policy.set_env_steps(starting_step)
        env_runner = make_collection_runner(
            config.backend,
            env_factory,
            derive_seeds(components.seed, config.num_envs, TRAINING_ENVS, starting_step),
            acting_policy,
            config.autobatch_size,
        )
        eval_runner = make_evaluation_runner(
            config.backend,
            env_factory,
            derive_seeds(components.seed, 1, EVALUATION_ENV, starting_step)[0],
            copy.deepcopy(learner.policy()).to(components.inference_device),
        )
        buffer = TransitionBuffer(config.replay_buffer_size, learner.device, components.seed)

        step = starting_step
        next_eval = (starting_step // config.eval_interval + 1) * config.eval_interval
        intermediary_update = None
        try:
            while step < total:
                if interrupter.should_stop():
                    log.info("Training interrupted: %s", interrupter.reason or "reason unknown")
                    break

                previous_step = step
                timesteps = env_runner.run_steps(min(config.train_interval, total - step))
                step += len(timesteps)
                push_timesteps(buffer, timesteps)
                events.process_train(StepsCollected(step, timesteps))

                if len(buffer) >= config.train_batch_size and step >= config.warmup_steps:
                    if intermediary_update is not None:
                        env_runner.update_policy(intermediary_update)
                    for _ in range(config.train_steps):
                        output = learner.train(buffer.sample(config.train_batch_size))
                        events.process_train(TrainStep(step, output))
                    intermediary_update = learner.policy().state()

                if previous_step < next_eval <= step:
                    events.process_valid(EvaluationStarted(step, config.eval_episodes))
                    eval_runner.update_policy(learner.policy().state())
                    episodes = eval_runner.run_episodes(config.eval_episodes)
                    evaluation = EvaluationEnded(
                        step,
                        returns=[episode[-1].episode_return for episode in episodes],
                        lengths=[episode[-1].episode_length for episode in episodes],
                    )
                    if checkpointer is not None:
                        checkpointer.checkpoint(learner.policy(), learner, step, evaluation.mean_return)
                    events.process_valid(evaluation)
                    next_eval += config.eval_interval

            if checkpointer is not None and step > starting_step:
                latest = checkpointer.latest
                if latest is None or latest.step != step:
                    checkpointer.checkpoint(learner.policy(), learner, step, None)
        finally:
            env_runner.close()
            eval_runner.close()
        return learner.policy()
