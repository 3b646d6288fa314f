"""Your own encoder through the Python API and the command line: recorded by name, saved in safetensors, loaded
back only with the encoder handed over, never by importing a name read from a file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from custom_networks import BUILT_FOR, KeyedEncoder, NoFeatures, OtherEncoder, SmallEncoder, not_a_module

import offpolicy
from offpolicy import ConfigError, load_policy
from offpolicy.agents.custom_encoder import same_encoder

TESTS = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
OFFPOLICY = str(Path(sys.executable).parent / "offpolicy")
SHORT = dict(num_steps=600, warmup_steps=200, eval_interval=600, quiet=True)


def train_small(tmp_path: Path, agent: str = "dqn", env: str = "CartPole-v1", **settings):
    return offpolicy.train(agent, env, run_dir=tmp_path / "run", encoder=SmallEncoder,
                           encoder_kwargs={"features": 12}, **{**SHORT, **settings})


@pytest.mark.parametrize("agent, env", [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_a_run_over_ones_own_encoder_loads_in_a_fresh_process_and_acts_the_same(tmp_path, agent, env):
    BUILT_FOR.clear()
    result = train_small(tmp_path, agent, env)
    assert BUILT_FOR and all(space.shape == result.spaces[0].shape for space in BUILT_FOR)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["encoder"] == {"name": "custom_networks:SmallEncoder", "kwargs": {"features": 12}}
    saved = result.save(tmp_path / "saved")

    observations = [result.spaces[0].sample().tolist() for _ in range(5)]
    expected = [np.asarray(result.policy.predict(np.asarray(o, np.float32))).tolist() for o in observations]
    script = (
        "import json, sys, numpy as np\n"
        "from custom_networks import SmallEncoder\n"
        "import offpolicy\n"
        f"policy = offpolicy.load_policy({str(saved)!r}, encoder=SmallEncoder).policy\n"
        f"print(json.dumps([np.asarray(policy.predict(np.asarray(o, np.float32))).tolist() for o in {observations!r}]))\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=ENV)
    assert output.returncode == 0, output.stderr
    assert json.loads(output.stdout) == expected


def test_dict_observations_reach_ones_own_encoder_as_named_tensors(tmp_path):
    KeyedEncoder.seen_keys = set()
    result = offpolicy.train("dqn", "registered_envs:SplitCartPole-v0", run_dir=tmp_path / "run",
                             encoder=KeyedEncoder, **SHORT)
    assert KeyedEncoder.seen_keys == {"head", "tail"}
    observation = {"head": np.zeros(2, np.float32), "tail": np.zeros(2, np.float32)}
    assert result.policy.predict(observation) in (0, 1)
    loaded = load_policy(tmp_path / "run", "last", encoder=KeyedEncoder)
    assert loaded.policy.predict(observation) == result.policy.predict(observation)


def test_loading_needs_the_encoder_and_checks_its_name(tmp_path):
    train_small(tmp_path)
    with pytest.raises(ConfigError, match="trained with your encoder custom_networks:SmallEncoder; hand it over"):
        load_policy(tmp_path / "run")
    with pytest.raises(ConfigError, match="but custom_networks:OtherEncoder was given"):
        load_policy(tmp_path / "run", encoder=OtherEncoder)
    with pytest.raises(ConfigError, match="hand it over"):
        offpolicy.train(run_dir=tmp_path / "run", resume=True, quiet=True)


def test_resuming_takes_the_same_encoder_and_continues(tmp_path):
    first = train_small(tmp_path)
    config = first.config
    resumed = offpolicy.train(config.__class__(**{**config.to_dict(), "num_steps": 900}), run_dir=tmp_path / "run",
                              resume=True, quiet=True, encoder=SmallEncoder)
    assert resumed.stats.step == 900
    with pytest.raises(ConfigError, match="keeps its encoder's arguments"):
        offpolicy.train(run_dir=tmp_path / "run", resume=True, quiet=True, encoder=SmallEncoder,
                        encoder_kwargs={"features": 3})


def test_a_run_of_built_in_encoders_refuses_a_custom_one(tmp_path):
    offpolicy.train("dqn", "CartPole-v1", run_dir=tmp_path / "run", **SHORT)
    with pytest.raises(ConfigError, match="trained with the built-in encoder, not custom_networks:SmallEncoder"):
        load_policy(tmp_path / "run", encoder=SmallEncoder)


def test_a_checkpoint_naming_a_harmful_function_never_runs_it(tmp_path):
    """A crafted run directory that names `os:system` as its encoder, with a command as its argument: loading
    refuses it in every way one can load a run, and the command never runs."""
    train_small(tmp_path)
    crafted = tmp_path / "crafted"
    shutil.copytree(tmp_path / "run", crafted)
    marker = tmp_path / "pwned"
    config = json.loads((crafted / "config.json").read_text())
    config["encoder"] = {"name": "os:system", "kwargs": {"command": f"touch {marker}"}}
    (crafted / "config.json").write_text(json.dumps(config))

    with pytest.raises(ConfigError, match="trained with your encoder os:system; hand it over"):
        load_policy(crafted)
    with pytest.raises(ConfigError, match="trained with encoder os:system, but custom_networks:SmallEncoder"):
        load_policy(crafted, encoder=SmallEncoder)
    with pytest.raises(ConfigError, match="os:system"):
        offpolicy.train(run_dir=crafted, resume=True, quiet=True)
    for args in (["eval", str(crafted), "--episodes", "1"], ["train", "--resume", str(crafted)],
                 ["eval", str(crafted), "--encoder", "custom_networks:SmallEncoder"]):
        result = subprocess.run([OFFPOLICY, *args], capture_output=True, text=True, timeout=120, env=ENV)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "os:system" in lines[0], result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("encoder, kwargs, words", [
    (not_a_module, None, "returned Tensor, not a torch.nn.Module"),
    (NoFeatures, None, "must set `features`"),
    (SmallEncoder, {"features": object()}, "encoder_kwargs must be JSON values"),
    ("custom_networks:SmallEncoder", None, "encoder must be a class or function"),
])
def test_a_bad_encoder_is_one_clear_error(tmp_path, encoder, kwargs, words):
    with pytest.raises(ConfigError, match=words):
        offpolicy.train("dqn", "CartPole-v1", run_dir=tmp_path / "run", encoder=encoder, encoder_kwargs=kwargs,
                        **SHORT)


def test_encoder_kwargs_need_an_encoder(tmp_path):
    with pytest.raises(ConfigError, match="encoder_kwargs given without encoder"):
        offpolicy.train("dqn", "CartPole-v1", run_dir=tmp_path / "run", encoder_kwargs={"features": 3}, **SHORT)


def test_the_command_line_takes_an_encoder_by_name(tmp_path):
    run_dir = tmp_path / "run"
    trained = subprocess.run(
        [OFFPOLICY, "train", "dqn", "CartPole-v1", "--encoder", "custom_networks:SmallEncoder", "--encoder-kwargs",
         "features=8", "--num-steps", "400", "--warmup-steps", "100", "--eval-interval", "400", "--quiet",
         "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=120, env=ENV)
    assert trained.returncode == 0, trained.stderr
    assert json.loads((run_dir / "config.json").read_text())["encoder"]["kwargs"] == {"features": 8}
    evaluated = subprocess.run([OFFPOLICY, "eval", str(run_dir), "--episodes", "1", "--encoder",
                                "custom_networks:SmallEncoder"], capture_output=True, text=True, timeout=120, env=ENV)
    assert evaluated.returncode == 0 and "mean return" in evaluated.stdout, evaluated.stderr
    missing = subprocess.run([OFFPOLICY, "eval", str(run_dir)], capture_output=True, text=True, timeout=120, env=ENV)
    assert missing.returncode == 2 and "--encoder custom_networks:SmallEncoder" in missing.stderr
    unknown = subprocess.run([OFFPOLICY, "eval", str(run_dir), "--encoder", "custom_networks:Nope"],
                             capture_output=True, text=True, timeout=120, env=ENV)
    assert unknown.returncode == 2 and "custom_networks has no Nope" in unknown.stderr


def test_names_match_across_a_script_run_as_main():
    assert same_encoder("__main__:Net", "train:Net") and same_encoder("train:Net", "__main__:Net")
    assert not same_encoder("a:Net", "b:Net") and not same_encoder("__main__:Net", "train:Other")


def test_an_encoder_defined_in_a_script_is_found_beside_it(tmp_path):
    """Trained by `python train.py` (recorded as `__main__:Net`), evaluated with `--encoder train:Net` from the
    script's folder: the command line finds modules in the current folder, as `python -m` does."""
    (tmp_path / "train.py").write_text(
        "import offpolicy\n"
        "from custom_networks import SmallEncoder\n"
        "class Net(SmallEncoder):\n    pass\n"
        "if __name__ == '__main__':\n"
        "    offpolicy.train('dqn', 'CartPole-v1', run_dir='run', encoder=Net, num_steps=300, warmup_steps=100,\n"
        "                    eval_interval=300, quiet=True)\n")
    trained = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120, env=ENV)
    assert trained.returncode == 0, trained.stderr
    missing = subprocess.run([OFFPOLICY, "eval", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             env=ENV)
    assert "--encoder MODULE:Net with the module that defines it" in missing.stderr
    evaluated = subprocess.run([OFFPOLICY, "eval", "run", "--episodes", "1", "--encoder", "train:Net"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=120, env=ENV)
    assert evaluated.returncode == 0, evaluated.stderr
