"""The `offpolicy` command as a user runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

OFFPOLICY = str(Path(sys.executable).parent / "offpolicy")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def run(*args, timeout=120):
    return subprocess.run([OFFPOLICY, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


@pytest.mark.parametrize(
    "args, words",
    [
        (["train", "--num-envs", "8", "--autobatch-size", "9"], "autobatch_size"),
        (["train", "--train-batch-size", "0"], "train_batch_size"),
        (["train", "dqn", "NoSuchEnv-v0"], "unknown environment id"),
        (["train", "sarsa"], "unknown agent 'sarsa'"),
        (["train", "dqn", "Pendulum-v1"], "DQN needs a Discrete action space, got Box"),
        (["train", "--preset", "nope"], "unknown preset 'nope'"),
        (["train", "sac", "CartPole-v1"], "SAC needs a bounded Box action space, got Discrete(2)"),
        (["train", "td3", "CartPole-v1"], "TD3 needs a bounded Box action space, got Discrete(2)"),
        (["train", "dqn", "CartPole-v1", "--policy-delay", "3"], "--policy-delay does not apply to agent dqn"),
        (["train", "--backend", "gpu"], "backend must be one of"),
        (["train", "--resume", "/nonexistent/run"], "not a run directory"),
    ],
)
def test_bad_input_exits_at_once_with_one_line(tmp_path, args, words):
    result = run(*args, "--run-dir", str(tmp_path / "r")) if "--resume" not in args else run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.stderr


def test_an_env_of_ones_own_with_arguments_from_the_command_line(tmp_path):
    """`module:EnvId` and --env-kwargs (values read as JSON) reach the run, and its stored config."""
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), ENV.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [OFFPOLICY, "train", "dqn", "registered_envs:Corridor-v0", "--env-kwargs", "length=3", "--num-steps", "600",
         "--eval-interval", "300", "--quiet", "--run-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stderr
    stored = json.loads((tmp_path / "r" / "config.json").read_text())
    assert stored["env"] == "registered_envs:Corridor-v0" and stored["env_kwargs"] == {"length": 3}


def test_output_cut_short_by_its_reader_is_no_error():
    """`offpolicy presets | head -1`: the reader leaves before we are done writing (here, before we start)."""
    process = subprocess.Popen([OFFPOLICY, "presets"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    process.stdout.close()
    _, errors = process.communicate(timeout=60)
    assert process.returncode == 0 and b"Traceback" not in errors, errors.decode()


def test_help_documents_every_field_with_default():
    text = run("train", "--help").stdout
    for option in ("--num-envs", "--autobatch-size", "--replay-buffer-size", "--train-interval", "--train-steps",
                   "--eval-interval", "--eval-episodes", "--train-batch-size", "--warmup-steps", "--num-steps",
                   "--seed", "--run-dir", "--device", "--lr", "--gamma", "--tau", "--hidden", "--layers",
                   "--exploration-start", "--exploration-end", "--exploration-decay"):
        assert option in text
    assert "(default: 40000)" in text


def test_ray_fleet_options_size_the_run():
    from offpolicy.cli import build_parser, resolve_config

    def config(*options):
        return resolve_config(build_parser().parse_args(["train", "--backend", "ray", *options]))

    assert config("--ray-actors", "4", "--envs-per-actor", "4").strategy.num_envs == 16
    assert config("--ray-actors", "2").strategy.num_envs == 8  # the preset's, spread over the actors
    fleet = config("--envs-per-actor", "2", "--ray-address", "auto")
    assert (fleet.envs_per_actor, fleet.ray_actors, fleet.ray_address) == (2, 0, "auto")


def test_presets_are_listed():
    out = run("presets").stdout
    for name in ("dqn-cartpole", "seed-example", "sac-pendulum", "td3-pendulum", "dqn-lunarlander",
                 "sac-lunarlander", "sac-halfcheetah", "sac-hopper"):
        assert name in out


def test_missing_extra_is_named(tmp_path):
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401
        pytest.skip("box2d is installed here")
    except ImportError:
        pass
    result = run("train", "dqn", "LunarLander-v3", "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "pip install 'offpolicy[box2d]'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()


def start_long_run(run_dir):
    """A run far longer than any test, and its checkpoint index once the first checkpoint is written."""
    process = subprocess.Popen(
        [OFFPOLICY, "train", "--num-steps", "200000", "--eval-interval", "500", "--eval-episodes", "1",
         "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )
    index = run_dir / "checkpoints" / "index.json"
    deadline = time.time() + 60
    while not index.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert index.exists(), "no checkpoint within 60 s"
    return process, index


def test_ctrl_c_keeps_checkpoint_and_resume_finishes(tmp_path):
    run_dir = tmp_path / "run"
    process, index = start_long_run(run_dir)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert f"offpolicy train --resume {run_dir}" in out
    latest = json.loads(index.read_text())["latest"]
    assert latest > 0 and (run_dir / "checkpoints" / f"step_{latest:09d}" / "learner.safetensors").exists()

    resumed = run("train", "--resume", str(run_dir), "--num-steps", str(latest + 600), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Done: {latest + 600:,} steps" in resumed.stdout
    assert json.loads(index.read_text())["latest"] == latest + 600
    assert json.loads((run_dir / "config.json").read_text())["num_steps"] == latest + 600
    changed = run("train", "--resume", str(run_dir), "--lr", "0.1")
    assert changed.returncode == 2 and "--lr" in changed.stderr


def test_config_file_reproduces_a_run_and_names_unknown_keys(tmp_path):
    first = run("train", "--num-steps", "300", "--eval-interval", "100", "--eval-episodes", "1",
                "--num-envs", "2", "--autobatch-size", "2", "--run-dir", str(tmp_path / "a"), "--quiet")
    assert first.returncode == 0, first.stderr
    again = run("train", "--config", str(tmp_path / "a" / "config.json"), "--run-dir", str(tmp_path / "b"), "--quiet")
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == json.loads((tmp_path / "a" / "config.json").read_text())
    a_rows = (tmp_path / "a" / "metrics" / "eval.jsonl").read_text()
    assert a_rows == (tmp_path / "b" / "metrics" / "eval.jsonl").read_text()

    toml = tmp_path / "run.toml"
    toml.write_text('agent = "dqn"\nenv = "CartPole-v1"\nnum_steps = 100\n[strategy]\nnum_envz = 2\n')
    bad = run("train", "--config", str(toml))
    assert bad.returncode == 2 and "unknown key 'num_envz'" in bad.stderr


def child_pids(pid):
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc to find worker processes")
def test_kill_9_mid_run_leaves_no_workers_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [OFFPOLICY, "train", "--num-steps", "200000", "--eval-interval", "500", "--eval-episodes", "1",
         "--backend", "processes", "--num-envs", "4", "--autobatch-size", "2", "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
    )
    index = run_dir / "checkpoints" / "index.json"
    deadline = time.time() + 90
    while time.time() < deadline and not (index.exists() and json.loads(index.read_text())["latest"] >= 1000):
        time.sleep(0.1)
    workers = child_pids(process.pid)
    assert workers, "the processes backend started no workers"
    process.kill()
    process.wait()
    with open(run_dir / "metrics" / "train.jsonl", "a") as log:
        log.write('{"event": "episode", "st')  # a row cut short by the kill
    deadline = time.time() + 15
    while any(alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers), "workers outlived their killed trainer"

    latest = json.loads(index.read_text())["latest"]
    resumed = run("train", "--resume", str(run_dir), "--num-steps", str(latest + 1000), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    eval_steps = [json.loads(line)["step"] for line in (run_dir / "metrics" / "eval.jsonl").read_text().splitlines()]
    assert eval_steps == sorted(set(eval_steps)) and eval_steps[-1] == latest + 1000
    for line in (run_dir / "metrics" / "train.jsonl").read_text().splitlines():
        json.loads(line)


def test_sigterm_stops_with_a_checkpoint_and_its_own_exit_code(tmp_path):
    process, index = start_long_run(tmp_path / "run")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "Interrupted (SIGTERM received)" in out
    stopped_at = json.loads(index.read_text())["latest"]
    assert f"Stopped: {stopped_at:,} steps" in out


def test_a_family_preset_serves_every_game_of_its_family():
    from offpolicy.cli import build_parser, resolve_config
    from offpolicy.config import ConfigError

    def config(*options):
        return resolve_config(build_parser().parse_args(["train", *options]))

    pong = config("dqn", "ALE/Pong-v5")  # the family's default preset, chosen by the id alone
    assert pong.env == "ALE/Pong-v5" and pong.hyperparameters["target_update_interval"] == 250
    combined = config("dqn", "MinAtar/Asterix-v1", "--preset", "dqn-minatar-combined")
    assert combined.env == "MinAtar/Asterix-v1" and combined.strategy.n_step == 3
    with pytest.raises(ConfigError, match="preset 'dqn-minatar' is for env MinAtar/Breakout-v1, not CartPole-v1"):
        config("dqn", "CartPole-v1", "--preset", "dqn-minatar")
