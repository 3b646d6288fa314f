"""Environment runners: they step environments with a policy and hand back timesteps."""

from offpolicy.envs import EnvFactory
from offpolicy.inference import InferenceServer
from offpolicy.policy import Policy
from offpolicy.runners.core import EnvRunner, EnvRunnerError, EnvSession, StepBatch, TimeStep
from offpolicy.runners.inprocess import InProcessMultiEnvRunner, SingleEnvRunner
from offpolicy.runners.processes import ProcessMultiEnvRunner
from offpolicy.runners.ray_actors import RayFleet, RayMultiEnvRunner  # imports Ray only when one is made
from offpolicy.runners.threaded import AsyncEnvRunner, MultiEnvRunner
from offpolicy.runners.watchdog import EnvTimeoutError, HangWatchdog

__all__ = [
    "AsyncEnvRunner",
    "EnvRunner",
    "make_collection_runner",
    "make_evaluation_runner",
    "EnvRunnerError",
    "EnvSession",
    "EnvTimeoutError",
    "HangWatchdog",
    "InProcessMultiEnvRunner",
    "MultiEnvRunner",
    "ProcessMultiEnvRunner",
    "RayFleet",
    "RayMultiEnvRunner",
    "SingleEnvRunner",
    "StepBatch",
    "TimeStep",
]


def make_collection_runner(
    backend: str,
    factory: EnvFactory,
    seeds: list[int],
    policy: Policy,
    autobatch_size: int,
    watchdog: HangWatchdog | None = None,
    ray_fleet: RayFleet = RayFleet(),
) -> EnvRunner:
    """The multi-env runner of the chosen backend (`OffPolicyConfig.backend`).

    `watchdog` carries the env timeout: in-process envs are interrupted by it,
    the other backends wait for steps at most that long.
    """
    timeout = watchdog.timeout if watchdog is not None else 0.0
    if backend == "inprocess":
        return InProcessMultiEnvRunner(factory, seeds, policy, autobatch_size, watchdog=watchdog)
    if backend == "threads":
        server = InferenceServer(policy, min(autobatch_size, len(seeds)))
        return MultiEnvRunner(factory, seeds, server, env_timeout=timeout)
    if backend == "processes":
        return ProcessMultiEnvRunner(factory, seeds, policy, autobatch_size, env_timeout=timeout)
    if backend == "ray":
        return RayMultiEnvRunner(factory, seeds, policy, autobatch_size, ray_fleet, timeout)
    raise ValueError(f"unknown backend {backend!r}")


def make_evaluation_runner(
    backend: str, factory: EnvFactory, seed: int, policy: Policy, watchdog: HangWatchdog | None = None
) -> EnvRunner:
    """Deterministic whole episodes: an async runner with a one-slot server, or a direct one in-process
    (also for the processes and ray backends: evaluation runs in the trainer)."""
    if backend == "threads":
        timeout = watchdog.timeout if watchdog is not None else 0.0
        return AsyncEnvRunner(factory, InferenceServer(policy, 1), seed, deterministic=True, env_timeout=timeout)
    return SingleEnvRunner(factory, policy, seed, deterministic=True, watchdog=watchdog)
