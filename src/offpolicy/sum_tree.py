"""The sum tree behind prioritized replay: slot priorities, and drawing slots in proportion to them.

A tree of fan-out 4 in one float64 array, level by level from the root: the
leaves hold the slots' priorities, every inner node the sum of its 4 children,
the root the total. Drawing a slot walks down from the root with a mass in
[0, total), at each node past the children whose running sum the mass reaches;
updating a slot re-sums its ancestors from their children, so sums never drift.
A million slots take 10 levels, each node's children 32 contiguous bytes. A slot
of priority zero (padding included) is never drawn, even where rounding leaves a
mass a hair above a node's sum. Prioritized replay's arithmetic around the
tree is done in the same passes: a draw also gives each drawn slot's importance
weight, and an update can take TD errors and set (|delta| + epsilon) ** alpha.

The same operations exist twice, on the same array and with the same arithmetic:
loops compiled by numba (a dependency), which handle the whole batch a level at
a time without data-dependent branches; and NumPy, vectorised over the batch, a
few calls a level, several times slower: the reference the tests hold the
compiled loops to, and the fallback where numba cannot be imported.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

FANOUT = 4
"""Children per node: at a million slots, 4 draws faster than 2, 8, 16 or 32."""


def _layout(capacity: int) -> tuple[np.ndarray, int]:
    """Where each level starts in the array (root first, each aligned to FANOUT), and the array's length."""
    counts = [capacity]  # nodes needed per level, leaves first
    while counts[-1] > 1:
        counts.append(-(-counts[-1] // FANOUT))
    counts.reverse()
    sizes = [1] + [counts[level - 1] * FANOUT for level in range(1, len(counts))]
    offsets, length = [], 0
    for size in sizes:
        offsets.append(length)
        length += -(-size // FANOUT) * FANOUT
    return np.array(offsets, np.int64), length


def _find_loop(nodes: np.ndarray, offsets: np.ndarray, masses: np.ndarray, scale: float, beta: float,
               slots: np.ndarray, weights: np.ndarray) -> None:
    """For each mass (times `scale`), the slot whose cumulative priority interval holds it (into `slots`),
    and its importance weight (p / min p over the batch) ** -beta (into `weights`; `masses` is used up).
    Level by level for the whole batch, so that the memory reads of different draws overlap, and without
    data-dependent branches in the scan of a node's children."""
    slots[:] = 0
    for i in range(masses.shape[0]):
        masses[i] *= scale
    for level in range(1, offsets.shape[0]):
        start = offsets[level]
        for i in range(masses.shape[0]):
            mass, node = masses[i], slots[i]
            base = start + node * FANOUT
            running, chosen, before = 0.0, 0, 0.0
            for child in range(FANOUT):
                running += nodes[base + child]
                if running <= mass:  # the mass lies past this child
                    chosen, before = child + 1, running
            if chosen == FANOUT:  # past them all, by rounding: take the last child with mass
                chosen = FANOUT - 1
                while nodes[base + chosen] == 0.0:
                    chosen -= 1
                before = 0.0
                for child in range(chosen):
                    before += nodes[base + child]
            masses[i] = mass - before
            slots[i] = node * FANOUT + chosen
    leaves = offsets[offsets.shape[0] - 1]
    for i in range(slots.shape[0]):
        masses[i] = nodes[leaves + slots[i]]  # from here on the drawn priorities
    lowest = masses.min()
    for i in range(slots.shape[0]):
        weights[i] = (masses[i] / lowest) ** -beta


def _update_loop(nodes: np.ndarray, offsets: np.ndarray, slots: np.ndarray, values: np.ndarray, epsilon: float,
                 alpha: float) -> float:
    """Set each slot's priority to (|value| + epsilon) ** alpha (the value itself with 0 and 1), then
    re-sum their ancestors a level at a time for the whole batch (slot by slot, every update of a shared
    ancestor would wait on the one before). Returns the highest priority set."""
    depth = offsets.shape[0] - 1
    highest = 0.0
    for i in range(slots.shape[0]):
        priority = float(values[i])
        if epsilon != 0.0 or alpha != 1.0:
            priority = (abs(priority) + epsilon) ** alpha
        nodes[offsets[depth] + slots[i]] = priority
        highest = max(highest, priority)
    parents = slots // FANOUT
    for level in range(depth, 0, -1):
        for i in range(parents.shape[0]):
            base = offsets[level] + parents[i] * FANOUT
            total = 0.0
            for child in range(FANOUT):
                total += nodes[base + child]
            nodes[offsets[level - 1] + parents[i]] = total
        parents //= FANOUT
    return highest


@functools.cache
def compiled_kernels() -> tuple[Callable, Callable] | None:
    """The walk and the update compiled by numba (once per process), or None where numba cannot be imported."""
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(nogil=True)(_find_loop), numba.njit(nogil=True)(_update_loop)


class SumTree:
    """Priorities of `capacity` slots, and sampling in proportion to them, whole batches at a time.

    `compiled` chooses the implementation: True needs numba, False is NumPy, None (the default)
    takes numba where it can be imported.
    """

    def __init__(self, capacity: int, compiled: bool | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"sum tree capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.offsets, length = _layout(capacity)
        self.depth = len(self.offsets) - 1
        self.nodes = np.zeros(length, np.float64)
        self._leaves = int(self.offsets[-1])
        kernels = compiled_kernels() if compiled is not False else None
        if compiled and kernels is None:
            raise ImportError("the compiled sum tree needs numba: pip install numba")
        self.compiled = kernels is not None
        self._kernels = kernels

    @property
    def total(self) -> float:
        return float(self.nodes[0])

    def priorities(self, slots: np.ndarray) -> np.ndarray:
        return self.nodes[self._leaves + slots]

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set these slots' priorities (one value per slot) and re-sum their ancestors."""
        self._update(slots, priorities, 0.0, 1.0)

    def update_from_errors(self, slots: np.ndarray, td_errors: np.ndarray, epsilon: float, alpha: float) -> float:
        """Set these slots' priorities to prioritized replay's (|delta| + epsilon) ** alpha, one TD error
        delta per slot, and re-sum their ancestors. Returns the highest of these priorities."""
        return self._update(slots, td_errors, epsilon, alpha)

    def _update(self, slots: np.ndarray, values: np.ndarray, epsilon: float, alpha: float) -> float:
        slots = np.ascontiguousarray(slots, np.int64)
        if self._kernels is not None:
            return self._kernels[1](self.nodes, self.offsets, slots, np.ascontiguousarray(values), epsilon, alpha)
        priorities = np.asarray(values, np.float64)
        if epsilon != 0.0 or alpha != 1.0:
            priorities = np.power(np.abs(priorities) + epsilon, alpha)
        self.nodes[self._leaves + slots] = priorities
        nodes = slots
        for level in range(self.depth, 0, -1):
            nodes = nodes // FANOUT
            children = self.nodes[(self.offsets[level] + nodes * FANOUT)[:, None] + np.arange(FANOUT)]
            self.nodes[self.offsets[level - 1] + nodes] = np.cumsum(children, axis=1)[:, -1]  # in order, as the loop
        return float(priorities.max(initial=0.0))

    def find(self, masses: np.ndarray) -> np.ndarray:
        """The slot whose cumulative priority interval holds each of `masses` (values in [0, total))."""
        return self._walk(np.array(masses, np.float64), 1.0, 0.0)[0]

    def sample(self, count: int, rng: np.random.Generator, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """`count` slots drawn independently, each with probability P_i = p_i / total, and their importance
        weights (N P_i) ** -beta / max_j (N P_j) ** -beta over the draw, that is (p_i / min_j p_j) ** -beta,
        in float32."""
        return self._walk(rng.random(count), self.total, beta)

    def _walk(self, masses: np.ndarray, scale: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
        slots, weights = np.empty(len(masses), np.int64), np.empty(len(masses), np.float32)
        if self._kernels is not None:
            self._kernels[0](self.nodes, self.offsets, masses, scale, beta, slots, weights)
            return slots, weights
        masses *= scale
        nodes = np.zeros(len(masses), np.int64)
        rows = np.arange(len(masses))
        for level in range(1, self.depth + 1):
            children = self.nodes[(self.offsets[level] + nodes * FANOUT)[:, None] + np.arange(FANOUT)]
            running = np.cumsum(children, axis=1)
            # The first child whose running sum exceeds the mass; past them all (rounding), the last with mass.
            chosen = np.minimum((running <= masses[:, None]).sum(axis=1),
                                FANOUT - 1 - np.argmax(children[:, ::-1] > 0, axis=1))
            masses -= np.where(chosen > 0, running[rows, chosen - 1], 0.0)
            nodes = nodes * FANOUT + chosen
        priorities = self.priorities(nodes)
        return nodes, np.power(priorities / priorities.min(initial=np.inf), -beta).astype(np.float32)
