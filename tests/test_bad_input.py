"""The bad-input catalogue: every case ends with exit code 2 and one line naming the problem, no traceback.

`docs/errors.md` shows the same cases with their messages; a test keeps the two in step.
"""

import json
import shutil
from pathlib import Path

import pytest
from custom_networks import SmallEncoder

from offpolicy import OffPolicyConfig, RunConfig, train
from offpolicy.cli import EXIT_ERROR, main

DOCS = Path(__file__).parent.parent / "docs" / "errors.md"

# (case, command-line arguments after `offpolicy`, words the message must contain)
CASES = [
    ("num_envs below 1", ["train", "--num-envs", "0"], "num_envs must be at least 1, got 0"),
    ("autobatch_size below 1", ["train", "--autobatch-size", "0"], "autobatch_size must be at least 1, got 0"),
    ("autobatch_size above num_envs", ["train", "--num-envs", "4", "--autobatch-size", "5"],
     "autobatch_size must be between 1 and num_envs (4), got 5"),
    ("replay_buffer_size below 1", ["train", "--replay-buffer-size", "0"], "replay_buffer_size must be at least 1"),
    ("train_interval below 1", ["train", "--train-interval", "0"], "train_interval must be at least 1, got 0"),
    ("train_steps below 1", ["train", "--train-steps", "0"], "train_steps must be at least 1, got 0"),
    ("eval_interval below 1", ["train", "--eval-interval", "0"], "eval_interval must be at least 1, got 0"),
    ("eval_episodes below 1", ["train", "--eval-episodes", "0"], "eval_episodes must be at least 1, got 0"),
    ("train_batch_size below 1", ["train", "--train-batch-size", "0"], "train_batch_size must be at least 1"),
    ("batch larger than the buffer", ["train", "--train-batch-size", "64", "--replay-buffer-size", "32"],
     "train_batch_size (64) must not exceed replay_buffer_size (32)"),
    ("negative warmup_steps", ["train", "--warmup-steps", "-1"], "warmup_steps must be 0 or more, got -1"),
    ("unknown backend", ["train", "--backend", "gpu"], "backend must be one of inprocess, threads, processes"),
    ("n_step below 1", ["train", "--n-step", "0"], "n_step must be at least 1, got 0"),
    ("priority_alpha above 1", ["train", "--prioritized", "--priority-alpha", "1.5"],
     "priority_alpha and priority_beta must be between 0 and 1, got 1.5 and 0.4"),
    ("priority_epsilon of 0", ["train", "--prioritized", "--priority-epsilon", "0"],
     "priority_epsilon must be positive, got 0.0"),
    ("num_steps below 1", ["train", "--num-steps", "0"], "num_steps must be a positive integer, got 0"),
    ("negative seed", ["train", "--seed", "-1"], "seed must be a non-negative integer, got -1"),
    ("torch_threads below 1", ["train", "--torch-threads", "0"], "torch_threads must be a positive integer"),
    ("keep_checkpoints below 1", ["train", "--keep-checkpoints", "0"], "keep_checkpoints must be a positive integer"),
    ("negative env_timeout", ["train", "--env-timeout", "-1"], "env_timeout must be a number of seconds, 0 or more"),
    ("negative ray_actors", ["train", "--ray-actors", "-1"], "ray_actors must be 0 (one per CPU) or more, got -1"),
    ("negative envs_per_actor", ["train", "--backend", "ray", "--envs-per-actor", "-1"], "envs_per_actor must be 0 (spread evenly) or more, got -1"),
    ("Ray option without the ray backend", ["train", "--ray-actors", "2"], "ray_actors applies to the ray backend only, but backend is 'inprocess': add --backend ray (or drop the Ray options)"),
    ("Ray fleet and num_envs disagree", ["train", "--backend", "ray", "--ray-actors", "2", "--envs-per-actor", "3", "--num-envs", "8"], "ray_actors 2 x envs_per_actor 3 = 6 envs, but num_envs is 8: make num_envs 6 (leave out --num-envs) or give only one of the two"),
    ("envs_per_actor above num_envs", ["train", "--backend", "ray", "--envs-per-actor", "16"], "envs_per_actor (16) must not exceed num_envs (8): raise num_envs or lower envs_per_actor"),
    ("unknown on_env_error", ["train", "--on-env-error", "retry"], "on_env_error must be one of stop, restart, got 'retry'"),
    ("not a number", ["train", "--num-envs", "2.5"], "argument --num-envs: invalid int value: '2.5'"),
    ("unknown option", ["train", "--num-env", "4", "dqn"], "unrecognized arguments: --num-env (did you mean --num-envs? see: offpolicy --help)"),
    ("lr not positive", ["train", "--lr", "0"], "lr must be positive, got 0.0"),
    ("lr not a number", ["train", "--lr", "nan"], "lr must be positive, got nan"),
    ("gamma above 1", ["train", "--gamma", "1.5"], "gamma must be between 0 and 1, got 1.5"),
    ("tau of 0", ["train", "--tau", "0"], "tau must be in (0, 1], got 0.0"),
    ("hidden below 1", ["train", "--hidden", "0"], "hidden must be at least 1, got 0"),
    ("layers below 2", ["train", "--layers", "1"], "layers must be at least 2, got 1"),
    ("exploration rate above 1", ["train", "--exploration-start", "2"], "exploration_start must be between 0 and 1"),
    ("exploration_decay not positive", ["train", "--exploration-decay", "0"], "exploration_decay must be positive"),
    ("unknown exploration schedule", ["train", "--exploration-schedule", "cosine"],
     "exploration_schedule must be one of exponential, linear, got 'cosine'"),
    ("negative target_update_interval", ["train", "--target-update-interval", "-1"],
     "target_update_interval must be 0 (soft updates) or more, got -1"),
    ("max_grad_norm not positive", ["train", "--max-grad-norm", "0"], "max_grad_norm must be positive, got 0.0"),
    ("TD3 policy_delay below 1", ["train", "td3", "Pendulum-v1", "--policy-delay", "0"],
     "policy_delay must be at least 1, got 0"),
    ("SAC entropy coefficient negative", ["train", "sac", "Pendulum-v1", "--entropy-coef", "-1"],
     "entropy_coef must be 0 (automatic) or positive, got -1.0"),
    ("negative random_steps", ["train", "td3", "Pendulum-v1", "--random-steps", "-1"],
     "random_steps must be 0 or more, got -1"),
    ("option of another agent", ["train", "dqn", "CartPole-v1", "--policy-delay", "3"],
     "option --policy-delay does not apply to agent dqn"),
    ("dueling heads for SAC", ["train", "sac", "Pendulum-v1", "--dueling"], "option --dueling does not apply to agent sac"),
    ("QR-DQN quantiles below 1", ["train", "qrdqn", "CartPole-v1", "--quantiles", "0"],
     "quantiles must be a whole number of at least 1, got 0"),
    ("unknown env id", ["train", "dqn", "CartPole-v9"], "unknown environment id 'CartPole-v9' (did you mean CartPole-v0"),
    ("unknown agent", ["train", "sarsa"], "unknown agent 'sarsa'; available: dqn, qrdqn, sac, td3"),
    ("unknown command", ["trian"], "argument command: invalid choice: 'trian'"),
    ("DQN on continuous actions", ["train", "dqn", "Pendulum-v1"], "DQN needs a Discrete action space, got Box"),
    ("env argument without a value", ["train", "dqn", "FrozenLake-v1", "--env-kwargs", "is_slippery"],
     "argument --env-kwargs: expected KEY=VALUE, got 'is_slippery'"),
    ("env argument the env does not take", ["train", "dqn", "FrozenLake-v1", "--env-kwargs", "slippery=false"],
     "cannot make environment 'FrozenLake-v1' with arguments {'slippery': False}"),
    ("env module that cannot be imported", ["train", "dqn", "my_envs:Maze-v0"],
     "cannot import 'my_envs', which should register environment 'my_envs:Maze-v0': No module named 'my_envs'"),
    ("env package that cannot be imported", ["train", "--env-package", "my_envs"],
     "cannot import 'my_envs', which should register environment 'CartPole-v1'"),
    ("convolutions without images", ["train", "dqn", "CartPole-v1", "--network", "cnn"],
     "network cnn needs image observations (a 3-dimensional Box of uint8 in [0, 255] or of bool), got Box("),
    ("unknown network", ["train", "--network", "resnet"], "network must be one of auto, mlp, cnn, got 'resnet'"),
    ("unknown activation", ["train", "--activation", "swish"], "activation must be one of relu, tanh, elu, gelu, got 'swish'"),
    ("network widths that are not numbers", ["train", "--net-arch", "64,x"],
     "argument --net-arch: expected widths separated by commas, e.g. 256,256, got '64,x'"),
    ("a network width of zero", ["train", "sac", "Pendulum-v1", "--critic-net-arch", "64,0"],
     "critic_net_arch must list whole numbers of at least 1, got [64, 0]"),
    ("env id registered nowhere", ["train", "dqn", "Maze-v0"],
     "unknown environment id 'Maze-v0'; an env of your own: --env-package PACKAGE or MODULE:ENV_ID"),
    ("SAC on discrete actions", ["train", "sac", "CartPole-v1"], "SAC needs a bounded Box action space, got Discrete(2)"),
    ("unknown device", ["train", "--device", "banana"], "device 'banana' is not a torch device"),
    ("absent GPU", ["train", "--device", "cuda:7"], "device is 'cuda:7', but"),
    ("unknown preset", ["train", "--preset", "nope"], "unknown preset 'nope'"),
    ("preset and config file together", ["train", "--preset", "dqn-cartpole", "--config", "{tmp}/c.json"],
     "give either --config or --preset, not both"),
    ("preset for another env", ["train", "dqn", "Acrobot-v1", "--preset", "dqn-cartpole"],
     "preset 'dqn-cartpole' is for env CartPole-v1, not Acrobot-v1"),
    ("missing config file", ["train", "--config", "{tmp}/missing.json"], "cannot read config file"),
    ("config file that is not valid", ["train", "--config", "{tmp}/broken.json"], "is not valid"),
    ("config file with an unknown key", ["train", "--config", "{tmp}/unknown_key.json"], "unknown key 'learning_rate'"),
    ("config file that is not a mapping", ["train", "--config", "{tmp}/list.json"], "must hold a mapping of settings"),
    ("run directory is a file", ["train", "--run-dir", "{tmp}/a_file"], "is a file; pick another --run-dir"),
    ("run directory cannot be created", ["train", "--run-dir", "{tmp}/a_file/run"], "cannot create run directory"),
    ("run directory already used", ["train", "--run-dir", "{tmp}/finished"], "already holds a run; continue it with --resume"),
    ("resume of a directory that is no run", ["train", "--resume", "{tmp}/nothing"], "is not a run directory: it has no config.json"),
    ("resume of a run with no checkpoint", ["train", "--resume", "{tmp}/no_checkpoint"], "has no checkpoint to resume from"),
    ("resume with a corrupted index", ["train", "--resume", "{tmp}/corrupt_index"], "checkpoint index"),
    ("frame skip given to an Atari game", ["train", "dqn", "ALE/Pong-v5", "--env-kwargs", "frameskip=4"],
     "ALE/Pong-v5 skips 4 frames in its preprocessing; drop frameskip from its arguments"),
    ("resume with corrupted weights", ["train", "--resume", "{tmp}/corrupt_weights"], "cannot read checkpoint"),
    ("resume with a corrupted config", ["train", "--resume", "{tmp}/corrupt_config"], "config.json is not valid JSON"),
    ("resume with changed settings", ["train", "--resume", "{tmp}/finished", "--lr", "0.1"],
     "--resume continues with the run's stored config; --lr cannot change"),
    ("normalising observations that are not floats", ["train", "dqn", "FrozenLake-v1", "--normalize-observations"],
     "normalize_observations needs float observations (a Box of floats, or a Dict or Tuple of them), got "
     "Discrete(16); images are scaled inside the network and Discrete cells one-hot encoded already"),
    ("hindsight replay on an env without goals", ["train", "dqn", "CartPole-v1", "--her"],
     "her needs a Dict observation with keys achieved_goal and desired_goal (Gymnasium-Robotics' GoalEnv "
     "convention), got Box("),
    ("hindsight replay with n-step returns", ["train", "--her", "--n-step", "3"],
     "her replays one-step transitions uniformly: use it without n_step > 1 and prioritized"),
    ("encoder not named MODULE:NAME", ["train", "--encoder", "MyEncoder"],
     "--encoder takes MODULE:NAME (e.g. mypkg.nets:MyEncoder), got 'MyEncoder'"),
    ("encoder module that cannot be imported", ["train", "--encoder", "my_nets:MyEncoder"],
     "--encoder my_nets:MyEncoder: cannot import my_nets (No module named 'my_nets')"),
    ("encoder arguments without an encoder", ["train", "--encoder-kwargs", "features=64"],
     "encoder_kwargs given without encoder: pass the encoder they are for"),
    ("resume without the run's own encoder", ["train", "--resume", "{tmp}/own_encoder"],
     "was trained with your encoder custom_networks:SmallEncoder; hand it over to load the run (in Python "
     "encoder=SmallEncoder; on the command line --encoder custom_networks:SmallEncoder): offpolicy never imports a "
     "name read from a file"),
    ("resume with an encoder the run did not use", ["train", "--resume", "{tmp}/finished", "--encoder",
                                                    "custom_networks:SmallEncoder"],
     "was trained with the built-in encoder, not custom_networks:SmallEncoder: leave out encoder"),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Files and run directories the cases point at, one finished tiny run among them."""
    tmp = tmp_path_factory.mktemp("bad_input")
    (tmp / "c.json").write_text("{}")
    (tmp / "broken.json").write_text("{not json")
    (tmp / "unknown_key.json").write_text(json.dumps({"agent": "dqn", "learning_rate": 0.1}))
    (tmp / "list.json").write_text("[1, 2]")
    (tmp / "a_file").write_text("x")
    config = RunConfig(num_steps=64, strategy=OffPolicyConfig(num_envs=2, autobatch_size=2, train_interval=8,
                                                              replay_buffer_size=64, eval_interval=32))
    train(config, run_dir=tmp / "finished", quiet=True)
    train(config, run_dir=tmp / "own_encoder", quiet=True, encoder=SmallEncoder)
    for name in ("no_checkpoint", "corrupt_index", "corrupt_weights", "corrupt_config"):
        shutil.copytree(tmp / "finished", tmp / name)
    shutil.rmtree(tmp / "no_checkpoint" / "checkpoints")
    (tmp / "corrupt_index" / "checkpoints" / "index.json").write_text("{")
    (tmp / "corrupt_weights" / "checkpoints" / "step_000000064" / "learner.safetensors").write_bytes(b"\0" * 100)
    (tmp / "corrupt_config" / "config.json").write_text("{")
    return tmp


@pytest.mark.parametrize("case, args, words", CASES, ids=[case for case, _, _ in CASES])
def test_bad_input_gives_one_clear_line(workspace, capsys, case, args, words):
    args = [arg.replace("{tmp}", str(workspace)) for arg in args]
    if "--run-dir" not in args and "--resume" not in args and args[0] == "train":
        args += ["--run-dir", str(workspace / "unused")]
    assert main(args) == EXIT_ERROR
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("offpolicy: error: ") and words in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert not (workspace / "unused").exists()


def test_catalogue_is_documented():
    text = DOCS.read_text()
    assert len(CASES) >= 30
    for case, _, words in CASES:
        assert case in text and words.replace("|", "\\|") in text, case
