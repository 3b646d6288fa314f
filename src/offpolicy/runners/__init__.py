"""Environment runners: they step environments with a policy and hand back timesteps."""

from offpolicy.envs import EnvFactory
from offpolicy.inference import InferenceServer
from offpolicy.policy import Policy
from offpolicy.runners.core import EnvRunner, EnvRunnerError, EnvSession, TimeStep
from offpolicy.runners.inprocess import InProcessMultiEnvRunner, SingleEnvRunner
from offpolicy.runners.processes import ProcessMultiEnvRunner
from offpolicy.runners.threaded import AsyncEnvRunner, MultiEnvRunner

__all__ = [
    "AsyncEnvRunner",
    "EnvRunner",
    "make_collection_runner",
    "make_evaluation_runner",
    "EnvRunnerError",
    "EnvSession",
    "InProcessMultiEnvRunner",
    "MultiEnvRunner",
    "ProcessMultiEnvRunner",
    "SingleEnvRunner",
    "TimeStep",
]


def make_collection_runner(
    backend: str, factory: EnvFactory, seeds: list[int], policy: Policy, autobatch_size: int
) -> EnvRunner:
    """The multi-env runner of the chosen backend (`OffPolicyConfig.backend`)."""
    if backend == "inprocess":
        return InProcessMultiEnvRunner(factory, seeds, policy, autobatch_size)
    if backend == "threads":
        return MultiEnvRunner(factory, seeds, InferenceServer(policy, min(autobatch_size, len(seeds))))
    if backend == "processes":
        return ProcessMultiEnvRunner(factory, seeds, policy, autobatch_size)
    raise ValueError(f"unknown backend {backend!r}")


def make_evaluation_runner(backend: str, factory: EnvFactory, seed: int, policy: Policy) -> EnvRunner:
    """Deterministic whole episodes: an async runner with a one-slot server, or a direct one in-process."""
    if backend == "threads":
        return AsyncEnvRunner(factory, InferenceServer(policy, 1), seed, deterministic=True)
    return SingleEnvRunner(factory, policy, seed, deterministic=True)
