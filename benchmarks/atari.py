"""atari: DQN from pixels on ALE/Breakout-v5 with the dqn-atari settings, ours against Stable-Baselines3, in one run.

Speed: agent steps per second over a fixed window of WINDOW steps once learning has started (learning starts
shortened to WARMUP steps), updates included: a batch of 32 every 4 transitions, the Nature CNN, 2 torch
threads, no in-loop evaluation. Systems, each in a fresh process, alternated seed by seed:
- offpolicy: the dqn-atari preset (8 envs acting in batches);
- offpolicy-1env: the same with one env, as SB3 runs;
- sb3: Stable-Baselines3's DQN with CnnPolicy, one env (its make_atari_env + VecFrameStack, ale-py's own
  frame skip off so that its wrapper skips 4), the same buffer, batch, learning rate, train frequency and
  target interval;
- compute: the same updates and batched inference calls alone (random batches, no env, no buffer, no
  framework): the fastest any system could go with this network on this machine.

Memory: bytes per transition of each replay buffer allocated for 1M transitions of 4x84x84 frames (SB3 with
and without optimize_memory_usage), and with --fill the resident memory of our buffer filled with 1M
transitions (8 env streams, episodes of 250 steps).

    python benchmarks/atari.py [--seeds 0 1 2] [--fill]    # needs: pip install -e .[bench,atari]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _common import child_options, run_alternating, run_child

from offpolicy.presets import preset

ENV_ID = "ALE/Breakout-v5"
WARMUP, WINDOW = 1_000, 2_000
BUFFER = 100_000  # the speed runs' buffer; memory is measured for 1M transitions apart
THREADS = 2
ATARI = preset("dqn-atari")
BATCH = ATARI["strategy"]["train_batch_size"]
TRAIN_EVERY = ATARI["strategy"]["train_interval"]
LR = ATARI["hyperparameters"]["lr"]
TARGET_STEPS = ATARI["hyperparameters"]["target_update_interval"] * TRAIN_EVERY
FRAMES = (4, 84, 84)


def run_offpolicy(seed: int, num_envs: int | None = None) -> dict:
    import offpolicy

    values = preset("dqn-atari")
    values["strategy"].update(replay_buffer_size=BUFFER, warmup_steps=WARMUP, eval_interval=10 * (WARMUP + WINDOW))
    if num_envs is not None:
        values["strategy"].update(num_envs=num_envs, autobatch_size=num_envs)
    started: list[float] = []

    def clock(event, stats) -> None:
        if not started and stats.step >= WARMUP:
            started.append(time.perf_counter())

    config = offpolicy.RunConfig(**dict(values, num_steps=WARMUP + WINDOW, seed=seed, torch_threads=THREADS))
    result = offpolicy.train(config, save=False, quiet=True, callbacks=[clock])
    seconds = time.perf_counter() - started[0]
    return {"steps_per_s": (result.stats.step - WARMUP) / seconds, "updates": result.stats.train_steps}


def run_offpolicy_one_env(seed: int) -> dict:
    return run_offpolicy(seed, num_envs=1)


def run_sb3(seed: int) -> dict:
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    class Clock(BaseCallback):
        started: float | None = None

        def _on_step(self) -> bool:
            if self.started is None and self.num_timesteps >= WARMUP:
                self.started = time.perf_counter()
            return True

    gym.register_envs(ale_py)
    torch.set_num_threads(THREADS)
    env = VecFrameStack(make_atari_env(ENV_ID, n_envs=1, seed=seed, env_kwargs={"frameskip": 1}), 4)
    model = DQN("CnnPolicy", env, learning_rate=LR, buffer_size=BUFFER, learning_starts=WARMUP, batch_size=BATCH,
                train_freq=TRAIN_EVERY, gradient_steps=1, target_update_interval=TARGET_STEPS, exploration_fraction=0.1,
                exploration_final_eps=0.01, optimize_memory_usage=False, seed=seed, device="cpu", verbose=0)
    clock = Clock()
    model.learn(WARMUP + WINDOW, callback=clock)
    seconds = time.perf_counter() - clock.started
    return {"steps_per_s": (model.num_timesteps - WARMUP) / seconds, "updates": model._n_updates}


def run_compute(seed: int) -> dict:
    """The updates and inference calls of the window alone: WINDOW / 4 updates of batch 32 and WINDOW / 8
    calls acting for 8 envs, on random frames."""
    import gymnasium as gym
    import torch

    from offpolicy.agents import make_learner
    from offpolicy.buffer import TransitionBatch

    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)
    space = gym.spaces.Box(0, 255, FRAMES, "uint8")
    learner = make_learner("dqn", space, gym.spaces.Discrete(4), ATARI["hyperparameters"], "cpu", seed)
    policy = learner.policy()

    def frames(count: int) -> torch.Tensor:
        return torch.randint(0, 256, (count, *FRAMES), dtype=torch.uint8)

    batches = [TransitionBatch(frames(BATCH), frames(BATCH), torch.randint(0, 4, (BATCH,)), torch.rand(BATCH),
                               torch.zeros(BATCH), torch.full((BATCH,), 0.99), torch.arange(BATCH),
                               torch.ones(BATCH)) for _ in range(4)]
    acting = frames(ATARI["strategy"]["autobatch_size"])
    learner.train(batches[0])  # first-call costs out of the window
    start = time.perf_counter()
    for index in range(WINDOW // TRAIN_EVERY):
        learner.train(batches[index % 4])
        if index % 2 == 0:  # 8 envs: one acting call every 8 steps
            policy.act(acting, deterministic=False)
    return {"steps_per_s": WINDOW / (time.perf_counter() - start), "updates": WINDOW // TRAIN_EVERY}


SYSTEMS = {"offpolicy": run_offpolicy, "offpolicy-1env": run_offpolicy_one_env, "sb3": run_sb3,
           "compute": run_compute}


def buffer_bytes() -> dict[str, float]:
    """Bytes per transition of each buffer as allocated (ours for 1M transitions, SB3's for 10k: its arrays for 1M
    exceed this machine's memory); allocation only, pages untouched."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.buffers import ReplayBuffer

    from offpolicy.frame_stack import FrameStackBuffer
    from offpolicy.steps import StepBatch

    capacity = 1_000_000
    ours = FrameStackBuffer(capacity, 8, 4)
    stack = np.zeros((1, *FRAMES), np.uint8)
    ours.push(StepBatch(np.zeros(1, int), stack, stack.copy(), np.zeros(1, np.int64), np.zeros(1), np.zeros(1, bool),
                        np.zeros(1, bool), np.zeros(1), np.ones(1, int), {}))
    result = {"offpolicy": ours.nbytes / capacity}
    space, actions = gym.spaces.Box(0, 255, FRAMES, np.uint8), gym.spaces.Discrete(4)
    for optimized in (False, True):  # 10k: 1M would not fit this machine; the cost is per transition
        sb3 = ReplayBuffer(10_000, space, actions, device="cpu", optimize_memory_usage=optimized,
                           handle_timeout_termination=not optimized)  # SB3 refuses both at once
        held = [sb3.observations, sb3.actions, sb3.rewards, sb3.dones, sb3.timeouts]
        if not optimized:
            held.append(sb3.next_observations)
        result[f"sb3 (optimize_memory_usage={optimized})"] = sum(array.nbytes for array in held) / 10_000
    return result


def fill_resident(transitions: int = 1_000_000, envs: int = 8, episode: int = 250) -> dict[str, float]:
    """Resident memory of our buffer for `transitions` frame-stacked Atari transitions, filled for real."""
    import numpy as np
    import psutil

    from offpolicy.frame_stack import FrameStackBuffer
    from offpolicy.steps import StepBatch

    process = psutil.Process()
    before = process.memory_info().rss
    buffer = FrameStackBuffer(transitions, envs, 4)
    rng = np.random.default_rng(0)
    per_env = 125  # steps of each env per chunk
    streams = [np.repeat(rng.integers(0, 256, (1, 84, 84), np.uint8), 4, 0) for _ in range(envs)]
    t = np.zeros(envs, int)
    for _ in range(transitions // (envs * per_env)):
        rows = []
        for k in range(envs):
            new = rng.integers(0, 256, (per_env, 84, 84), np.uint8)
            frames = np.concatenate([streams[k], new])
            window = np.lib.stride_tricks.sliding_window_view(frames, 4, axis=0).transpose(0, 3, 1, 2)
            ends = (t[k] + np.arange(1, per_env + 1)) % episode == 0
            rows.append((np.full(per_env, k), window[:-1], window[1:], ends))
            t[k] += per_env
            streams[k] = frames[-4:]
            if ends[-1]:
                streams[k] = np.repeat(rng.integers(0, 256, (1, 84, 84), np.uint8), 4, 0)
            else:
                assert not ends.any(), "episode ends fall at chunk ends"
        env_ids, observations, following, done = (np.concatenate(part) for part in zip(*rows))
        count = len(env_ids)
        buffer.push(StepBatch(env_ids, observations, following, np.zeros(count, np.int64), np.zeros(count),
                              done, np.zeros(count, bool), np.zeros(count), np.ones(count, int), {}))
    return {"transitions": len(buffer), "resident_gb": (process.memory_info().rss - before) / 1e9,
            "bytes_per_transition": (process.memory_info().rss - before) / len(buffer)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--fill", action="store_true", help="also fill our buffer with 1M transitions (7 GB)")
    child_options(parser)
    args = parser.parse_args()
    if args.one == "fill":
        print(json.dumps(fill_resident()))
        return
    if run_child(args, SYSTEMS):
        return

    print("replay memory for 1M transitions of 4x84x84 frames (as allocated):")
    sizes = buffer_bytes()
    for name, size in sizes.items():
        print(f"  {name:<38}{size / 1e3:8.1f} KB per transition  ({size / sizes['offpolicy']:.1f}x ours)")
    if args.fill:
        import subprocess
        import sys

        out = subprocess.run([sys.executable, __file__, "--one", "fill"], capture_output=True, text=True, check=True)
        filled = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  ours filled: {filled['transitions']:,} transitions, {filled['resident_gb']:.2f} GB resident "
              f"({filled['bytes_per_transition'] / 1e3:.2f} KB per transition)")

    print(f"\nspeed: {ENV_ID}, agent steps/s over {WINDOW:,} steps after {WARMUP:,}, an update of {BATCH} every "
          f"{TRAIN_EVERY} steps, {THREADS} torch threads")
    results = run_alternating(__file__, args.systems, args.seeds)
    medians = {name: statistics.median(r["steps_per_s"] for r in runs) for name, runs in results.items()}
    base = medians.get("offpolicy", next(iter(medians.values())))
    print(f"\n{'system':<16}{'steps/s (median)':>18}{'spread':>18}{'offpolicy / system':>20}")
    for name, runs in results.items():
        values = [r["steps_per_s"] for r in runs]
        print(f"{name:<16}{medians[name]:>18.1f}{f'{min(values):.1f}-{max(values):.1f}':>18}{base / medians[name]:>20.2f}")


if __name__ == "__main__":
    main()
