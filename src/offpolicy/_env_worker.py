"""The body of an environment worker process (the `processes` backend).

Kept apart from the runner so a spawned worker imports only NumPy and
Gymnasium, not torch: start-up takes a fraction of a second instead of seconds.
Observations, actions, rewards and flags live in shared memory; the pipe
carries only which envs to step.
"""

from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class SharedArrays:
    """Per-env rows in shared memory: the runner writes `actions`, workers write the rest."""

    buffers: dict[str, Any]
    specs: dict[str, tuple[tuple[int, ...], str]]

    def views(self) -> dict[str, np.ndarray]:
        return {
            name: np.frombuffer(self.buffers[name], dtype=dtype).reshape(shape)
            for name, (shape, dtype) in self.specs.items()
        }


def allocate(context: Any, num_envs: int, observation: np.ndarray, action: np.ndarray) -> SharedArrays:
    """Shared rows shaped like one observation and one action, for `num_envs` envs."""
    specs = {
        "observations": ((num_envs, *observation.shape), observation.dtype.str),
        "final_observations": ((num_envs, *observation.shape), observation.dtype.str),
        "actions": ((num_envs, *action.shape), action.dtype.str),
        "rewards": ((num_envs,), "<f8"),
        "terminated": ((num_envs,), "|b1"),
        "truncated": ((num_envs,), "|b1"),
    }
    buffers = {
        name: context.RawArray("b", int(np.prod(shape)) * np.dtype(dtype).itemsize)
        for name, (shape, dtype) in specs.items()
    }
    return SharedArrays(buffers, specs)


def work(connection: Any, factory: Any, env_ids: list[int], seeds: list[int], shared: SharedArrays) -> None:
    """Own envs `env_ids`; on each message (a list of env ids) step them with the shared actions.

    After a step, `final_observations` holds the step's true next observation and
    `observations` the one to act on next (the reset one when the episode ended).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it stops us
    arrays = shared.views()
    envs: dict[int, Any] = {}
    current = env_ids[0] if env_ids else -1
    try:
        for env_id, seed in zip(env_ids, seeds):
            env = envs[env_id] = factory()
            env.action_space.seed(seed)
            arrays["observations"][env_id], _ = env.reset(seed=seed)
        connection.send(("ready", env_ids))
        while True:
            message = connection.recv()
            if message is None:
                break
            for env_id in message:
                current = env_id
                env = envs[env_id]
                action = arrays["actions"][env_id]
                observation, reward, terminated, truncated, _ = env.step(action if action.ndim else action.item())
                arrays["final_observations"][env_id] = observation
                arrays["rewards"][env_id] = reward
                arrays["terminated"][env_id] = terminated
                arrays["truncated"][env_id] = truncated
                if terminated or truncated:
                    observation, _ = env.reset()
                arrays["observations"][env_id] = observation
            connection.send(("stepped", message))
    except KeyboardInterrupt:
        pass
    except BaseException as error:
        try:
            connection.send(("error", current, f"{error!r}\n{traceback.format_exc()}"))
        except OSError:
            pass
    finally:
        for env in envs.values():
            env.close()
