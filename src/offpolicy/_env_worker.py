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

from offpolicy.envs import check_observation, describe_env_failure


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
        "busy": ((num_envs,), "|b1"),
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
    `busy` is set while an env is inside `step()` or `reset()`, so the trainer can
    name the one that hangs.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it stops us
    arrays = shared.views()
    busy = arrays["busy"]
    shape = arrays["observations"].shape[1:]
    envs: dict[int, Any] = {}
    steps = dict.fromkeys(env_ids, 0)
    current, call = (env_ids[0] if env_ids else -1), "reset()"
    try:
        for env_id, seed in zip(env_ids, seeds):
            current = env_id
            env = envs[env_id] = factory()
            env.action_space.seed(seed)
            observation, _ = env.reset(seed=seed)
            check_observation(observation, shape, "reset()")
            arrays["observations"][env_id] = observation
        connection.send(("ready", env_ids))
        while True:
            message = connection.recv()
            if message is None:
                break
            for env_id in message:
                current, call = env_id, "step()"
                env = envs[env_id]
                action = arrays["actions"][env_id]
                busy[env_id] = True
                observation, reward, terminated, truncated, _ = env.step(action if action.ndim else action.item())
                steps[env_id] += 1
                check_observation(observation, shape, call)
                arrays["final_observations"][env_id] = observation
                arrays["rewards"][env_id] = reward
                arrays["terminated"][env_id] = terminated
                arrays["truncated"][env_id] = truncated
                if terminated or truncated:
                    call = "reset()"
                    observation, _ = env.reset()
                    check_observation(observation, shape, call)
                busy[env_id] = False
                arrays["observations"][env_id] = observation
            connection.send(("stepped", message))
    except KeyboardInterrupt:
        pass
    except BaseException as error:
        try:
            message = describe_env_failure(current, call, steps.get(current, 0), error)
            connection.send(("error", message, traceback.format_exc()))
        except OSError:
            pass
    finally:
        for env in envs.values():
            env.close()
