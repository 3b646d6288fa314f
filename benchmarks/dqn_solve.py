"""dqn_solve: wall-clock until DQN first reaches a mean evaluation return of 475 on CartPole-v1.

Systems, each in a fresh process, alternated seed by seed:
- offpolicy: the bare `offpolicy train` settings (preset `dqn-cartpole`);
- sb3: Stable-Baselines3's DQN with the RL-Zoo's tuned CartPole-v1 hyperparameters
  (1 env, 2.3e-3 lr, batch 64, 100k buffer, 1,000 warm-up steps, train every 256 steps
  with 128 gradient steps, hard target update every 10 steps, exploration to 0.04 over 16%
  of 50k steps, a 256x256 network), 1 torch thread.

Both evaluate every 2,500 steps on 5 deterministic episodes (time included: it is part of
getting there) and stop at the first mean >= 475, or at 50,000 steps ("not solved").

    python benchmarks/dqn_solve.py [--seeds 0 1 2]      # needs: pip install -e .[bench]

Steps to 475 vary with the seed by 3-4x on both sides (ours: 2.5k-40k over seeds 0-11), so a
median over three seeds moves with which three; `--seeds 0 1 2 3 4 5 6 7 8 9 10 11` gives a
steadier figure (about fifteen minutes here).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import child_options, run_alternating, run_child

TARGET = 475.0
MAX_STEPS = 50_000
EVAL_EVERY = 2_500


def run_offpolicy(seed: int) -> dict:
    import offpolicy
    from offpolicy.events import EvaluationEnded
    from offpolicy.presets import preset

    values = preset("dqn-cartpole")
    values["num_steps"] = MAX_STEPS
    config = offpolicy.RunConfig(**values, seed=seed)
    interrupter = offpolicy.Interrupter()
    solved: dict = {}
    start = time.perf_counter()

    def watch(event, stats):
        if isinstance(event, EvaluationEnded) and event.mean_return >= TARGET and not solved:
            solved.update(seconds=time.perf_counter() - start, steps=event.step)
            interrupter.stop("solved")

    offpolicy.train(config, save=False, quiet=True, callbacks=[watch], interrupter=interrupter)
    return solved or {"seconds": None, "steps": None}


def run_sb3(seed: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    eval_env = gym.make("CartPole-v1")
    eval_env.reset(seed=seed)  # seeded like ours: each run's evaluation episodes are reproducible
    solved: dict = {}

    class Solved(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=5, deterministic=True)
                if mean >= TARGET:
                    solved.update(seconds=time.perf_counter() - start, steps=self.num_timesteps)
                    return False
            return True

    model = DQN(
        "MlpPolicy", gym.make("CartPole-v1"), learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
        learning_starts=1_000, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs={"net_arch": [256, 256]},
        seed=seed, device="cpu", verbose=0,
    )
    start = time.perf_counter()
    model.learn(MAX_STEPS, callback=Solved())
    return solved or {"seconds": None, "steps": None}


SYSTEMS = {"offpolicy": run_offpolicy, "sb3": run_sb3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    child_options(parser)
    args = parser.parse_args()
    if run_child(args, SYSTEMS):
        return

    results = run_alternating(__file__, list(SYSTEMS), args.seeds)
    print(f"\ndqn_solve: seconds until the mean evaluation return first reaches {TARGET:.0f} (seeds {args.seeds})")
    medians = {}
    for name, runs in results.items():
        times = [r["seconds"] if r["seconds"] is not None else float("inf") for r in runs]
        medians[name] = statistics.median(times)
        shown = ", ".join("not solved" if t == float("inf") else f"{t:.1f} s" for t in times)
        print(f"  {name:<10} median {medians[name]:6.1f} s   ({shown})")
    print(f"offpolicy / sb3: {medians['offpolicy'] / medians['sb3']:.2f}  (target <= 0.33)")


if __name__ == "__main__":
    main()
