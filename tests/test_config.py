import dataclasses

import pytest

from offpolicy.config import ConfigError, OffPolicyConfig, RunConfig


def test_defaults_are_the_seeds():
    assert dataclasses.asdict(OffPolicyConfig()) == {
        "num_envs": 1,
        "autobatch_size": 1,
        "replay_buffer_size": 1024,
        "train_interval": 1,
        "train_steps": 1,
        "eval_interval": 10_000,
        "eval_episodes": 1,
        "train_batch_size": 32,
        "warmup_steps": 0,
        "backend": "inprocess",
        "n_step": 1,  # replay: one-step returns, uniform sampling
        "prioritized": False,
        "priority_alpha": 0.6,
        "priority_beta": 0.4,
        "priority_epsilon": 1e-6,
        "her": False,  # no hindsight replay
        "her_k": 4,
        "normalize_observations": False,  # no normalisation
        "normalize_rewards": False,
    }


@pytest.mark.parametrize(
    "values, field",
    [
        ({"num_envs": 0}, "num_envs"),
        ({"autobatch_size": 0}, "autobatch_size"),
        ({"num_envs": 8, "autobatch_size": 9}, "autobatch_size"),
        ({"replay_buffer_size": 0}, "replay_buffer_size"),
        ({"train_interval": 0}, "train_interval"),
        ({"train_steps": -1}, "train_steps"),
        ({"eval_interval": 0}, "eval_interval"),
        ({"eval_episodes": 0}, "eval_episodes"),
        ({"train_batch_size": 0}, "train_batch_size"),
        ({"train_batch_size": 2048}, "train_batch_size"),
        ({"warmup_steps": -5}, "warmup_steps"),
        ({"num_envs": 2.5}, "num_envs"),
        ({"backend": "gpu-magic"}, "backend"),
        ({"n_step": 0}, "n_step"),
        ({"prioritized": 1}, "prioritized"),
        ({"priority_alpha": 1.5}, "priority_alpha"),
        ({"priority_beta": -0.1}, "priority_beta"),
        ({"priority_epsilon": 0.0}, "priority_epsilon"),
        ({"priority_alpha": "high"}, "priority_alpha"),
    ],
)
def test_each_invalid_field_is_named(values, field):
    with pytest.raises(ConfigError, match=field):
        OffPolicyConfig(**values)


def test_round_trip_and_unknown_keys():
    config = RunConfig(strategy=OffPolicyConfig(num_envs=4, autobatch_size=2), hyperparameters={"lr": 0.1})
    assert RunConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="num_env"):
        OffPolicyConfig.from_dict({"num_env": 3})
    with pytest.raises(ConfigError, match="num_steps"):
        RunConfig(num_steps=0)


def test_the_short_call_resolves_what_the_command_line_does():
    """`train("dqn", "CartPole-v1", **settings)` starts from the same tuned preset as `offpolicy train dqn
    CartPole-v1` and puts each setting where the matching option goes."""
    from offpolicy.cli import build_parser, resolve_config
    from offpolicy.presets import preset_config

    args = build_parser().parse_args(["train", "dqn", "CartPole-v1", "--num-steps", "1000", "--lr", "0.002",
                                      "--num-envs", "4", "--autobatch-size", "4", "--n-step", "3", "--seed", "5"])
    short = preset_config("dqn", "CartPole-v1", num_steps=1_000, lr=0.002, num_envs=4, autobatch_size=4, n_step=3,
                          seed=5)
    assert short == resolve_config(args)
    assert short.strategy.train_interval == 64 and short.hyperparameters["hidden"] == 128  # dqn-cartpole's


@pytest.mark.parametrize("call, words", [
    (lambda train: train("dqn", "CartPole-v1", policy_delay=2), "'policy_delay' does not apply to agent dqn"),
    (lambda train: train("dqn", "CartPole-v1", learning_rate=1e-3), "unknown setting 'learning_rate'"),
    (lambda train: train("sarsa", "CartPole-v1"), "unknown agent 'sarsa'"),
    (lambda train: train(RunConfig(), lr=1e-3), "settings given beside a RunConfig (lr)"),
])
def test_the_short_call_names_what_it_cannot_place(call, words):
    from offpolicy import train

    with pytest.raises(ConfigError) as raised:
        call(train)
    assert words in str(raised.value)
