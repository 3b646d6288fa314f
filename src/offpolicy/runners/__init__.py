"""Environment runners: they step environments with a policy and hand back step batches.

One backend per module: `inprocess` (the trainer's thread; it also holds
`EnvSession`, the step semantics every backend shares), `threaded` (a thread
per env and the autobatching `inference` server), `processes` (worker
processes running `worker`), `ray_actors` (Ray actors). Names are imported on first use, so a worker
process that imports `offpolicy.runners.worker` loads no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from offpolicy.envs import EnvFactory
    from offpolicy.policy import Policy
    from offpolicy.runners.core import EnvRunner
    from offpolicy.runners.options import BackendOptions
    from offpolicy.runners.watchdog import HangWatchdog

_PUBLIC = {
    "AsyncEnvRunner": "offpolicy.runners.threaded",
    "BackendOptions": "offpolicy.runners.options",
    "EnvRunner": "offpolicy.runners.core",
    "EnvRunnerError": "offpolicy.runners.core",
    "EnvSession": "offpolicy.runners.inprocess",
    "EnvTimeoutError": "offpolicy.runners.watchdog",
    "HangWatchdog": "offpolicy.runners.watchdog",
    "InferenceServer": "offpolicy.runners.inference",
    "InProcessMultiEnvRunner": "offpolicy.runners.inprocess",
    "MultiEnvRunner": "offpolicy.runners.threaded",
    "ProcessMultiEnvRunner": "offpolicy.runners.processes",
    "RayFleet": "offpolicy.runners.options",
    "RayMultiEnvRunner": "offpolicy.runners.ray_actors",
    "SingleEnvRunner": "offpolicy.runners.inprocess",
    "StepBatch": "offpolicy.steps",
    "TimeStep": "offpolicy.steps",
}

__all__ = sorted(_PUBLIC) + ["make_collection_runner", "make_evaluation_runner"]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'offpolicy.runners' has no attribute {name!r}")


def make_collection_runner(
    backend: str,
    factory: "EnvFactory",
    seeds: list[int],
    policy: "Policy",
    autobatch_size: int,
    options: "BackendOptions | None" = None,
    watchdog: "HangWatchdog | None" = None,
) -> "EnvRunner":
    """The multi-env runner of the chosen backend (`OffPolicyConfig.backend`), set up by `options`.

    In-process envs that hang are interrupted by `watchdog`; the other backends
    wait for steps at most `options.env_timeout` seconds.
    """
    from offpolicy.runners.options import BackendOptions

    options = options or BackendOptions()
    timeout = options.env_timeout
    if backend == "inprocess":
        from offpolicy.runners.inprocess import InProcessMultiEnvRunner

        return InProcessMultiEnvRunner(factory, seeds, policy, autobatch_size, watchdog=watchdog)
    if backend == "threads":
        from offpolicy.runners.inference import InferenceServer
        from offpolicy.runners.threaded import MultiEnvRunner

        return MultiEnvRunner(factory, seeds, InferenceServer(policy, min(autobatch_size, len(seeds))), timeout)
    if backend == "processes":
        from offpolicy.runners.processes import ProcessMultiEnvRunner

        return ProcessMultiEnvRunner(factory, seeds, policy, autobatch_size, env_timeout=timeout)
    if backend == "ray":
        from offpolicy.runners.ray_actors import RayMultiEnvRunner

        return RayMultiEnvRunner(factory, seeds, policy, autobatch_size, options.ray, timeout)
    raise ValueError(f"unknown backend {backend!r}")


def make_evaluation_runner(
    backend: str, factory: "EnvFactory", seed: int, policy: "Policy", options: "BackendOptions | None" = None,
    watchdog: "HangWatchdog | None" = None,
) -> "EnvRunner":
    """Deterministic whole episodes: an async runner with a one-slot server, or a direct one in-process
    (also for the processes and ray backends: evaluation runs in the trainer)."""
    if backend == "threads":
        from offpolicy.runners.inference import InferenceServer
        from offpolicy.runners.threaded import AsyncEnvRunner

        timeout = options.env_timeout if options is not None else 0.0
        return AsyncEnvRunner(factory, InferenceServer(policy, 1), seed, deterministic=True, env_timeout=timeout)
    from offpolicy.runners.inprocess import SingleEnvRunner

    return SingleEnvRunner(factory, policy, seed, deterministic=True, watchdog=watchdog)
