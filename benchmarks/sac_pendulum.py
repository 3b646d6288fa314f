"""sac_pendulum: SAC on Pendulum-v1 for 20,000 steps with SB3's default SAC hyperparameters, three ways.

Systems, each in a fresh process, alternated seed by seed:
- offpolicy: `offpolicy train sac Pendulum-v1 --lr 3e-4` (1 env, 1 update per step, batch 256,
  1M buffer, 100 warm-up steps, auto entropy, 256x256 networks), --threads torch threads;
- sb3: Stable-Baselines3's SAC with its defaults (the same values), 2 torch threads (its best
  setting for 256-wide networks here);
- bare: 20,000 SAC updates on a random batch in plain PyTorch, no environment and no framework
  (two separate critic MLPs, as usually written): the compute limit, --threads threads.

Prints wall-clock, env steps/s and the final evaluation return (10 deterministic episodes),
with ratios. In-loop evaluation is off for offpolicy, as SB3 runs none.

    python benchmarks/sac_pendulum.py [--seeds 0] [--threads 2] [--profile]   # needs: pip install -e .[bench]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import child_options, profile_run, run_alternating, run_child
from _common import evaluate as _evaluate

NUM_STEPS = 20_000
EVAL_EPISODES = 10


def threads() -> int:
    return int(os.environ.get("BENCH_THREADS", "2"))


def evaluate(act) -> float:
    return _evaluate("Pendulum-v1", act, EVAL_EPISODES)


def run_offpolicy(seed: int) -> dict:
    import offpolicy
    from offpolicy.presets import preset

    values = preset("sac-pendulum")
    values.update(num_steps=NUM_STEPS, seed=seed, torch_threads=threads())
    values["hyperparameters"] = {"lr": 3e-4}
    values["strategy"]["eval_interval"] = NUM_STEPS * 10
    start = time.perf_counter()
    result = offpolicy.train(offpolicy.RunConfig(**values), save=False, quiet=True)
    wall = time.perf_counter() - start
    return {"wall": wall, "final_return": evaluate(result.policy.predict)}


def run_sb3(seed: int) -> dict:
    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(2)
    model = SAC("MlpPolicy", "Pendulum-v1", seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(NUM_STEPS)
    wall = time.perf_counter() - start
    return {"wall": wall, "final_return": evaluate(lambda obs: model.predict(obs, deterministic=True)[0])}


def run_bare(seed: int) -> dict:
    import copy
    import math

    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.set_num_threads(threads())
    torch.set_flush_denormal(True)  # as offpolicy.train does
    torch.manual_seed(seed)

    def mlp(i, o):
        return nn.Sequential(nn.Linear(i, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, o))

    actor, q1, q2 = mlp(3, 2), mlp(4, 1), mlp(4, 1)
    q1_target, q2_target = copy.deepcopy(q1), copy.deepcopy(q2)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    critic_opt = torch.optim.Adam(list(q1.parameters()) + list(q2.parameters()), lr=3e-4)
    log_alpha = torch.zeros((), requires_grad=True)
    alpha_opt = torch.optim.Adam([log_alpha], lr=3e-4)
    obs, next_obs = torch.randn(256, 3), torch.randn(256, 3)
    actions, rewards, dones = torch.rand(256, 1) * 2 - 1, torch.randn(256), torch.zeros(256)

    def sample(o):
        mean, log_std = actor(o).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        return a, logp - torch.log(1 - a.pow(2) + 1e-6).sum(-1)

    start = time.perf_counter()
    for _ in range(NUM_STEPS):
        pi, logp = sample(obs)
        alpha_loss = -(log_alpha * (logp.detach() - 1.0)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            na, nlogp = sample(next_obs)
            x = torch.cat((next_obs, na), 1)
            y = rewards + 0.99 * (1 - dones) * (torch.min(q1_target(x), q2_target(x)).squeeze(-1) - alpha * nlogp)
        x = torch.cat((obs, actions), 1)
        critic_loss = 0.5 * (F.mse_loss(q1(x).squeeze(-1), y) + F.mse_loss(q2(x).squeeze(-1), y))
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        x = torch.cat((obs, pi), 1)
        actor_loss = (alpha * logp - torch.min(q1(x), q2(x)).squeeze(-1)).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()
        with torch.no_grad():
            for target, online in ((q1_target, q1), (q2_target, q2)):
                for t, p in zip(target.parameters(), online.parameters()):
                    t.lerp_(p, 0.005)
    return {"wall": time.perf_counter() - start, "final_return": float("nan")}


SYSTEMS = {"offpolicy": run_offpolicy, "sb3": run_sb3, "bare": run_bare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads for offpolicy and the bare loop")
    parser.add_argument("--systems", nargs="*", default=list(SYSTEMS), choices=list(SYSTEMS),
                        help="systems to compare (none: only --profile)")
    parser.add_argument("--profile", action="store_true", help="also break down one of our runs by part")
    child_options(parser)
    args = parser.parse_args()
    if run_child(args, SYSTEMS):
        return
    os.environ["BENCH_THREADS"] = str(args.threads)
    results = run_alternating(__file__, args.systems, args.seeds)
    print(f"\nsac_pendulum: {NUM_STEPS:,} steps / updates, SB3 default SAC settings; medians over seeds {args.seeds}")
    print(f"{'system':<11}{'wall s':>8}{'env steps/s':>13}{'final returns':>24}")
    walls = {}
    for name, runs in results.items():
        walls[name] = statistics.median(r["wall"] for r in runs)
        returns = ", ".join(f"{r['final_return']:.0f}" for r in runs)
        print(f"{name:<11}{walls[name]:>8.1f}{NUM_STEPS / walls[name]:>13,.0f}{returns:>24}")
    if "offpolicy" in walls:
        for name, target in (("sb3", "<= 0.85"), ("bare", "<= 1.05")):
            if name in walls:
                print(f"offpolicy / {name}: {walls['offpolicy'] / walls[name]:.2f}  (target {target})")
    if args.profile:
        import offpolicy
        from offpolicy.presets import preset

        values = preset("sac-pendulum")
        values.update(num_steps=NUM_STEPS // 4, torch_threads=args.threads)  # a quarter: the shares, not the total
        values["hyperparameters"] = {"lr": 3e-4}
        values["strategy"]["eval_interval"] = NUM_STEPS * 10
        profile_run(offpolicy.RunConfig(**values), f"offpolicy train sac Pendulum-v1, first {NUM_STEPS // 4:,} steps")


if __name__ == "__main__":
    main()
