"""The seed's literal design: one worker thread per env, all sharing one inference server.

Each `AsyncEnvRunner` computes its next step ahead and hands it over when
asked. `MultiEnvRunner` asks every env for one step at start and, for each
timestep it hands back, asks that env for the next ("double batching"), so
inference for the next steps overlaps with whatever the trainer does.

Python runs one thread at a time, so this design pays off when environments
release the GIL (simulators in C, I/O); for cheap Python envs use the
in-process runner.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Union

from offpolicy.envs import EnvFactory
from offpolicy.policy import PolicyState
from offpolicy.runners.core import EnvRunner, EnvRunnerError
from offpolicy.runners.inference import InferenceServer
from offpolicy.runners.inprocess import EnvSession, collect_episodes
from offpolicy.runners.watchdog import EnvTimeoutError, hang_message, hung_session
from offpolicy.steps import StepBatch, TimeStep

_STOP = object()


class _WorkerFailure:
    def __init__(self, env_id: int, error: BaseException) -> None:
        self.env_id = env_id
        self.error = error


Output = Union[TimeStep, _WorkerFailure]


def _unwrap(item: Output) -> TimeStep:
    if isinstance(item, _WorkerFailure):
        if isinstance(item.error, EnvRunnerError):
            raise item.error
        raise EnvRunnerError(f"environment {item.env_id} worker failed: {item.error!r}") from item.error
    return item


def _next_output(output: "queue.SimpleQueue[Output]", runners: list["AsyncEnvRunner"], timeout: float) -> TimeStep:
    """The next timestep from any of `runners`, or an error naming the env that hangs past `timeout`."""
    try:
        return _unwrap(output.get(timeout=timeout or None))
    except queue.Empty:
        sessions = [r.session for r in runners if r.session is not None]
        stuck = hung_session(sessions, timeout) or next((s for s in sessions if s.busy_since), None)
        if stuck is None:
            raise EnvTimeoutError(f"no environment finished a step within {timeout:g} s") from None
        raise EnvTimeoutError(hang_message(stuck, timeout)) from None


class AsyncEnvRunner(EnvRunner):
    """One env on its own worker thread, acting through an inference server.

    Jobs are step counts; the worker counts as active on the server only while
    it has a job, so an idle worker never holds up a batch.
    """

    def __init__(
        self,
        factory: EnvFactory,
        server: InferenceServer,
        seed: int,
        env_id: int = 0,
        deterministic: bool = False,
        output: "queue.SimpleQueue[Output] | None" = None,
        env_timeout: float = 0.0,
    ) -> None:
        super().__init__(server.policy)
        self.server = server
        self.env_timeout = env_timeout
        self.session: EnvSession | None = None
        self.env_id = env_id
        self.deterministic = deterministic
        self.output: queue.SimpleQueue[Output] = output if output is not None else queue.SimpleQueue()
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._factory = factory
        self._seed = seed
        self._thread = threading.Thread(target=self._work, name=f"offpolicy-env-{env_id}", daemon=True)
        self._thread.start()

    def request_steps(self, count: int = 1) -> None:
        """Ask for `count` more steps; they arrive on the output queue as they complete."""
        self._jobs.put(count)

    def _work(self) -> None:
        active = False
        session: EnvSession | None = None
        try:
            session = self.session = EnvSession(self._factory, self.env_id, self._seed)
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    if active:
                        self.server.worker_idle()
                        active = False
                    job = self._jobs.get()
                if job is _STOP:
                    break
                if job == "restart":
                    if session.episode_length:
                        session.restart()
                    continue
                if not active:
                    self.server.worker_active()
                    active = True
                for _ in range(int(job)):  # type: ignore[call-overload]
                    action, context = self.server.act(session.observation, self.deterministic)
                    self.output.put(session.step(action, context))
        except BaseException as error:
            self.output.put(_WorkerFailure(self.env_id, error))
        finally:
            if active:
                self.server.worker_idle()
            if session is not None:
                session.close()

    def _next(self) -> TimeStep:
        return _next_output(self.output, [self], self.env_timeout)

    def run_steps(self, count: int) -> StepBatch:
        self.request_steps(count)
        return StepBatch.from_timesteps([self._next() for _ in range(count)])

    def run_episodes(self, count: int) -> list[StepBatch]:
        self._jobs.put("restart")

        def step() -> TimeStep:
            self.request_steps(1)
            return self._next()

        return collect_episodes(step, count)

    def update_policy(self, state: PolicyState) -> None:
        """Through the server: requests pending now are answered with the old parameters first."""
        self.server.update_policy(state)

    def stop(self) -> None:
        """Ask the worker to leave once its current job is done."""
        self._jobs.put(_STOP)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker; a thread stuck in a hung env cannot be killed and is left as a daemon."""
        self.stop()
        self._thread.join(timeout=timeout)


class MultiEnvRunner(EnvRunner):
    """`len(seeds)` async runners sharing one inference server, each kept one step ahead."""

    def __init__(self, factory: EnvFactory, seeds: list[int], server: InferenceServer, env_timeout: float = 0.0) -> None:
        """`env_timeout` > 0 bounds the wait for a step (seconds); the env still stepping is named."""
        super().__init__(server.policy)
        self.server = server
        self.env_timeout = env_timeout
        self._output: queue.SimpleQueue[Output] = queue.SimpleQueue()
        self.runners = [
            AsyncEnvRunner(factory, server, seed, env_id, output=self._output)
            for env_id, seed in enumerate(seeds)
        ]
        for runner in self.runners:
            runner.request_steps(1)

    def run_steps(self, count: int) -> StepBatch:
        timesteps = []
        for _ in range(count):
            timestep = _next_output(self._output, self.runners, self.env_timeout)
            timesteps.append(timestep)
            self.runners[timestep.env_id].request_steps(1)
        return StepBatch.from_timesteps(timesteps)

    def update_policy(self, state: PolicyState) -> None:
        """Through the server: requests pending now are answered with the old parameters first."""
        self.server.update_policy(state)

    def close(self) -> None:
        for runner in self.runners:
            runner.stop()
        deadline = time.monotonic() + 2.0
        for runner in self.runners:
            runner.close(timeout=max(0.0, deadline - time.monotonic()))
