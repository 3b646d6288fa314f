"""Named sets of settings: tuned ones per agent and environment, and the seed framework's example.

A preset is a partial `RunConfig` as a dict; options given on the command line
(or fields given in Python) override it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable

from offpolicy.config import ConfigError

if TYPE_CHECKING:
    from offpolicy.config import RunConfig

SEED_EXAMPLE: dict[str, Any] = {
    "agent": "dqn",
    "env": "CartPole-v1",
    "num_steps": 40_000,
    "strategy": {
        "num_envs": 8,
        "autobatch_size": 8,
        "replay_buffer_size": 50_000,
        "train_interval": 8,
        "train_steps": 4,
        "train_batch_size": 128,
        "eval_interval": 4_000,
        "eval_episodes": 5,
        "warmup_steps": 0,
    },
    "hyperparameters": {"lr": 3e-4, "gamma": 0.99, "tau": 0.005, "hidden": 64, "layers": 3},
}

_CONTINUOUS = {"torch_threads": 2}
"""256-wide networks are bound by matrix work: a second thread pays off (the env is cheap)."""

_ONE_ENV_EVERY_STEP = {
    "num_envs": 1,
    "autobatch_size": 1,
    "train_interval": 1,
    "train_steps": 1,
    "eval_interval": 2_000,
    "eval_episodes": 5,
}
"""One env and one update per step: Stable-Baselines3's defaults for SAC and TD3."""

_FETCH_HER: dict[str, Any] = {
    "agent": "sac",
    "strategy": dict(_ONE_ENV_EVERY_STEP, replay_buffer_size=1_000_000, train_batch_size=256, warmup_steps=1_000,
                     her=True, her_k=4, normalize_observations=True),
    "hyperparameters": {"lr": 1e-3, "gamma": 0.95, "actor_net_arch": (64, 64), "critic_net_arch": (64, 64)},
}
"""RL-Zoo's SAC with hindsight replay for the Fetch tasks: one env, an update per step, gamma 0.95, lr 1e-3,
64x64 networks, 4 relabelled goals per goal, normalised observations."""

_CARTPOLE_SCHEDULE = {
    "num_envs": 8,
    "autobatch_size": 8,
    "replay_buffer_size": 100_000,
    "train_interval": 64,
    "train_steps": 32,
    "train_batch_size": 64,
    "eval_interval": 2_500,
    "eval_episodes": 5,
    "warmup_steps": 1_000,
}
"""Eight envs, 32 updates of 64 every 64 steps: the default run's schedule, shared by QR-DQN's."""

_LUNARLANDER_DQN = {
    "strategy": dict(_ONE_ENV_EVERY_STEP, train_interval=4, train_steps=1, replay_buffer_size=50_000,
                     train_batch_size=128, eval_interval=10_000),
    "hyperparameters": {"lr": 6.3e-4, "hidden": 256, "tau": 0.01, "exploration_end": 0.1, "exploration_decay": 4_000.0},
}
"""RL-Zoo's DQN settings for LunarLander."""

_ATARI_DQN = {
    "agent": "dqn",
    "num_steps": 10_000_000,
    "strategy": {"num_envs": 8, "autobatch_size": 8, "replay_buffer_size": 1_000_000, "train_interval": 4,
                 "train_steps": 1, "train_batch_size": 32, "warmup_steps": 80_000, "eval_interval": 250_000,
                 "eval_episodes": 5},
    "hyperparameters": {"lr": 1e-4, "gamma": 0.99, "net_arch": (512,), "target_update_interval": 250,
                        "exploration_schedule": "linear", "exploration_start": 1.0, "exploration_end": 0.01,
                        "exploration_decay": 1_000_000.0},
}
"""CleanRL's dqn_atari.py: 10M steps, a 1M buffer, Adam 1e-4, batches of 32 every 4 steps, the target copied
every 1,000 steps (250 updates), learning from 80k steps, epsilon 1 to 0.01 over the first 10%; the Nature
CNN with a 512-wide layer. Eight envs act in batches; updates per transition are CleanRL's."""

_MINATAR_DQN = {
    "agent": "dqn",
    "num_steps": 1_000_000,
    "strategy": {"num_envs": 8, "autobatch_size": 8, "replay_buffer_size": 100_000, "train_interval": 8,
                 "train_steps": 8, "train_batch_size": 32, "warmup_steps": 5_000, "eval_interval": 50_000,
                 "eval_episodes": 10},
    "hyperparameters": {"lr": 2.5e-4, "gamma": 0.99, "net_arch": (128,), "target_update_interval": 1_000,
                        "exploration_schedule": "linear", "exploration_start": 1.0, "exploration_end": 0.1,
                        "exploration_decay": 100_000.0, "optimizer": "rmsprop"},
}
"""The MinAtar paper's DQN (Young and Tian, 2019): a 100k buffer, an update of 32 per step, the target
copied every 1,000 updates, learning from 5,000 steps, epsilon 1 to 0.1 over 100k steps, one 16-filter 3x3
convolution and a 128-wide layer, the paper's centred RMSProp; and eight envs whose steps are trained on
in phases of 8 updates (the same updates per transition). Its targets are double DQN's, where the paper's
are the Nature DQN's (`double_q` False)."""

PRESETS: dict[str, dict[str, Any]] = {
    "dqn-cartpole": {
        "agent": "dqn",
        "env": "CartPole-v1",
        "num_steps": 40_000,
        "strategy": _CARTPOLE_SCHEDULE,
        # A 128-wide network at lr 1e-3 rather than RL-Zoo's 256 at 2.3e-3: as quick to solve, steadier
        # after, half the cost per update. The slow target (tau 0.01) keeps the policy once it balances;
        # the shorter exploration wins back part of the time the slower target costs.
        "hyperparameters": {
            "lr": 1e-3,
            "gamma": 0.99,
            "tau": 0.01,
            "hidden": 128,
            "layers": 3,
            "exploration_start": 0.99,
            "exploration_end": 0.04,
            "exploration_decay": 1_500.0,
        },
    },
    "qrdqn-cartpole": {
        "agent": "qrdqn",
        "env": "CartPole-v1",
        "num_steps": 40_000,
        "strategy": _CARTPOLE_SCHEDULE,
        "hyperparameters": {
            "lr": 1e-3,
            "tau": 0.02,
            "hidden": 128,
            "exploration_end": 0.04,
            "exploration_decay": 2_500.0,
            "quantiles": 10,
        },
    },
    "sac-pendulum": {
        **_CONTINUOUS,
        "agent": "sac",
        "env": "Pendulum-v1",
        "num_steps": 20_000,
        "strategy": dict(_ONE_ENV_EVERY_STEP, replay_buffer_size=1_000_000, train_batch_size=256, warmup_steps=100),
        "hyperparameters": {"lr": 1e-3},
    },
    "td3-pendulum": {
        **_CONTINUOUS,
        "agent": "td3",
        "env": "Pendulum-v1",
        "num_steps": 20_000,
        "strategy": dict(_ONE_ENV_EVERY_STEP, replay_buffer_size=200_000, train_batch_size=256, warmup_steps=100),
        "hyperparameters": {"lr": 1e-3, "gamma": 0.98},
    },
    "dqn-lunarlander": {"agent": "dqn", "env": "LunarLander-v3", "num_steps": 100_000, **_LUNARLANDER_DQN},
    "dqn-lunarlander-combined": {
        "agent": "dqn",
        "env": "LunarLander-v3",
        "num_steps": 100_000,
        "strategy": dict(_LUNARLANDER_DQN["strategy"], n_step=3, prioritized=True),
        "hyperparameters": dict(_LUNARLANDER_DQN["hyperparameters"], dueling=True),
    },
    "sac-lunarlander": {
        **_CONTINUOUS,
        "agent": "sac",
        "env": "LunarLanderContinuous-v3",
        "num_steps": 500_000,
        "strategy": dict(_ONE_ENV_EVERY_STEP, replay_buffer_size=1_000_000, train_batch_size=256,
                         warmup_steps=10_000, eval_interval=10_000),
        "hyperparameters": {"lr": 7.3e-4, "tau": 0.01},
    },
    **{
        f"sac-{name.lower()}": {
            **_CONTINUOUS,
            "agent": "sac",
            "env": f"{name}-v5",
            "num_steps": 1_000_000,
            "strategy": dict(_ONE_ENV_EVERY_STEP, replay_buffer_size=1_000_000, train_batch_size=256,
                             warmup_steps=warmup, eval_interval=10_000),
            "hyperparameters": hyperparameters,
        }
        # RL-Zoo's settings, acting at random until learning as its SB3 does; on Hopper CleanRL's (a faster
        # critic, learning from 5k steps), with which it learns twice as far in 100k steps
        for name, warmup, hyperparameters in (
            ("HalfCheetah", 10_000, {"random_steps": 10_000}),
            ("Hopper", 5_000, {"critic_lr": 1e-3, "random_steps": 5_000}),
            ("Walker2d", 10_000, {"random_steps": 10_000}),
        )
    },
    **{
        f"td3-{name.lower()}": {
            **_CONTINUOUS,
            "agent": "td3",
            "env": f"{name}-v5",
            "num_steps": 1_000_000,
            "strategy": dict(_ONE_ENV_EVERY_STEP, replay_buffer_size=1_000_000, train_batch_size=256,
                             warmup_steps=warmup, eval_interval=10_000),
            "hyperparameters": {"lr": 3e-4, "random_steps": warmup},
        }
        # CleanRL learns from 25k steps, acting at random until then; on HalfCheetah RL-Zoo's 10k gives 15k
        # more updates in a short run
        for name, warmup in (("HalfCheetah", 10_000), ("Hopper", 25_000), ("Walker2d", 25_000))
    },
    "dqn-acrobot": {
        "agent": "dqn",
        "env": "Acrobot-v1",
        "num_steps": 500_000,
        "strategy": dict(_ONE_ENV_EVERY_STEP, train_interval=10, train_steps=1, replay_buffer_size=10_000,
                         train_batch_size=128, warmup_steps=10_000, eval_interval=25_000),
        "hyperparameters": {"lr": 2.5e-4, "tau": 0.02, "hidden": 128, "exploration_start": 1.0,
                            "exploration_end": 0.05, "exploration_decay": 80_000.0},
    },
    "dqn-mountaincar": {
        "agent": "dqn",
        "env": "MountainCar-v0",
        "num_steps": 120_000,
        "strategy": dict(_ONE_ENV_EVERY_STEP, train_interval=16, train_steps=8, replay_buffer_size=10_000,
                         train_batch_size=128, warmup_steps=1_000, eval_interval=6_000, eval_episodes=10),
        # RL-Zoo's target is SB3's (the Nature DQN's), copied every 600 steps: 300 updates
        "hyperparameters": {"lr": 4e-3, "gamma": 0.98, "net_arch": (256, 256), "target_update_interval": 300,
                            "double_q": False, "exploration_schedule": "linear", "exploration_start": 1.0,
                            "exploration_end": 0.07, "exploration_decay": 24_000.0},
    },
    "sac-fetchreach": {
        **_FETCH_HER,
        "env": "FetchReach-v4",
        "num_steps": 20_000,
        "strategy": dict(_FETCH_HER["strategy"], eval_interval=2_000, eval_episodes=10),
    },
    "dqn-atari": {**_ATARI_DQN, "env": "ALE/Breakout-v5"},
    "dqn-minatar": {**_MINATAR_DQN, "env": "MinAtar/Breakout-v1"},
    "dqn-minatar-combined": {
        **_MINATAR_DQN,
        "env": "MinAtar/Breakout-v1",
        # No dueling heads: with 3-step returns they stalled on Asterix (docs/minatar.md)
        "strategy": dict(_MINATAR_DQN["strategy"], n_step=3, prioritized=True),
    },
    "seed-example": SEED_EXAMPLE,
}
"""`dqn-cartpole` is what a bare `offpolicy train` runs; `seed-example` is the seed framework's
example configuration, kept verbatim because the benchmarks compare against it."""

PRESET_DESCRIPTIONS = {
    "dqn-cartpole": "DQN on CartPole-v1, the default: the last evaluation of a 40k-step run at least 475 on 23 "
                    "of 24 seeds, the first at a median 25k steps (benchmarks/dqn_default.py)",
    "seed-example": "the seed framework's example DQN config on CartPole-v1, kept as it is for the speed "
                    "benchmarks; not tuned: final evaluation 66, 303 and 156 at 40k steps on seeds 0-2 (best "
                    "245-358; Stable-Baselines3 with these settings 153-252), where dqn-cartpole reaches 500",
    "sac-pendulum": "SAC on Pendulum-v1 (RL-Zoo settings: SB3 defaults, lr 1e-3; final evaluation -132 +/- 50 at "
                    "20k steps over 3 seeds, RL-Zoo -157 +/- 89; docs/benchmarks.md)",
    "td3-pendulum": "TD3 on Pendulum-v1 (RL-Zoo settings: lr 1e-3, gamma 0.98; final evaluation -134 +/- 49 at 20k "
                    "steps over 3 seeds, RL-Zoo -152 +/- 90; docs/benchmarks.md)",
    "dqn-lunarlander": "DQN on LunarLander-v3 (RL-Zoo settings; box2d extra; final evaluation 175 +/- 125 at 100k "
                       "steps over 3 seeds, RL-Zoo 154 +/- 79; docs/benchmarks.md)",
    "dqn-lunarlander-combined": "dqn-lunarlander with dueling heads, 3-step returns and prioritized replay (box2d "
                                "extra; final evaluation 222 +/- 37 at 100k steps over 3 seeds, docs/benchmarks.md)",
    "qrdqn-cartpole": "QR-DQN on CartPole-v1: dqn-cartpole's schedule, 10 quantiles (final evaluation 500, 410 "
                      "and 500 at 40k steps on seeds 0-2, best 500 on each; RL-Zoo 500 at 50k; docs/benchmarks.md)",
    "sac-lunarlander": "SAC on LunarLanderContinuous-v3 (RL-Zoo settings for 500k steps; box2d extra; final "
                       "evaluation 283 +/- 8 at 500k steps over 3 seeds, RL-Zoo 260 +/- 65; docs/benchmarks.md)",
    "sac-halfcheetah": "SAC on HalfCheetah-v5 (RL-Zoo settings: random actions, then learning from 10k steps; "
                       "mujoco extra; final evaluation 5,137 +/- 321 at 100k steps over 3 seeds, CleanRL about 5,500)",
    "sac-hopper": "SAC on Hopper-v5 (CleanRL settings: critic lr 1e-3, random actions until learning from 5k steps; "
                  "mujoco extra; final evaluation 1,372 +/- 540 at 100k steps over 3 seeds, CleanRL about 1,450; "
                  "RL-Zoo's settings reached 531 +/- 179)",
    "sac-walker2d": "SAC on Walker2d-v5 (RL-Zoo settings: random actions, then learning from 10k steps; mujoco "
                    "extra; final evaluation 619 +/- 163 at 100k steps over 3 seeds, CleanRL about 550)",
    "td3-halfcheetah": "TD3 on HalfCheetah-v5 (CleanRL settings, lr 3e-4, random actions and then learning from "
                       "RL-Zoo's 10k steps; mujoco extra; final evaluation 4,034 +/- 891 at 100k steps over 3 seeds, "
                       "CleanRL about 4,000)",
    "td3-hopper": "TD3 on Hopper-v5 (CleanRL settings: random actions for 25k steps, then learning; mujoco extra; "
                  "final evaluation 378 +/- 158 at 100k steps over 3 seeds, CleanRL about 280)",
    "td3-walker2d": "TD3 on Walker2d-v5 (CleanRL settings: random actions for 25k steps, then learning; mujoco extra; "
                    "final evaluation 317 +/- 127 at 100k steps over 3 seeds, CleanRL about 300)",
    "sac-fetchreach": "SAC with hindsight replay on FetchReach-v4 (RL-Zoo settings: gamma 0.95, lr 1e-3, 64x64 "
                      "networks, 4 relabelled goals per goal, normalised observations; robotics extra; every goal "
                      "of 20 fresh episodes reached after 5,000 steps, seeds 0-3)",
    "dqn-acrobot": "DQN on Acrobot-v1 (CleanRL's schedule: 10k buffer, an update every 10 steps; final evaluation "
                   "-80.7 +/- 7.5 at 500k steps over 3 seeds, CleanRL -91.5)",
    "dqn-atari": "DQN on any Atari game (ALE/...-v5, atari extra; CleanRL's dqn_atari.py settings for 10M steps; "
                 "unverified: published scores take about a day of a 2-core CPU, a GPU job)",
    "dqn-minatar": "DQN on any MinAtar game (MinAtar/...-v1, minatar extra; the MinAtar paper's settings and "
                   "RMSProp for 1M steps; seed 0 at 1M, at least the paper's DQN on all five games: Asterix 16.5 "
                   "(8-10), Breakout 13.6 (9-10), Freeway 58.8 (47), Seaquest 12.0 (1), SpaceInvaders 36.2 "
                   "(30); docs/minatar.md)",
    "dqn-minatar-combined": "dqn-minatar with 3-step returns and prioritized replay (minatar extra; not "
                            "dueling heads, which with 3-step returns stalled on Asterix; seed 0 at 1M steps: "
                            "Breakout 14.0, Freeway 59.7, Seaquest 15.2 and SpaceInvaders 111.0 beside "
                            "dqn-minatar's 13.6, 58.8, 12.0 and 36.2, but Asterix 7.6 beside 16.5, where "
                            "--n-step 1 (prioritized replay alone) reached 32.8; docs/minatar.md)",
    "dqn-mountaincar": "DQN on MountainCar-v0 (RL-Zoo settings: lr 4e-3, 8 updates every 16 steps, the target "
                       "copied every 600 steps; final evaluation -135 +/- 56 at 120k steps over 3 seeds (-200, "
                       "-105, -101), RL-Zoo -101 +/- 10; CleanRL's schedule ended at -200 on 3 seeds at 500k, "
                       "CleanRL -195; docs/benchmarks.md)",
}


FAMILY_PRESETS = {("dqn", "ALE/"): "dqn-atari", ("dqn", "MinAtar/"): "dqn-minatar"}
"""The preset for an agent on every env whose id starts with a prefix (each Atari game, each MinAtar game)."""


def same_family(env: str, other: str) -> bool:
    """Whether two env ids are games of one family (`FAMILY_PRESETS`' prefixes), whose presets serve each."""
    ids = (env.split(":", 1)[-1], other.split(":", 1)[-1])
    return any(all(name.startswith(prefix) for name in ids) for _, prefix in FAMILY_PRESETS)


def preset(name: str) -> dict[str, Any]:
    """A copy of preset `name`, safe to modify."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}")
    return copy.deepcopy(PRESETS[name])


def default_preset(agent: str, env: str) -> str | None:
    """The tuned preset for this agent and environment, if there is one."""
    for name, values in PRESETS.items():
        if name != "seed-example" and values["agent"] == agent and values["env"] == env:
            return name
    registered = env.split(":", 1)[-1]
    return next((name for (owner, prefix), name in FAMILY_PRESETS.items()
                 if owner == agent and registered.startswith(prefix)), None)


def apply_settings(values: dict[str, Any], settings: dict[str, Any], label: Callable[[str], str] = repr) -> dict[str, Any]:
    """Put each flat setting (`num_envs=8`, `lr=1e-3`, `seed=3`) where it belongs in preset-shaped `values`:
    a run field, a strategy field or a hyperparameter of the agent. A hyperparameter of another agent, or a
    name that is none of these, is an error naming it (`label` spells it: a keyword, an option)."""
    import dataclasses

    from offpolicy.agents import AGENTS
    from offpolicy.config import OffPolicyConfig, RunConfig

    agent = values["agent"]
    if agent not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}; available: {', '.join(AGENTS)}")
    run_fields = {f.name for f in dataclasses.fields(RunConfig)} - {"agent", "env", "strategy", "hyperparameters"}
    strategy_fields = {f.name for f in dataclasses.fields(OffPolicyConfig)}
    own = {f.name for f in dataclasses.fields(AGENTS[agent].config_class)}
    every_agents = {f.name for spec in AGENTS.values() for f in dataclasses.fields(spec.config_class)}
    for name, value in settings.items():
        if name in run_fields:
            values[name] = value
        elif name in strategy_fields:
            values.setdefault("strategy", {})[name] = value
        elif name in own:
            values.setdefault("hyperparameters", {})[name] = value
        elif name in every_agents:
            raise ConfigError(f"{label(name)} does not apply to agent {agent}")
        else:
            raise ConfigError(f"unknown setting {label(name)}: not a run, strategy or {agent} field")
    return values


def preset_config(agent: str = "dqn", env: str = "CartPole-v1", **settings: Any) -> "RunConfig":
    """The config `offpolicy train AGENT ENV` runs: the tuned preset for the pair (or the agent's defaults),
    then `settings` (any run, strategy or hyperparameter field by name, as the command line's options)."""
    from offpolicy.config import RunConfig

    return RunConfig(**apply_settings(pair_values(agent, env), settings))


def pair_values(agent: str, env: str) -> dict[str, Any]:
    """The tuned preset's settings for this agent and env (a copy), or none beyond the pair itself."""
    name = default_preset(agent, env)
    values = preset(name) if name else {"strategy": {}, "hyperparameters": {}}
    values["agent"], values["env"] = agent, env
    return values
