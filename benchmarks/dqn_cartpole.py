"""dqn_cartpole: DQN on CartPole-v1 with the seed framework's example config, three ways, in one run.

Systems, each in a fresh process, alternated seed by seed:
- offpolicy: `offpolicy train --preset seed-example` (in-process backend, 1 torch thread);
- sb3: Stable-Baselines3's DQN with the same hyperparameters (1 torch thread, its fastest here);
- reference: a minimal single-file loop written below, no framework, the same computation
  (double-DQN target, Huber loss, foreach clipping, fused Adam, soft target update per
  optimisation step), thread count and denormal flushing as ours.

Same work for all: 40,000 env steps over 8 envs, a training phase of 4 updates of batch 128
after every 8 steps once 128 transitions are stored (19,940 updates). In-loop evaluation is
off for every system; each trained policy is then evaluated on the same 10 deterministic
episodes. Prints wall-clock (training only), env steps/s, updates/s, final return, medians
over seeds, and the ratios against offpolicy.

    python benchmarks/dqn_cartpole.py [--seeds 0 1 2]      # needs: pip install -e .[bench]

Known difference: SB3's DQN is not double-DQN and updates its target once per vector step,
so its tau is set to 1 - (1 - 0.005)^4 to move the target as far per phase as ours. SB3 runs
as it ships, with denormal floats computed in full (offpolicy flushes them while training).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import child_options, profile_run, run_alternating, run_child
from _common import evaluate as _evaluate

from offpolicy.presets import preset

SEED_EXAMPLE = preset("seed-example")
NUM_STEPS = SEED_EXAMPLE["num_steps"]
NUM_ENVS = SEED_EXAMPLE["strategy"]["num_envs"]
BATCH = SEED_EXAMPLE["strategy"]["train_batch_size"]
CAPACITY = SEED_EXAMPLE["strategy"]["replay_buffer_size"]
UPDATES_PER_PHASE = SEED_EXAMPLE["strategy"]["train_steps"]
LR, GAMMA, TAU, HIDDEN = (SEED_EXAMPLE["hyperparameters"][key] for key in ("lr", "gamma", "tau", "hidden"))
EVAL_EPISODES = 10


def evaluate(act) -> float:
    return _evaluate("CartPole-v1", lambda obs: int(act(obs)), EVAL_EPISODES)


def run_offpolicy(seed: int) -> dict:
    import offpolicy

    values = preset("seed-example")
    values["strategy"]["eval_interval"] = NUM_STEPS * 10  # in-loop evaluation off, as for the others
    config = offpolicy.RunConfig(**values, seed=seed)
    start = time.perf_counter()
    result = offpolicy.train(config, save=False, quiet=True)
    wall = time.perf_counter() - start
    return {"wall": wall, "updates": result.stats.train_steps, "final_return": evaluate(result.policy.predict)}


def run_sb3(seed: int) -> dict:
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=seed)
    model = DQN(
        "MlpPolicy",
        env,
        learning_rate=LR,
        buffer_size=CAPACITY,
        learning_starts=BATCH,
        batch_size=BATCH,
        tau=1 - (1 - TAU) ** UPDATES_PER_PHASE,
        gamma=GAMMA,
        train_freq=1,
        gradient_steps=UPDATES_PER_PHASE,
        target_update_interval=1,
        exploration_initial_eps=0.99,
        exploration_final_eps=0.05,
        exploration_fraction=0.3,
        max_grad_norm=10,
        policy_kwargs={"net_arch": [HIDDEN, HIDDEN]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(NUM_STEPS)
    wall = time.perf_counter() - start
    updates = model._n_updates
    return {"wall": wall, "updates": updates, "final_return": evaluate(lambda obs: model.predict(obs, deterministic=True)[0])}


def run_reference(seed: int) -> dict:
    """The minimal loop: lists of envs, preallocated tensors, the same update as offpolicy's DQN."""
    import copy
    import math

    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as offpolicy.train does: the same arithmetic on both sides
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs = [gym.make("CartPole-v1") for _ in range(NUM_ENVS)]
    obs = np.stack([env.reset(seed=seed * 100 + i)[0] for i, env in enumerate(envs)])
    q = nn.Sequential(nn.Linear(4, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 2))
    target = copy.deepcopy(q).requires_grad_(False)
    params, target_params = list(q.parameters()), list(target.parameters())
    optimizer = torch.optim.Adam(params, lr=LR, fused=True)
    capacity = CAPACITY
    b_obs = torch.zeros(capacity, 4)
    b_next = torch.zeros(capacity, 4)
    b_act = torch.zeros(capacity, dtype=torch.int64)
    b_rew = torch.zeros(capacity)
    b_term = torch.zeros(capacity)
    size = position = updates = 0

    start = time.perf_counter()
    for step in range(0, NUM_STEPS, NUM_ENVS):
        epsilon = 0.05 + 0.94 * math.exp(-step / 6000)
        with torch.no_grad():
            greedy = q(torch.from_numpy(obs)).argmax(1).numpy()
        actions = np.where(rng.random(NUM_ENVS) < epsilon, rng.integers(2, size=NUM_ENVS), greedy)
        next_obs = np.empty_like(obs)
        rewards = np.empty(NUM_ENVS, np.float32)
        terminals = np.empty(NUM_ENVS, np.float32)
        final = np.empty_like(obs)
        for i, env in enumerate(envs):
            o, r, term, trunc, _ = env.step(int(actions[i]))
            final[i], rewards[i], terminals[i] = o, r, term
            next_obs[i] = env.reset()[0] if term or trunc else o
        index = torch.arange(position, position + NUM_ENVS) % capacity
        b_obs[index] = torch.from_numpy(obs)
        b_next[index] = torch.from_numpy(final)
        b_act[index] = torch.from_numpy(actions)
        b_rew[index] = torch.from_numpy(rewards)
        b_term[index] = torch.from_numpy(terminals)
        position = (position + NUM_ENVS) % capacity
        size = min(size + NUM_ENVS, capacity)
        obs = next_obs
        if size < BATCH:
            continue
        for _ in range(UPDATES_PER_PHASE):
            i = torch.randint(size, (BATCH,))
            o, n, a, r, d = b_obs[i], b_next[i], b_act[i], b_rew[i], b_term[i]
            with torch.no_grad():
                next_a = q(n).argmax(1, keepdim=True)
                y = r + GAMMA * (1 - d) * target(n).gather(1, next_a).squeeze(1)
            loss = F.smooth_l1_loss(q(o).gather(1, a.view(-1, 1)).squeeze(1), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 10.0, foreach=True)
            optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(target_params, params, TAU)
            updates += 1
    wall = time.perf_counter() - start

    def act(o):
        with torch.no_grad():
            return q(torch.from_numpy(o[None])).argmax(1)[0]

    return {"wall": wall, "updates": updates, "final_return": evaluate(act)}


SYSTEMS = {"offpolicy": run_offpolicy, "sb3": run_sb3, "reference": run_reference}


def profile_offpolicy(preset_name: str) -> None:
    import offpolicy

    config = offpolicy.RunConfig(**preset(preset_name))
    profile_run(config, f"offpolicy train --preset {preset_name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--profile", action="store_true", help="also break down one of our runs by part")
    child_options(parser)
    args = parser.parse_args()
    if run_child(args, SYSTEMS):
        return

    results = run_alternating(__file__, args.systems, args.seeds)

    print(f"\ndqn_cartpole: {NUM_STEPS:,} steps, 8 envs, seed-example config; medians over seeds {args.seeds}")
    print(f"{'system':<11}{'wall s':>8}{'env steps/s':>13}{'updates/s':>11}{'final returns':>22}{'wall / offpolicy':>18}")
    base = statistics.median(r["wall"] for r in results.get("offpolicy", results[args.systems[0]]))
    for name, runs in results.items():
        wall = statistics.median(r["wall"] for r in runs)
        updates = statistics.median(r["updates"] / r["wall"] for r in runs)
        returns = ", ".join(f"{r['final_return']:.0f}" for r in runs)
        print(f"{name:<11}{wall:>8.1f}{NUM_STEPS / wall:>13,.0f}{updates:>11,.0f}{returns:>22}{wall / base:>18.2f}")
    if "offpolicy" in results:
        ours = statistics.median(r["wall"] for r in results["offpolicy"])
        for name in ("sb3", "reference"):
            if name in results:
                theirs = statistics.median(r["wall"] for r in results[name])
                print(f"offpolicy / {name}: {ours / theirs:.2f}")
    if args.profile:
        profile_offpolicy("seed-example")
        profile_offpolicy("dqn-cartpole")


if __name__ == "__main__":
    main()
