"""The Ray backend on one local Ray instance (2 CPUs) shared by the module: same counts as in-process,
parameters reach the actors each phase, a dead actor is named, DQN still learns."""

import functools
import os
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from helpers import CountingEnv, StubPolicy  # noqa: E402
from offpolicy.config import ConfigError  # noqa: E402
from offpolicy.events import StepsCollected  # noqa: E402
from offpolicy.runners import BackendOptions, EnvRunnerError, RayFleet, make_collection_runner  # noqa: E402
from test_hindsight import check_success_metrics  # noqa: E402
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


def test_actors_do_not_explore_in_lockstep():
    """Each actor acts with its own copy of the policy; copies of one random state would make every
    actor's envs take the same random actions."""
    import gymnasium as gym

    from offpolicy.agents.dqn import DQNConfig, DQNLearner

    always_random = DQNConfig(exploration_start=1.0, exploration_end=1.0)
    policy = DQNLearner(gym.spaces.Box(-1e6, 1e6, (2,)), gym.spaces.Discrete(2), always_random).policy()
    runner = make_collection_runner("ray", functools.partial(CountingEnv, 1000), [0, 1], policy, 1,
                                    BackendOptions(ray=RayFleet(actors=2, steps_per_env=25)))
    actions: dict[int, list[int]] = {0: [], 1: []}
    try:
        while min(len(taken) for taken in actions.values()) < 50:
            steps = runner.run_steps(50)
            for env, taken in actions.items():
                taken += steps.actions[steps.env_ids == env].tolist()
    finally:
        runner.close()
    assert actions[0][:50] != actions[1][:50]


def test_a_dead_actor_is_named():
    runner = make_collection_runner("ray", functools.partial(CountingEnv, 5), [0, 1, 2, 3], StubPolicy(), 2,
                                    BackendOptions(ray=RayFleet(actors=2)))
    try:
        runner.run_steps(8)
        ray.kill(runner.actors[1])
        with pytest.raises(EnvRunnerError, match=r"Ray actor 1 \(environments \[2, 3\]\) died"):
            for _ in range(50):
                runner.run_steps(8)
    finally:
        runner.close()


def test_a_failed_actor_is_replaced_while_the_others_keep_stepping():
    runner = make_collection_runner("ray", functools.partial(CountingEnv, 5), [0, 1, 2, 3], StubPolicy(), 2,
                                    BackendOptions(ray=RayFleet(envs_per_actor=2)))
    try:
        runner.run_steps(8)
        survivor = runner.actors[0]
        ray.kill(runner.actors[1])
        with pytest.raises(EnvRunnerError) as failure:
            for _ in range(50):
                runner.run_steps(8)
        assert failure.value.env_ids == (2, 3)
        assert runner.replace_failed(failure.value.env_ids, [10, 11, 12, 13])
        assert runner.actors[0] is survivor and len(runner.actors) == 2
        steps = runner.run_steps(40)
        assert len(steps) == 40 and set(steps.env_ids.tolist()) == {0, 1, 2, 3}
    finally:
        runner.close()


def test_envs_per_actor_sizes_the_fleet(tmp_path):
    assert RayFleet(envs_per_actor=3).plan(7, cpus=2) == [[0, 1, 2], [3, 4, 5], [6]]
    assert RayFleet(actors=2).plan(5, cpus=16) == [[0, 1, 2], [3, 4]]
    assert RayFleet().plan(3, cpus=16) == [[0], [1], [2]]  # one per CPU, at most one per env
    runner = make_collection_runner("ray", functools.partial(CountingEnv, 5), list(range(6)), StubPolicy(), 3,
                                    BackendOptions(ray=RayFleet(envs_per_actor=3)))
    try:
        assert runner.actor_envs == [[0, 1, 2], [3, 4, 5]]
        assert sorted(set(runner.run_steps(60).env_ids.tolist())) == list(range(6))
    finally:
        runner.close()
    assert ray.is_initialized()  # an instance the runner did not start is left running


def ray_daemons() -> set[int]:
    """Process ids of running Ray node daemons (each Ray instance has one raylet)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and "raylet" in (entry / "comm").read_text():
                found.add(int(entry.name))
        except OSError:
            pass
    return found


def test_the_command_joins_a_running_cluster_and_leaves_it_running(tmp_path):
    import subprocess

    address = ray.get_runtime_context().gcs_address  # this module's instance, as a cluster to join
    done = subprocess.run(
        [str(Path(sys.executable).parent / "offpolicy"), "train", "--backend", "ray", "--ray-address", address,
         "--ray-actors", "2", "--num-steps", "300", "--eval-interval", "150", "--quiet",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "Done: 300 steps" in done.stdout
    assert ray.get(ray.put("still here"), timeout=30) == "still here"
    assert ray.cluster_resources().get("CPU") == 2


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_the_command_starts_a_local_ray_and_shuts_it_down(tmp_path):
    import subprocess

    before = ray_daemons()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "offpolicy"), "train", "--backend", "ray", "--ray-actors", "1",
         "--num-steps", "300", "--eval-interval", "150", "--quiet", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr
    assert "Done: 300 steps" in done.stdout
    deadline = time.monotonic() + 20
    while ray_daemons() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_daemons() - before, "the Ray instance the run started is still up"


def kill_config(tmp_path, on_env_error):
    from offpolicy import OffPolicyConfig, RunConfig

    return RunConfig(
        num_steps=1200, env_timeout=30.0, on_env_error=on_env_error, ray_actors=2,
        strategy=OffPolicyConfig(num_envs=4, autobatch_size=2, train_interval=8, train_steps=1, train_batch_size=16,
                                 replay_buffer_size=500, eval_interval=200, backend="ray"),
        hyperparameters={"hidden": 8},
    )


def test_an_actor_killed_mid_run_stops_it_with_the_last_checkpoint_intact(tmp_path):
    from fake_envs import SelfKillingEnv
    from offpolicy import train
    from offpolicy.checkpoint import Checkpointer

    env = functools.partial(SelfKillingEnv, str(tmp_path / "killed"), 150)  # near step 600 of the run
    with pytest.raises(EnvRunnerError, match=r"Ray actor [01] \(environments \[[0-3], [0-3]\]\) died"):
        train(kill_config(tmp_path, "stop"), env=env, run_dir=tmp_path / "run", quiet=True)
    checkpointer = Checkpointer(tmp_path / "run" / "checkpoints")
    assert checkpointer.latest is not None and checkpointer.latest.step >= 400
    checkpointer.load(checkpointer.latest.step)


def test_an_actor_killed_mid_run_is_replaced_with_restart(tmp_path):
    import json

    from fake_envs import SelfKillingEnv
    from offpolicy import train

    env = functools.partial(SelfKillingEnv, str(tmp_path / "killed"), 150)
    result = train(kill_config(tmp_path, "restart"), env=env, run_dir=tmp_path / "run", quiet=True)
    assert result.stats.step == 1200 and result.interrupted is None and result.stats.env_restarts == 1
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics" / "train.jsonl").read_text().splitlines()]
    restarts = [row for row in rows if row["event"] == "env_restart"]
    assert len(restarts) == 1 and "died" in restarts[0]["error"]


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
    """The default preset on 2 actors, from a random policy's ~20 to an evaluation of 200 or more.

    Collection on Ray is not deterministic (chunks arrive in any order), so this is one draw from the
    preset's spread of runs, and the bar sits below where DQN can collapse: in 30 runs of 60k steps
    (2 actors, 2 cores, each actor with its own exploration draws) 29 reached 400 by 32.5k steps, but
    one peaked at 266 after 10k and then collapsed, as a CI run did at 285. All 30 reached 200, the
    last at 32.5k steps and the others by 17.5k.
    That parameters reach the actors is `test_parameters_reach_every_actor_each_phase`'s to check."""
    from offpolicy import RunConfig
    from offpolicy.presets import preset
    from test_learning import train_until

    values = preset("dqn-cartpole")
    values["strategy"]["backend"] = "ray"
    values["ray_actors"] = 2
    values["num_steps"] = 60_000
    result = train_until(RunConfig(**values), 200)
    assert result.stats.best_eval_return >= 200, result.stats.best_eval_return


def test_ray_actors_carry_dict_observations_intact():
    from fake_envs import DictCountingEnv
    from offpolicy import RunConfig, train
    from test_dict_observations import SMALL, _check_steps

    batches = []
    config = RunConfig(agent="dqn", env="fake_envs:DictCounting-v0", num_steps=600, ray_actors=2,
                       strategy=dict(SMALL, backend="ray"))
    result = train(config, save=False, quiet=True,
                   callbacks=[lambda event, stats: batches.append(event.steps)
                              if isinstance(event, StepsCollected) else None])
    assert result.stats.step == 600 and sum(len(batch) for batch in batches) == 600
    _check_steps(batches, DictCountingEnv().observation_space)


def test_success_rates_reach_the_metrics(tmp_path):
    check_success_metrics(tmp_path, "ray")
