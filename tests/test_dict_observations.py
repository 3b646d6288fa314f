"""Dict and Tuple observations: packed into one record per step as they leave the env, carried by every
backend, unpacked key by key inside the network, saved and loaded with their spaces, and learned from."""

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from fake_envs import DictCountingEnv
from offpolicy import RunConfig, load_policy, train
from offpolicy.agents import make_learner
from offpolicy.agents.networks import DictEncoder, FlattenEncoder, make_encoder
from offpolicy.envs import EnvError
from offpolicy.events import StepsCollected
from offpolicy.observations import ObservationLayout
from offpolicy.spaces import space_from_json, space_to_json

SMALL = {"num_envs": 4, "autobatch_size": 4, "eval_interval": 500, "eval_episodes": 2, "train_interval": 4,
         "train_steps": 2, "replay_buffer_size": 10_000, "warmup_steps": 200}
SPACES = gym.spaces


def test_records_hold_every_leaf_in_its_own_dtype():
    env = DictCountingEnv(tag=3.0)
    layout = ObservationLayout(env.observation_space)
    env.reset()
    env.step(0)
    env.step(0)
    record = layout.pack(env._obs())
    assert layout.bytes and record.dtype == np.uint8 and record.shape == layout.shape
    leaves = layout.unpack(record[None])
    assert leaves["frame"].dtype == np.uint8 and (leaves["frame"] == 2).all() and leaves["frame"].shape == (1, 6, 6, 1)
    assert leaves["state"].dtype == np.float32 and leaves["state"].tolist() == [[2.0, 3.0]]
    assert leaves["phase"].tolist() == [2]
    assert leaves["extra/0"].tolist() == [[1, 0, 0]] and leaves["extra/1"].tolist() == [[-2.0]]
    # each leaf sits at a multiple of its item size, as C lays out a struct
    assert all(leaf.start % leaf.dtype.itemsize == 0 for leaf in layout.leaves)
    assert layout.shape[0] == 36 + 4 + 8 + 8 + 3 + 1 + 4  # frame, state, padding, phase, extra/0, padding, extra/1


def test_records_of_one_dtype_are_the_concatenation_of_the_leaves():
    space = SPACES.Dict({"a": SPACES.Box(-1, 1, (2,), np.float64), "b": SPACES.Box(-1, 1, (3,), np.float32)})
    layout = ObservationLayout(space)
    record = layout.pack({"a": np.array([0.5, -0.5]), "b": np.array([1, 2, 3], np.float32)})
    assert not layout.bytes and record.dtype == np.float32 and record.tolist() == [0.5, -0.5, 1, 2, 3]
    # ...so the network is the plain MLP over the record: the DQN fast path and SAC's networks apply unchanged
    assert type(make_encoder(space, "DQN")) is FlattenEncoder


def test_the_network_unpacks_records_exactly_as_numpy_does():
    env = DictCountingEnv(tag=7.0)
    layout = ObservationLayout(env.observation_space)
    records = []
    env.reset()
    for _ in range(4):
        records.append(layout.pack(env._obs()))
        env.step(0)
    records = np.stack(records)
    encoder = make_encoder(env.observation_space, "DQN")
    assert isinstance(encoder, DictEncoder)
    by_torch = encoder.unpack(torch.from_numpy(records))
    for leaf, tensor in zip(layout.leaves, by_torch):
        np.testing.assert_array_equal(tensor.numpy(), layout.unpack(records)[leaf.name])
    assert encoder(torch.from_numpy(records)).shape == (4, encoder.features)


@pytest.mark.parametrize(
    "space, observation, words",
    [
        (SPACES.Dict({"a": SPACES.Box(-1, 1, (2,))}), {"b": np.zeros(2)}, "without key 'a'"),
        (SPACES.Dict({"a": SPACES.Box(-1, 1, (2,))}), {"a": np.zeros(3)}, "'a' of shape (3,)"),
        (SPACES.Dict({"a": SPACES.Tuple((SPACES.Discrete(2),))}), {"a": ()}, "without key 'a/0'"),
    ],
)
def test_an_observation_that_does_not_fit_its_space_names_the_key(space, observation, words):
    with pytest.raises(ValueError) as error:
        ObservationLayout(space).pack(observation)
    assert words in str(error.value)


def test_a_leaf_that_cannot_be_stored_is_named_with_its_path():
    space = SPACES.Dict({"ok": SPACES.Box(-1, 1, (2,)), "outer": SPACES.Dict({"text": SPACES.Text(5)})})
    with pytest.raises(EnvError, match="'outer/text' is a Text space"):
        make_learner("dqn", space, SPACES.Discrete(2), {}, "cpu", 0)


def test_network_cnn_needs_an_image_among_the_keys():
    space = SPACES.Dict({"a": SPACES.Box(-1, 1, (2,)), "b": SPACES.Discrete(3)})
    with pytest.raises(EnvError, match="image among the observation's keys"):
        make_encoder(space, "DQN", "cnn")


def test_dict_and_tuple_spaces_round_trip_through_json_in_order():
    space = SPACES.Dict({"z": SPACES.Box(0, 255, (6, 6, 1), np.uint8),
                         "a": SPACES.Tuple((SPACES.Discrete(3, start=1), SPACES.MultiBinary(2)))})
    space = SPACES.Dict(dict(space.spaces))  # Gymnasium sorts a plain dict's keys: "a" before "z"
    again = space_from_json(json.loads(json.dumps(space_to_json(space))))
    assert again == space and list(again.spaces) == list(space.spaces)


def _check_steps(batches, space):
    """Every stored step unpacks to what the env returned: all keys agree on the step, next = step + 1."""
    layout = ObservationLayout(space)
    for batch in batches:
        now, after = layout.unpack(batch.observations), layout.unpack(batch.next_observations)
        for leaves in (now, after):
            steps = leaves["state"][:, 0]
            assert (leaves["frame"] == steps[:, None, None, None]).all()
            assert (leaves["phase"] == steps % 3).all()
            assert (leaves["extra/0"][:, 2] == steps % 2).all() and (leaves["extra/1"][:, 0] == -steps).all()
        assert (after["state"][:, 0] == now["state"][:, 0] + 1).all()
        assert (now["state"][:, 1] == after["state"][:, 1]).all()


@pytest.mark.parametrize("backend", ["inprocess", "threads", "processes"])
def test_every_backend_carries_dict_observations_intact(backend):
    batches = []
    config = RunConfig(agent="dqn", env="fake_envs:DictCounting-v0", num_steps=600,
                       strategy=dict(SMALL, backend=backend))
    result = train(config, save=False, quiet=True,
                   callbacks=[lambda event, stats: batches.append(event.steps)
                              if isinstance(event, StepsCollected) else None])
    assert result.stats.step == 600 and result.stats.train_steps > 0
    assert sum(len(batch) for batch in batches) == 600
    _check_steps(batches, DictCountingEnv().observation_space)


def test_a_dict_policy_saved_and_loaded_in_a_fresh_process_predicts_the_same(tmp_path):
    config = RunConfig(agent="sac", env="registered_envs:SplitPendulum-v0", env_kwargs={"frame": True},
                       num_steps=400, strategy=dict(SMALL, warmup_steps=100, eval_interval=400))
    result = train(config, save=False, quiet=True)
    result.save(tmp_path / "policy")
    env = gym.make("Pendulum-v1")
    from registered_envs import SplitObservation

    env = SplitObservation(env, frame=True)
    observations = [env.reset(seed=seed)[0] for seed in range(3)]
    expected = [result.policy.predict(observation).tolist() for observation in observations]
    script = (
        "import json, sys, numpy as np\n"
        "from offpolicy import load_policy\n"
        f"policy = load_policy({str(tmp_path / 'policy')!r}).policy\n"
        "observations = json.loads(sys.stdin.read())\n"
        "print(json.dumps([policy.predict({k: np.array(v, dtype=np.uint8 if k == 'frame' else np.float32)"
        " for k, v in o.items()}).tolist() for o in observations]))\n"
    )
    sent = json.dumps([{key: value.tolist() for key, value in o.items()} for o in observations])
    tests = Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", script], input=sent, capture_output=True, text=True, check=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tests)})
    assert json.loads(done.stdout) == expected


def test_a_run_with_dict_observations_resumes(tmp_path):
    config = RunConfig(agent="dqn", env="fake_envs:DictCounting-v0", num_steps=400,
                       strategy=dict(SMALL, eval_interval=200))
    train(config, run_dir=tmp_path / "run", quiet=True)
    longer = RunConfig(**dict(config.to_dict(), num_steps=800))
    result = train(longer, run_dir=tmp_path / "run", resume=True, quiet=True)
    assert result.stats.step == 800
    loaded = load_policy(tmp_path / "run", checkpoint="last")
    assert loaded.step == 800
    assert loaded.policy.predict(DictCountingEnv().reset()[0]) in (0, 1)


def test_split_keys_learn_exactly_as_the_concatenated_observation():
    """A Dict of float keys is stored as their concatenation, so DQN on CartPole split into two keys takes
    the same steps and updates as on CartPole itself, to the last bit."""
    def run(env, env_kwargs):
        config = RunConfig(agent="dqn", env=env, env_kwargs=env_kwargs, num_steps=2_000, seed=3, strategy=SMALL)
        result = train(config, save=False, quiet=True)
        return result.stats.last_eval_return, result.policy.state()

    split_return, split_state = run("registered_envs:SplitCartPole-v0", {})
    plain_return, plain_state = run("CartPole-v1", {})
    assert split_return == plain_return
    assert all(torch.equal(split_state[name], plain_state[name]) for name in plain_state)


def test_a_tuple_observation_env_from_gymnasium_trains():
    """Blackjack's observation is a Tuple of three Discretes: one-hot encoded each, joined."""
    config = RunConfig(agent="dqn", env="Blackjack-v1", num_steps=600, strategy=SMALL)
    result = train(config, save=False, quiet=True)
    assert result.stats.step == 600 and result.stats.train_steps > 0
    assert result.policy.predict((14, 10, 0)) in (0, 1)
