"""The whole run through the Python API: run directory, metrics, interruption and resume."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import CountingEnv
from offpolicy import OffPolicyConfig, RunConfig, train
from offpolicy.checkpoint import CheckpointError, Checkpointer
from offpolicy.config import ConfigError
from offpolicy.envs import EnvError
from offpolicy.events import EvaluationEnded, StepsCollected, TrainStep


def small_config(**changes):
    values = dict(
        num_steps=600,
        strategy=OffPolicyConfig(num_envs=4, autobatch_size=4, train_interval=8, train_steps=2,
                                 train_batch_size=32, replay_buffer_size=1000, eval_interval=200, eval_episodes=2),
        hyperparameters={"hidden": 16},
    )
    values.update(changes)
    return RunConfig(**values)


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_directory_holds_config_metrics_and_checkpoints(tmp_path):
    result = train(small_config(), run_dir=tmp_path / "run", quiet=True)
    run = tmp_path / "run"
    assert RunConfig.from_dict(json.loads((run / "config.json").read_text())) == small_config()
    train_rows = rows(run / "metrics" / "train.jsonl")
    episodes = [r for r in train_rows if r["event"] == "episode"]
    updates = [r for r in train_rows if r["event"] == "update"]
    assert episodes and all({"episode_return", "episode_length", "exploration_rate"} <= set(r) for r in episodes)
    assert updates and all("loss" in r for r in updates)
    assert len({r["step"] for r in updates}) == len(updates)
    assert [r["step"] for r in rows(run / "metrics" / "eval.jsonl")] == [200, 400, 600]
    assert Checkpointer(run / "checkpoints").latest.step == 600
    assert result.stats.step == 600 and result.interrupted is None
    assert result.stats.train_steps == 2 * len(range(32, 601, 8))


def test_same_seed_same_run(tmp_path):
    returns = []
    for name in ("a", "b"):
        episode_returns = []
        train(small_config(), run_dir=tmp_path / name, quiet=True,
              callbacks=[lambda e, s: episode_returns.extend(e.steps.episode_returns[e.steps.done].tolist())
                         if isinstance(e, StepsCollected) else None])
        returns.append(episode_returns)
    assert returns[0] == returns[1]
    first, second = (rows(tmp_path / n / "metrics" / "train.jsonl") for n in ("a", "b"))
    assert first == second


def test_interrupted_run_resumes_to_the_end(tmp_path):
    run = tmp_path / "run"

    def stop_midway(event, stats):
        if isinstance(event, StepsCollected) and event.step >= 300:
            interrupter.stop("test")

    from offpolicy.interrupt import Interrupter

    interrupter = Interrupter()
    first = train(small_config(), run_dir=run, quiet=True, callbacks=[stop_midway], interrupter=interrupter)
    assert first.interrupted == "test" and first.stats.step == 304
    assert Checkpointer(run / "checkpoints").latest.step == 304

    evals = []
    second = train(run_dir=run, resume=True, quiet=True,
                   callbacks=[lambda e, s: evals.append(e.step) if isinstance(e, EvaluationEnded) else None])
    assert second.interrupted is None and second.stats.step == 600
    assert evals == [400, 600]
    eval_steps = [r["step"] for r in rows(run / "metrics" / "eval.jsonl")]
    assert eval_steps == [200, 400, 600]
    update_steps = [r["step"] for r in rows(run / "metrics" / "train.jsonl") if r["event"] == "update"]
    assert update_steps == sorted(update_steps) and len(set(update_steps)) == len(update_steps)


@pytest.mark.parametrize("save_buffer", [False, True])
def test_resume_restores_counters_random_states_and_optionally_the_buffer(tmp_path, save_buffer):
    run = tmp_path / "run"
    first = train(small_config(num_steps=400, save_buffer=save_buffer), run_dir=run, quiet=True)
    checkpointer = Checkpointer(run / "checkpoints")
    progress = checkpointer.load_part(400, "progress")
    assert progress["counters"]["episodes"] == first.stats.episodes > 0
    assert progress["counters"]["train_steps"] == first.stats.train_steps
    saved_buffer = checkpointer.load_part(400, "buffer")
    assert (saved_buffer is not None and saved_buffer["size"] == 400) == save_buffer

    train_steps_at = []
    resumed = train(small_config(num_steps=600, save_buffer=save_buffer), run_dir=run, resume=True, quiet=True,
                    callbacks=[lambda e, s: train_steps_at.append(e.step) if isinstance(e, TrainStep) else None])
    # A restored buffer trains from the first chunk; an empty one waits until it holds a batch (32).
    assert train_steps_at[0] == (408 if save_buffer else 432)
    assert resumed.stats.episodes > first.stats.episodes
    assert resumed.stats.train_steps == first.stats.train_steps + len(train_steps_at)
    assert resumed.stats.evaluations == 3


def test_prioritized_nstep_dueling_run_checkpoints_priorities_and_resumes(tmp_path):
    run = tmp_path / "run"
    strategy = OffPolicyConfig(num_envs=4, autobatch_size=4, train_interval=8, train_steps=2, train_batch_size=32,
                               replay_buffer_size=1000, eval_interval=200, eval_episodes=2, n_step=3,
                               prioritized=True)
    config = small_config(num_steps=400, save_buffer=True, strategy=strategy,
                          hyperparameters={"hidden": 16, "dueling": True})
    first = train(config, run_dir=run, quiet=True)
    assert first.stats.train_steps > 0
    checkpointer = Checkpointer(run / "checkpoints")
    saved = checkpointer.load_part(400, "buffer")
    priorities = saved["priorities"]
    assert len(priorities) == 400 and len(set(priorities.tolist())) > 100  # set from the learner's TD errors
    assert checkpointer.load_part(400, "progress")["buffer_sampling"]["pushed"] == 400  # beta's progress
    resumed = train(small_config(num_steps=600, save_buffer=True, strategy=strategy,
                                 hyperparameters={"hidden": 16, "dueling": True}), run_dir=run, resume=True,
                    quiet=True)
    assert resumed.stats.step == 600 and resumed.stats.train_steps > first.stats.train_steps
    assert len(checkpointer.load_part(600, "buffer")["priorities"]) == 600


def test_env_factory_callable_is_accepted(tmp_path):
    result = train(small_config(num_steps=100), env=lambda: CountingEnv(9), save=False, quiet=True)
    assert result.stats.step == 100 and result.run_dir is None


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(config=RunConfig(env="NoSuchEnv-v0")), EnvError, "unknown environment id 'NoSuchEnv-v0'"),
        (dict(config=RunConfig(env="Pendulum-v1")), EnvError, "Discrete action space, got Box"),
        (dict(config=RunConfig(agent="ppo")), ConfigError, "unknown agent 'ppo'"),
        (dict(config=RunConfig(hyperparameters={"learning_rate": 1})), ConfigError, "unknown key 'learning_rate'"),
    ],
)
def test_bad_input_is_named(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        train(**kwargs, run_dir=tmp_path / "r", quiet=True)


def test_run_dir_problems(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        train(small_config(), run_dir=tmp_path / "file", quiet=True)
    train(small_config(num_steps=40), run_dir=tmp_path / "used", quiet=True)
    with pytest.raises(ConfigError, match="already holds a run"):
        train(small_config(), run_dir=tmp_path / "used", quiet=True)
    with pytest.raises(CheckpointError, match="not a run directory"):
        train(run_dir=tmp_path / "empty", resume=True)


def test_a_failing_callback_stops_the_run_cleanly_and_is_reported(tmp_path):
    def broken(event, stats):
        if isinstance(event, StepsCollected) and event.step >= 100:
            raise OSError(28, "No space left on device")

    result = train(small_config(), run_dir=tmp_path / "run", quiet=True, callbacks=[broken])
    assert isinstance(result.failure, OSError) and "No space left" in result.interrupted
    assert Checkpointer(tmp_path / "run" / "checkpoints").latest.step == result.stats.step < 600


FLUSH_SUPPORTED = torch.set_flush_denormal(False)  # False on CPUs without the mode (it stays off)
needs_flush = pytest.mark.skipif(not FLUSH_SUPPORTED, reason="this CPU cannot flush denormals")


@needs_flush
def test_denormals_are_flushed_while_training_and_not_after():
    """Adam's moments decay into denormals, which the CPU computes tens of times slower."""
    denormal = torch.tensor([1e-39])
    seen_during = []
    train(small_config(num_steps=100), save=False, quiet=True,
          callbacks=[lambda event, stats: seen_during.append((denormal * 1.0).item())
                     if isinstance(event, (StepsCollected, TrainStep)) else None])
    assert seen_during and set(seen_during) == {0.0}
    assert (denormal * 1.0).item() > 0.0


def test_numpy_blas_gets_the_runs_thread_budget_and_is_restored_after():
    """The DQN fast path multiplies with NumPy: OpenBLAS must not spread it over cores the envs need."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

    if not blas_threads():
        pytest.skip("no BLAS thread pool that threadpoolctl can see")
    with threadpool_limits(2, "blas"):
        seen_during = []
        train(small_config(num_steps=100, torch_threads=1), save=False, quiet=True,
              callbacks=[lambda event, stats: seen_during.append(blas_threads())
                         if isinstance(event, TrainStep) else None])
        assert seen_during and all(threads == {1} for threads in seen_during)
        assert blas_threads() == {2}


@needs_flush
def test_torch_worker_threads_started_by_a_run_flush_denormals_too(tmp_path):
    """In a fresh process (as from the command line) torch's thread pool starts inside the run and
    inherits the mode: a parallel op over denormals gives zeros on every thread."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        from test_training import small_config
        from offpolicy import train
        from offpolicy.events import TrainStep
        nonzero = []
        def check(event, stats):
            if isinstance(event, TrainStep) and not nonzero:
                denormals = torch.full((4_000_000,), 1e-39)  # made here: no torch op ran before the run
                nonzero.append(int(((denormals * 1.0) != 0).sum()))
        train(small_config(agent="sac", env="Pendulum-v1", hyperparameters={}, num_steps=100, torch_threads=2),
              save=False, quiet=True, callbacks=[check])
        print(nonzero)
    """ % str(Path(__file__).parent)))
    output = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert output.returncode == 0, output.stderr
    assert output.stdout.strip() == "[0]"
