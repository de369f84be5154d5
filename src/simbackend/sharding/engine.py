"""The sharded engine: K Ray actors, each an ordinary engine of about N/K envs, as one engine of N.

See :mod:`simbackend.sharding` for what a user sees; this module is the
driver side. Shard ``k`` holds the contiguous envs ``starts[k] .. starts[k+1]-1``
(``numpy.array_split`` sizes), so env ids, names and order are the unsharded
backend's. Each call is submitted to every shard concerned before any answer is
awaited (one round trip). A call that changes the state answers with the shard's
state after it and the frame reads this driver asked to be sent along: the reads
made since the last step (body poses and velocities, site poses, sensors), kept
while they are used, so that a task reading them every step pays no round trip
of its own; the others (Jacobians, rays, model fields) are fetched when asked and
kept until the state changes.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import pickle
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from simbackend.capabilities import Capabilities
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import ShardFailedError
from simbackend.frontend.interrupts import HeldInterrupt
from simbackend.sharding.cluster import connect, release, start_actors
from simbackend.sharding.worker import PREFETCHABLE, Interrupted, Update

#: step numbers, unique in this process: a pooled actor's memory of a stopped step never stops a later one
_STEP_NUMBERS = itertools.count(1)
#: steps a prefetched read may go unused before it is no longer sent along
_PREFETCH_AGE = 8
#: seconds between looks at a held Ctrl-C while a step's answers are awaited
_POLL = 0.01
#: seconds at least that starting a shard may take (a new process importing torch and the engine;
#: MuJoCo Warp compiles its kernels on first use)
_START_TIMEOUT = 300.0


#: where a sharded backend says how it runs (the command line prints it; a library user may listen): one
#: INFO record per backend built, its ``shards`` attribute ``(engine, shards, shards asked for)``
_log = logging.getLogger("simbackend.sharding")


def shard_notice(engine: str, num_envs: int, asked: int, sizes: list[int]) -> str:
    """One line saying how a sharded backend runs: on how many Ray actors, how many envs each, and
    whether the shards asked for were capped to the number of envs."""

    def count(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}"

    low, high = min(sizes), max(sizes)
    each = count(low, "env") if low == high else f"{low}-{high} envs"
    line = f"{engine}: {count(num_envs, 'env')} on {count(len(sizes), 'shard')} (Ray actors), {each} each"
    if asked > len(sizes):
        line += f"; {asked} shards asked for, capped at one per env"
    return line


class ShardRestartWarning(RuntimeWarning):
    """A shard died or timed out and was restarted (``sharding={"restart": True}``)."""


class ShardedEngine(Engine):
    """``build.options.shards`` Ray actors running engine class ``inner``; see the module docstring."""

    name = "sharded"

    def __init__(self, build: EngineBuild, *, inner: type[Engine]) -> None:
        super().__init__(build)
        cfg = dict(build.options.sharding)
        self.name = inner.name  # type: ignore[misc]  # the backend keeps its engine's name
        self.dtype = inner.dtype  # type: ignore[misc]
        self._inner = inner
        self._address: str | None = cfg["address"]
        self._restart_on: bool = cfg["restart"]
        self._timeout: float = cfg["timeout"]
        self._pool: bool = cfg["pool"]
        asked = int(build.options.shards or 1)
        count = min(asked, build.num_envs)  # never more shards than envs
        sizes = [len(a) for a in np.array_split(np.arange(build.num_envs), count)]
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._builds = [self._shard_build(build, n, count) for n in sizes]
        self._threads = self._builds[0].options.nthread if self._address is None else 0
        self._dead: set[int] = set()
        self._stepped: set[int] = set()
        self._seq = 0  # steps submitted (the number a Ctrl-C stops)
        self._interrupted = False  # the step being awaited was told to stop
        self._wanted: dict[tuple, int] = {}
        self._joined: dict[tuple, Any] = {}
        self._extra: list[dict[tuple, Any]] = [{} for _ in sizes]
        self._params: list[dict[str, np.ndarray]] = [{} for _ in sizes]
        self._building = True  # a shard failing to build is not restarted
        self._ray = connect(self._address)
        self._actors: list[Any] = start_actors(count, self._address, cfg["cpus"], self._pool)
        try:
            metas = self._run("build", {k: self._build_args(k) for k in range(count)}, timeout=_START_TIMEOUT)
        except BaseException:
            self._end_actors(keep=False)
            raise
        meta = metas[0]
        self._capabilities: Capabilities = replace(meta["capabilities"], gpu=False)
        self._notes: tuple[str, ...] = meta["notes"]
        self._width: int | None = meta["state_width"]
        self._upd: list[Update] = [metas[k]["update"] for k in range(count)]
        self._before: list[Update] = list(self._upd)
        self._building = False
        _log.info(shard_notice(inner.name, build.num_envs, asked, sizes), extra={"shards": (inner.name, count, asked)})

    # ------------------------------------------------------------------
    # what it is
    # ------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def notes(self) -> tuple[str, ...]:
        return self._notes

    # ------------------------------------------------------------------
    # state and stepping
    # ------------------------------------------------------------------
    def read_state(self) -> tuple[Any, Any]:
        return self._get(("state",))

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        q, v = qpos.cpu().numpy(), qvel.cpu().numpy()
        self._mutate("write_state", {k: (local, q[rows], v[rows]) for k, local, rows in self._split(env_ids)})

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> Any:
        self._stepped = set()  # first: a revert after Ctrl-C here, before any shard had the step, undoes nothing
        c = ctrl.cpu().numpy()
        f = None if forces is None else (forces.bodies, forces.force.cpu().numpy(), forces.torque.cpu().numpy())
        self._age_reads()
        args = {}
        for k in range(len(self._actors)):
            a, b = self._starts[k], self._starts[k + 1]
            args[k] = (c[a:b], nsteps, None if f is None else (f[0], f[1][a:b], f[2][a:b]))
        answers = self._mutate("step", args, mark_step=True)
        failed = [answers[k].result for k in range(len(self._actors))]
        if all(x is None for x in failed):
            return None
        return np.concatenate([np.zeros(self._size(k), bool) if x is None else x for k, x in enumerate(failed)])

    def revert(self, envs: torch.Tensor) -> None:
        mask = torch.as_tensor(envs, dtype=torch.bool).cpu().numpy()
        args = {}
        for k in sorted(self._stepped - self._dead):  # a shard whose engine never began the step has nothing to undo
            part = mask[self._starts[k] : self._starts[k + 1]]
            if part.any():
                args[k] = (part,)
        if args:
            self._mutate("revert", args)

    # ------------------------------------------------------------------
    # frames and readings
    # ------------------------------------------------------------------
    def body_pose(self, ids: np.ndarray) -> tuple[Any, Any]:
        return self._get(("body_pose", tuple(int(i) for i in ids)))

    def body_velocity(self, ids: np.ndarray) -> tuple[Any, Any]:
        return self._get(("body_velocity", tuple(int(i) for i in ids)))

    def site_pose(self, ids: np.ndarray) -> tuple[Any, Any]:
        return self._get(("site_pose", tuple(int(i) for i in ids)))

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[Any, Any]:
        return self._get(("site_jacobian", int(site_id), tuple(int(i) for i in cols)))

    def sensor(self, sensor_id: int) -> Any:
        return self._get(("sensor", int(sensor_id)))

    def contact_forces(self, body_ids: np.ndarray) -> Any:
        return self._get(("contact_forces", tuple(int(i) for i in body_ids)))

    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> Any:
        o, d = origins.cpu().numpy(), directions.cpu().numpy()
        args = {k: (o[self._rows(k)], d[self._rows(k)], int(exclude_body)) for k in self._live()}
        out = self._run("call", {k: ("cast_rays", a) for k, a in args.items()})
        return np.concatenate([out[k] for k in range(len(self._actors))])

    def model_fields(self) -> dict[str, np.ndarray]:
        return self._run("call", {0: ("model_fields", ())})[0]

    # ------------------------------------------------------------------
    # per-env model fields
    # ------------------------------------------------------------------
    def read_params(self, field: str) -> np.ndarray | None:
        parts = self._run("read", {k: ("read_params", (field,)) for k in self._live()})
        if all(parts[k] is None for k in parts):
            return None
        from simbackend.randomization import FIELDS

        model = np.asarray(getattr(self.info, FIELDS[field][0]), np.float64)
        full = [np.broadcast_to(model, (self._size(k),) + model.shape) if p is None else p for k, p in parts.items()]
        return np.concatenate(full)

    def write_params(self, env_ids: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        args = {
            k: (local, {f: np.asarray(v)[rows] for f, v in values.items()}) for k, local, rows in self._split(env_ids)
        }
        self._mutate("write_params", args)
        if self._restart_on:  # the per-env fields a restarted shard gets back
            from simbackend.randomization import FIELDS

            for k, (local, fields) in args.items():
                for f, rows in fields.items():
                    if f not in self._params[k]:
                        model = np.asarray(getattr(self.info, FIELDS[f][0]), np.float64)
                        self._params[k][f] = np.broadcast_to(model, (self._size(k),) + model.shape).copy()
                    self._params[k][f][local] = rows

    # ------------------------------------------------------------------
    # snapshots
    # ------------------------------------------------------------------
    @property
    def state_width(self) -> int:
        if self._width is None:
            return super().state_width
        return self._width

    def save_state(self, env_ids: np.ndarray) -> Any:
        out = np.empty((len(env_ids), self.state_width), np.float64)
        pending = {}
        for k, local, rows in self._split(env_ids):
            saved = self._upd[k].saved
            if saved is not None:  # kept for restarts: already here
                out[rows] = saved[local]
            else:
                pending[k] = (local, rows)
        if pending:
            got = self._run("call", {k: ("save_state", (local,)) for k, (local, _) in pending.items()})
            for k, (_, rows) in pending.items():
                out[rows] = got[k]
        return out

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[Any, Any]:
        r = rows.cpu().numpy()
        parts = list(self._split(env_ids))
        got = self._run("call", {k: ("check_saved", (local, r[idx])) for k, local, idx in parts})
        qpos = np.empty((len(env_ids), self.info.nq))
        qvel = np.empty((len(env_ids), self.info.nv))
        for k, _, idx in parts:
            qpos[idx], qvel[idx] = got[k]
        return qpos, qvel

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        r = rows.cpu().numpy()
        self._mutate("restore_state", {k: (local, r[idx]) for k, local, idx in self._split(env_ids)})

    def close(self) -> None:
        self._end_actors(keep=self._pool)

    # ------------------------------------------------------------------
    # internals: layout
    # ------------------------------------------------------------------
    def _size(self, k: int) -> int:
        return int(self._starts[k + 1] - self._starts[k])

    def _rows(self, k: int) -> slice:
        return slice(int(self._starts[k]), int(self._starts[k + 1]))

    def _live(self) -> list[int]:
        return list(range(len(self._actors)))

    def _split(self, env_ids: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(shard, local ids, positions in env_ids)`` for each shard holding some of ``env_ids`` (order kept)."""
        ids = np.asarray(env_ids, np.int64)
        shard = np.searchsorted(self._starts, ids, side="right") - 1
        out = []
        for k in np.unique(shard):
            pos = np.flatnonzero(shard == k)
            out.append((int(k), ids[pos] - self._starts[k], pos))
        return out

    def _shard_build(self, build: EngineBuild, n: int, count: int) -> EngineBuild:
        options = build.options
        if options.nthread == 0 and self._address is None:  # K local shards share this machine's cores
            options = replace(options, nthread=max(1, (os.cpu_count() or 1) // count))
        options = replace(options, shards=None, sharding={})
        try:
            pickle.dumps(build.source)
            source = build.source
        except Exception:  # e.g. a mujoco.MjSpec: the compiled model holds everything an engine builds from
            source = build.info.compiled
        return replace(build, num_envs=n, options=options, source=source, device=torch.device("cpu"))

    def _build_args(self, k: int) -> tuple:
        return (self._inner, self._builds[k], self._restart_on, self._threads)

    # ------------------------------------------------------------------
    # internals: reads
    # ------------------------------------------------------------------
    def _get(self, key: tuple) -> Any:
        if key[0] in PREFETCHABLE:
            self._wanted[key] = 0
        if key in self._joined:
            return self._joined[key]
        if key == ("state",):
            parts: list[Any] = [(u.qpos, u.qvel) for u in self._upd]
        else:
            missing = [k for k in self._live() if key not in self._upd[k].reads and key not in self._extra[k]]
            if missing:
                got = self._run("read", {k: (key[0], key[1:]) for k in missing})
                for k in missing:
                    self._extra[k][key] = got[k]
            parts = [self._upd[k].reads.get(key, self._extra[k].get(key)) for k in self._live()]
        joined = self._join(parts)
        self._joined[key] = joined
        return joined

    def _join(self, parts: list) -> Any:
        if isinstance(parts[0], tuple):
            return tuple(self._join([p[i] for p in parts]) for i in range(len(parts[0])))
        return torch.from_numpy(np.concatenate(parts))

    def _age_reads(self) -> None:
        for key in list(self._wanted):
            self._wanted[key] += 1
            if self._wanted[key] > _PREFETCH_AGE:
                del self._wanted[key]

    # ------------------------------------------------------------------
    # internals: calls, failures, restarts
    # ------------------------------------------------------------------
    def _mutate(self, member: str, args: dict[int, tuple], *, mark_step: bool = False) -> dict[int, Update]:
        """``member`` on the shards named, every answer recorded as it arrives (a shard that fails does not
        hide the others' new state). Ctrl-C is held from the first submission to the last answer recorded,
        so that no shard changes unseen: a step's is answered at once by stopping the shards' step (then
        ``KeyboardInterrupt``, and the front end reverts the shards whose engine began it), any other
        call's is delivered once every answer is in."""
        with HeldInterrupt() as held:
            reads = tuple(self._wanted)
            calls: dict[int, tuple] = {k: (member, a, reads) for k, a in args.items()}
            if mark_step:
                self._seq = next(_STEP_NUMBERS)
                calls = {k: (*c, self._seq) for k, c in calls.items()}
                self._before = list(self._upd)  # what a restarted shard's revert goes back to

            def record(k: int, update: Any) -> None:
                if mark_step and (not isinstance(update, Interrupted) or update.started):
                    self._stepped.add(k)
                if isinstance(update, Interrupted):
                    return
                self._joined.clear()
                self._upd[k] = update
                self._extra[k] = {}

            stop = None
            if mark_step:
                stop = functools.partial(self._stop_step, held, list(calls))
            answers = self._run("call", calls, record=record, poll=stop)
            if mark_step and any(isinstance(a, Interrupted) for a in answers.values()):
                raise KeyboardInterrupt
        return answers

    def _stop_step(self, held: HeldInterrupt, shards: list[int], now: bool = False) -> None:
        """Called while a step's answers are awaited. A held Ctrl-C goes to the SIGINT handler in place
        (Python's raises KeyboardInterrupt, which brings the call back here with ``now``; a program's own
        handler may let the step go on); ``now``: tell every shard to stop the step."""
        if not now:
            held.deliver()
        elif not self._interrupted:
            self._interrupted = True
            for k in shards:
                if k not in self._dead:
                    self._actors[k].interrupt.options(concurrency_group="control").remote(self._seq)

    def _run(
        self,
        method: str,
        args: dict[int, tuple],
        *,
        timeout: float = 0.0,
        record: Callable[[int, Any], None] | None = None,
        poll: Callable[..., None] | None = None,
    ) -> dict[int, Any]:
        """Submit ``method(*args[k])`` to every shard ``k`` named, then await them all (``record(k, answer)``
        as each arrives; ``poll()`` every :data:`_POLL` s while waiting, when given); the first error is
        raised once every shard has answered or failed."""
        if self._dead and not (method == "call" and args and all(a[0] == "revert" for a in args.values())):
            # a revert (after a failed step) still puts the live shards back
            raise self._failure(min(self._dead), "failed earlier; this backend can only be closed")
        self._interrupted = False
        refs = {k: getattr(self._actors[k], method).remote(*a) for k, a in args.items()}
        limit = max(self._timeout, timeout)
        deadline = time.monotonic() + limit
        out = {}
        error: BaseException | None = None
        stopped: KeyboardInterrupt | None = None
        for k, ref in refs.items():
            resubmit = functools.partial(self._resubmit, k, method, args[k])
            while True:
                try:
                    out[k] = self._await(k, ref, deadline, limit, resubmit, poll)
                except KeyboardInterrupt as e:
                    # Ctrl-C (or any handler raising it): the answers are still gathered, so that the state
                    # each shard took is known; a step is stopped first
                    stopped = stopped or e
                    if poll is not None:
                        poll(True)
                    continue
                except Exception as e:  # noqa: BLE001 - raised below, after the other shards' answers
                    if poll is not None and getattr(e, "step_started", False):
                        self._stepped.add(k)  # the engine raised inside its step: it is reverted with the rest
                    error = error or e
                else:
                    if record is not None:
                        record(k, out[k])
                break
        if error is not None:
            raise error
        if stopped is not None:
            raise stopped
        return out

    def _await(
        self,
        k: int,
        ref: Any,
        deadline: float,
        limit: float,
        resubmit: Callable[[], Any],
        poll: Callable[..., None] | None,
    ) -> Any:
        ray = self._ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        for attempt in (0, 1):
            try:
                if poll is None:
                    return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
                while True:  # a step: look at the held Ctrl-C every _POLL s (ray.get would hold it for ~1 s)
                    left = deadline - time.monotonic()
                    ready, _ = ray.wait([ref], timeout=max(0.0, min(_POLL, left)))
                    poll()
                    if ready:
                        return ray.get(ref)
                    if left <= 0:
                        raise GetTimeoutError(f"shard {k} did not answer")
            except RayTaskError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, BaseException) and not isinstance(cause, (RayActorError, RayTaskError)):
                    cause.add_note(f"(raised in shard {k}, envs {self._range(k)})")
                    raise cause from None
                raise
            except (RayActorError, GetTimeoutError) as e:
                what = (
                    f"did not answer within {limit:g} s" + (" (sharding.timeout)" if limit == self._timeout else "")
                    if isinstance(e, GetTimeoutError)
                    else f"died ({type(e).__name__})"
                )
                if not self._restart_on or attempt or self._building:
                    self._dead.add(k)
                    raise self._failure(k, what) from e
                self._restart(k, what)
                ref = resubmit()
                deadline = time.monotonic() + limit
        raise AssertionError("unreachable")

    def _resubmit(self, k: int, method: str, args: tuple) -> Any:
        """The call that failed, again, on shard ``k``'s new actor; a failed ``revert`` becomes the
        restore of the reverted envs' pre-step state (the new engine never saw that step)."""
        actor = self._actors[k]
        if method == "call" and args[0] == "revert":
            before, (mask,), reads = self._before[k], args[1], args[2]
            local = np.flatnonzero(mask)
            if before.saved is not None:
                return actor.call.remote("restore_state", (local, before.saved[local]), reads)
            return actor.call.remote("write_state", (local, before.qpos[local], before.qvel[local]), reads)
        return getattr(actor, method).remote(*args)

    def _range(self, k: int) -> str:
        return f"{self._starts[k]}..{self._starts[k + 1] - 1}"

    def _failure(self, k: int, what: str) -> ShardFailedError:
        ids = range(int(self._starts[k]), int(self._starts[k + 1]))
        return ShardFailedError(f"shard {k} (envs {self._range(k)}) {what}", k, ids)

    def _restart(self, k: int, what: str) -> None:
        """A new actor for shard ``k``, its envs restored from the state the shard last returned."""
        ray = self._ray
        try:
            ray.kill(self._actors[k], no_restart=True)
        except Exception:  # already gone
            pass
        actor = start_actors(1, self._address, None, False)[0]
        self._actors[k] = actor
        ray.get(actor.build.remote(*self._build_args(k)), timeout=max(self._timeout, _START_TIMEOUT))
        local = np.arange(self._size(k))
        if self._params[k]:
            ray.get(actor.call.remote("write_params", (local, self._params[k])), timeout=self._timeout)
        last = self._upd[k]
        if last.saved is not None:
            ray.get(actor.call.remote("restore_state", (local, last.saved)), timeout=self._timeout)
            lost = "nothing (the engine's snapshot rows)"
        else:
            ray.get(actor.call.remote("write_state", (local, last.qpos, last.qvel)), timeout=self._timeout)
            lost = "solver warm starts and any engine state beyond qpos and qvel"
        warnings.warn(
            ShardRestartWarning(
                f"shard {k} (envs {self._range(k)}) {what}; restarted and restored to the state it last"
                f" returned (lost: {lost}); the call is repeated"
            ),
            stacklevel=2,
        )

    def _end_actors(self, *, keep: bool) -> None:
        ray = self._ray
        alive = [a for k, a in enumerate(self._actors) if k not in self._dead]
        if keep:
            try:
                ray.get([a.close.remote() for a in alive], timeout=self._timeout)
            except Exception:  # an actor that cannot close its engine is not kept
                keep = False
        release(alive, self._address, keep)
        for k in self._dead:
            try:
                ray.kill(self._actors[k], no_restart=True)
            except Exception:
                pass
        self._actors = []
