"""A small scheduler for the interval phase: when each env's interval terms fire.

Each interval term with ``interval_s=(low, high)`` fires for an env after a
time drawn uniformly in ``[low, high]`` (per env, from the same counter-based
streams as the values, so the schedule too is independent of ``num_envs``
and of the engine), then draws the next interval. The caller owns the clock:
:meth:`IntervalScheduler.advance` after every ``step`` with the time stepped,
:meth:`IntervalScheduler.reset` for envs that start a new episode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simbackend import _validate as V
from simbackend.errors import InvalidArgumentError

from .plan import RandomizationPlan
from .sampling import uniforms

#: mixed into a term's stream key for its schedule stream (so schedule and values draw apart)
_SCHEDULE_SALT = 0x5C4ED01E5C4ED01E


class IntervalScheduler:
    """Fires a plan's interval terms per env on their own random intervals.

    Args:
        plan: the plan; every interval term must carry ``interval_s``.
        num_envs: N.
    """

    def __init__(self, plan: RandomizationPlan, num_envs: int):
        if not isinstance(plan, RandomizationPlan):
            raise InvalidArgumentError(f"plan: expected a RandomizationPlan, got {type(plan).__name__}")
        self.plan = plan
        self.num_envs = V.positive_int(num_envs, "num_envs")
        self.terms = [(i, t) for i, t in plan.phase_terms("interval")]
        missing = [plan.term_name(i) for i, t in self.terms if t.interval_s is None]
        if missing:
            raise InvalidArgumentError(f"plan: interval terms {missing} have no interval_s; the scheduler needs one")
        self._keys = [plan.stream_key(i) ^ _SCHEDULE_SALT for i, _ in self.terms]
        self._draws = np.zeros((len(self.terms), self.num_envs), np.int64)
        self.time_left = np.zeros((len(self.terms), self.num_envs))
        self.reset(None)

    def _draw(self, k: int, ids: np.ndarray) -> None:
        lo, hi = self.terms[k][1].interval_s
        u = uniforms(self.plan.seed, self._keys[k], ids, self._draws[k, ids], 1)[:, 0]
        self.time_left[k, ids] = lo + u * (hi - lo)
        self._draws[k, ids] += 1

    def reset(self, env_ids: Any = None) -> None:
        """Draw fresh intervals for ``env_ids`` (``None``: all), e.g. at an episode start."""
        ids = np.unique(V.env_ids(env_ids, self.num_envs))
        for k in range(len(self.terms)):
            self._draw(k, ids)

    def advance(self, sim: Any, seconds: float) -> dict[str, np.ndarray]:
        """Advance the clock by ``seconds`` and apply the terms that fell due.

        Returns:
            ``{term name: env ids}`` of the terms applied.
        """
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
            raise InvalidArgumentError(f"seconds: expected a non-negative number, got {seconds!r}")
        if getattr(sim, "num_envs", None) != self.num_envs:
            raise InvalidArgumentError(
                f"sim: the scheduler was made for {self.num_envs} envs,"
                f" the backend has {getattr(sim, 'num_envs', None)}"
            )
        self.time_left -= seconds
        fired: dict[str, np.ndarray] = {}
        for k, (i, _) in enumerate(self.terms):
            due = np.flatnonzero(self.time_left[k] <= 0)
            if due.size:
                name = self.plan.term_name(i)
                sim.apply_interval_randomization(self.plan, due, terms=[name])
                self._draw(k, due)
                fired[name] = due
        return fired

    def due_in(self, term: str | None = None) -> np.ndarray:
        """``(N,)`` seconds until the term (default: the first interval term) fires next, per env."""
        names = [self.plan.term_name(i) for i, _ in self.terms]
        k = 0 if term is None else names.index(term)
        return self.time_left[k].copy()
