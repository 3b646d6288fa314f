"""The Ray backend on one local Ray instance (2 CPUs) shared by the module: same counts as in-process,
parameters reach the actors each phase, a dead actor is named, DQN still learns."""

import functools
import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from helpers import CountingEnv, StubPolicy  # noqa: E402
from offpolicy.config import ConfigError  # noqa: E402
from offpolicy.events import StepsCollected  # noqa: E402
from offpolicy.runners import EnvRunnerError, make_collection_runner  # noqa: E402
from test_strategy import CASES, run  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    tests = str(Path(__file__).parent)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}})
    yield
    ray.shutdown()


@pytest.mark.parametrize("case", list(CASES))
def test_same_counts_as_in_process(tmp_path, case):
    total, start, strategy, (train_steps, eval_steps, checkpoint_steps, chunks) = CASES[case]
    learner, recorder, checkpointer, _ = run(tmp_path, total, start, "ray", **strategy)
    assert learner.train_calls == train_steps
    assert checkpointer.saved_steps == checkpoint_steps
    assert [len(e.steps) for e in recorder.of(StepsCollected)] == chunks
    assert sorted({int(i) for e in recorder.of(StepsCollected) for i in e.steps.env_ids}) == list(
        range(strategy["num_envs"]))


def test_parameters_reach_every_actor_each_phase(tmp_path):
    learner, recorder, _, _ = run(tmp_path, 200, num_envs=4, autobatch_size=2, train_interval=8, train_steps=3,
                                  train_batch_size=8, eval_interval=1000)
    seen = [(int(env), float(version)) for e in recorder.of(StepsCollected)
            for env, version in zip(e.steps.env_ids, e.steps.context["version"])]
    for env in range(4):  # each env's actor acts with ever newer parameters, a phase or so behind
        versions = [version for e, version in seen if e == env]
        assert versions == sorted(versions) and versions[-1] >= learner.train_calls - 3 * 3


def test_a_dead_actor_is_named():
    runner = make_collection_runner("ray", functools.partial(CountingEnv, 5), [0, 1, 2, 3], StubPolicy(), 2,
                                    ray_actors=2)
    try:
        runner.run_steps(8)
        ray.kill(runner.actors[1])
        with pytest.raises(EnvRunnerError, match=r"Ray actor 1 \(environments \[2, 3\]\) died"):
            for _ in range(50):
                runner.run_steps(8)
    finally:
        runner.close()


def test_missing_ray_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'offpolicy\[ray\]'"):
        make_collection_runner("ray", functools.partial(CountingEnv, 5), [0], StubPolicy(), 1)


def test_missing_ray_is_named_before_the_run_directory_is_made(tmp_path, monkeypatch):
    from offpolicy import OffPolicyConfig, RunConfig, train

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'offpolicy\[ray\]'"):
        train(RunConfig(strategy=OffPolicyConfig(backend="ray")), run_dir=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_dqn_learns_cartpole_on_ray():
    """The default preset on 2 actors; seeds 0 and 1 reached 500 at 12,544 and 17,536 steps when sized."""
    from offpolicy import RunConfig
    from offpolicy.presets import preset
    from test_learning import train_until

    values = preset("dqn-cartpole")
    values["strategy"]["backend"] = "ray"
    values["ray_actors"] = 2
    result = train_until(RunConfig(**values), 475)
    assert result.stats.best_eval_return >= 475, result.stats.best_eval_return
