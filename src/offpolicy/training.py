"""Wiring: build the parts of a run, run the strategy, return the trained policy.

This is the seed's wrapper around `train_loop`: emit a start event with the
total, run the loop, emit an end event with a summary, return the policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import gymnasium as gym
import torch
from threadpoolctl import threadpool_limits

from offpolicy.agents import make_learner
from offpolicy.agents.custom_encoder import CustomEncoder, EncoderFactory, recorded_encoder
from offpolicy.checkpoint import CheckpointError, Checkpointer
from offpolicy.config import ConfigError, RunConfig
from offpolicy.envs import EnvSpec, config_env_factory, make_env_factory, probe_spaces
from offpolicy.display import ProgressDisplay
from offpolicy.events import Event, EventProcessor, EventSink, RunStats, TrainingEnded, TrainingStarted
from offpolicy.hindsight import goal_leaves
from offpolicy.interrupt import Interrupter, stop_on_signals
from offpolicy.policy import Policy, PolicyLearner
from offpolicy.presets import preset_config
from offpolicy.progress import RunProgress
from offpolicy.spaces import SPACES_FILE, spaces_json
from offpolicy.sinks import CallbackSink, MetricsLog, TensorBoardLog, tensorboard_writer_class
from offpolicy.runners.options import BackendOptions
from offpolicy.runners.ray_actors import import_ray
from offpolicy.strategy import OffPolicyStrategy, TrainingComponents

CONFIG_FILE = "config.json"


@dataclass
class TrainResult:
    """What a finished (or stopped) run hands back."""

    policy: Policy
    learner: PolicyLearner
    run_dir: Path | None
    stats: RunStats
    interrupted: str | None
    """The stop reason if the run ended before `num_steps`, else None."""
    failure: BaseException | None = None
    """The error that stopped the run cleanly (e.g. a metrics sink or callback that raised), if any."""
    config: RunConfig | None = None
    """The config the run trained with."""
    spaces: tuple[gym.Space, gym.Space] | None = None
    """The env's observation and action spaces."""

    def save(self, directory: Path | str) -> Path:
        """Write the trained policy and its config to `directory`; `offpolicy.load_policy` reads it back."""
        from offpolicy.evaluation import save_policy

        assert self.config is not None
        return save_policy(self.policy, self.config, directory, self.spaces)


def write_spaces(directory: Path, observation_space: gym.Space, action_space: gym.Space) -> None:
    """Store the env's spaces beside the config, so the policy loads without making the env."""
    stored = spaces_json(observation_space, action_space)
    if stored is not None:
        write_atomically(directory / SPACES_FILE, json.dumps(stored, indent=2))


def new_run_dir(config: RunConfig, root: Path = Path("runs"), tag: str | None = None) -> Path:
    """`runs/<env>-<agent>-<tag>-<time>`, unique; the tag defaults to `s<seed>`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = config.env.split(":")[-1].replace("/", "-")  # mypkg.envs:Maze-v0, ALE/Breakout-v5
    base = root / f"{env}-{config.agent}-{tag or f's{config.seed}'}-{stamp}"
    path, suffix = base, 1
    while path.exists():
        suffix += 1
        path = base.with_name(f"{base.name}-{suffix}")
    return path


def check_device(name: str, option: str) -> torch.device:
    """The torch device `name`, or a clear error when it is unknown or absent on this machine."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{option} {name!r} is not a torch device; use cpu, cuda, cuda:1, mps, ...") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{option} is {name!r}, but torch {torch.__version__} sees no CUDA GPU here; use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"{option} is {name!r}, but this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{option} is {name!r}, but MPS is not available here; use cpu")
    return device


def prepare_run_dir(run_dir: Path) -> Path:
    """Create the run directory, or explain why it cannot be used."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} is a file; pick another --run-dir")
    if (run_dir / CONFIG_FILE).exists():
        raise ConfigError(
            f"run directory {run_dir} already holds a run; continue it with --resume {run_dir} "
            "or pick another --run-dir"
        )
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create run directory {run_dir}: {error.strerror}") from error
    if not os.access(run_dir, os.W_OK):
        raise ConfigError(f"run directory {run_dir} is not writable; pick another --run-dir")
    return run_dir


def load_run_config(run_dir: Path) -> RunConfig:
    """The config a run directory was started with."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{run_dir} is not a run directory: it has no {CONFIG_FILE}")
    try:
        return RunConfig.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error


def train(
    config: RunConfig | str | None = None,
    env_id: str | None = None,
    *,
    env: EnvSpec | None = None,
    run_dir: Path | str | None = None,
    resume: bool = False,
    callbacks: Sequence[Callable[[Event, RunStats], None]] = (),
    quiet: bool = False,
    save: bool = True,
    interrupter: Interrupter | None = None,
    encoder: EncoderFactory | None = None,
    encoder_kwargs: Mapping[str, Any] | None = None,
    **settings: Any,
) -> TrainResult:
    """Train an agent and return its policy.

    `train("dqn", "CartPole-v1", num_steps=40_000, lr=1e-3)` runs what
    `offpolicy train dqn CartPole-v1 --num-steps 40000 --lr 0.001` runs: the
    tuned preset for that agent and env (or the agent's defaults), then any
    run, strategy or hyperparameter field given by name. A `RunConfig` instead
    says everything itself.

    `env` overrides the env id with an id or any zero-argument callable
    returning a Gymnasium env. With `save`, metrics and checkpoints go to
    `run_dir` (a new folder under `runs/` when omitted); `resume` continues the
    run in `run_dir` from its latest checkpoint, with its stored config (or
    `config`, to extend `num_steps`).
    `callbacks` receive every event with the run's current stats.

    `encoder` puts a network part of your own in front of each of the agent's
    networks: a class or function called as `encoder(observation_space,
    **encoder_kwargs)` that returns a `torch.nn.Module` with an int attribute
    `features` (`offpolicy.agents.custom_encoder`). The run records its name and
    arguments; resuming such a run takes the same `encoder` again.
    """
    if isinstance(config, str):
        config = preset_config(config, env_id or "CartPole-v1", **settings)
    elif env_id is not None or settings:
        given = ", ".join(([repr(env_id)] if env_id is not None else []) + list(settings))
        raise ConfigError(f"settings given beside a RunConfig ({given}): set them in the RunConfig, or name the agent "
                          "instead: train('dqn', 'CartPole-v1', num_steps=40_000)")
    if resume:
        if run_dir is None:
            raise ConfigError("resume needs the run directory to continue")
        run_dir = Path(run_dir)
        config = config or load_run_config(run_dir)
    config = config or RunConfig()
    config, custom_encoder = with_custom_encoder(config, encoder, encoder_kwargs, run_dir if resume else None)
    device = check_device(config.device, "device")
    inference_device = check_device(config.inference_device, "inference_device") if config.inference_device else device
    if save and config.tensorboard:
        tensorboard_writer_class()  # a missing extra is reported before anything is written
    if config.strategy.backend == "ray":
        import_ray()
    factory = make_env_factory(env) if env is not None else config_env_factory(config)
    observation_space, action_space = probe_spaces(factory)
    if config.strategy.her:
        goal_leaves(observation_space)  # an env without goals is refused before anything is written

    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    learner = make_learner(
        config.agent, observation_space, action_space, config.hyperparameters, device, config.seed, custom_encoder,
        config.strategy.normalize_observations, config.strategy.normalize_rewards,
    )

    starting_step = 0
    checkpointer = None
    sinks: list[EventSink] = []
    if save:
        if not resume:
            run_dir = prepare_run_dir(Path(run_dir) if run_dir else new_run_dir(config))
        assert run_dir is not None
        write_atomically(run_dir / CONFIG_FILE, json.dumps(config.to_dict(), indent=2))
        write_spaces(run_dir, observation_space, action_space)
        checkpointer = Checkpointer(run_dir / "checkpoints", keep_last=config.keep_checkpoints)
        if resume:
            latest = checkpointer.latest
            if latest is None:
                raise CheckpointError(f"{run_dir} has no checkpoint to resume from")
            _, learner_state = checkpointer.load(latest.step)
            learner.load_state_dict(learner_state)
            starting_step = latest.step
            truncate_metrics(run_dir / "metrics", starting_step)
        sinks.append(MetricsLog(run_dir / "metrics"))
        if config.tensorboard:
            sinks.append(TensorBoardLog(run_dir / "tensorboard", starting_step if resume else None))
    else:
        run_dir = None
    sinks.append(ProgressDisplay(quiet=quiet))
    sinks.extend(CallbackSink(callback) for callback in callbacks)

    interrupter = interrupter or Interrupter()
    progress = RunProgress(step=starting_step)
    events = EventProcessor(sinks, interrupter, progress)
    components = TrainingComponents(
        num_steps=config.num_steps,
        progress=progress,
        events=events,
        interrupter=interrupter,
        checkpointer=checkpointer,
        inference_device=inference_device,
        seed=config.seed,
        backend_options=BackendOptions.from_run_config(config),
        save_buffer=config.save_buffer,
        on_env_error=config.on_env_error,
    )
    strategy = OffPolicyStrategy(config.strategy)
    events.process(TrainingStarted(starting_step, config.num_steps))
    try:
        # NumPy's BLAS (the DQN fast path, acting) gets the trainer's thread budget too: OpenBLAS would
        # otherwise run a 256-row product on every core, against the envs, for no gain (measured).
        with stop_on_signals(interrupter), denormals_flushed(), threadpool_limits(config.torch_threads, "blas"):
            policy = strategy.train_loop(components, learner, starting_step, factory)
    finally:
        stopped = interrupter.reason if progress.step < config.num_steps else None
        events.process(TrainingEnded(progress.step, stopped))
    return TrainResult(policy, learner, run_dir, events.stats, stopped, interrupter.error, config,
                       (observation_space, action_space))


def with_custom_encoder(
    config: RunConfig, encoder: EncoderFactory | None, kwargs: Mapping[str, Any] | None, resumed: Path | None
) -> tuple[RunConfig, CustomEncoder | None]:
    """The config with `encoder` recorded in it, and the encoder to build with: a new run records the one given;
    a config that already records one (a resumed run, a stored config) takes only a matching one."""
    if kwargs is not None and encoder is None:
        raise ConfigError("encoder_kwargs given without encoder: pass the encoder they are for")
    if config.encoder or resumed is not None:
        if resumed is not None and kwargs is not None:
            raise ConfigError("a resumed run keeps its encoder's arguments: leave out encoder_kwargs")
        where = f"the run in {resumed}" if resumed is not None else "this config"
        return config, recorded_encoder(config.encoder, encoder, kwargs, where)
    if encoder is None:
        return config, None
    custom = CustomEncoder(encoder, kwargs or {})
    return dataclasses.replace(config, encoder=custom.record()), custom


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """Compute with denormal floats as zero on this thread while the run trains.

    Adam's moment estimates for a weight whose gradient stays zero (a dead
    ReLU's) shrink geometrically into denormals, numbers below 1e-38 that x86
    CPUs compute tens of times slower than normal ones. Measured here, a
    256-wide DQN update went from 1.5 to 3.2 ms once they appeared. Values that
    small change no result that matters. The mode is per thread: torch's worker
    threads inherit it when they start during the run, as they do in a fresh
    process (and keep it); ones started earlier do not. Torch cannot report the
    previous mode, so this thread's default (off) is restored afterwards.
    """
    supported = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if supported:
            torch.set_flush_denormal(False)


def write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)


def truncate_metrics(directory: Path, step: int) -> None:
    """Drop metric rows logged after `step`, so a resumed run neither repeats nor skips rows.

    A row cut short by a killed process is dropped too.
    """

    def keep(line: str) -> bool:
        try:
            return json.loads(line).get("step", 0) <= step
        except ValueError:
            return False

    for path in directory.glob("*.jsonl"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line if line.endswith("\n") else line + "\n" for line in lines if keep(line)]
        if kept != lines:
            write_atomically(path, "".join(kept))


__all__ = ["TrainResult", "train", "load_run_config"]
