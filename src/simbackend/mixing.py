"""Mixed backends: one ``SimBackend`` of N envs whose envs run on several engines.

``make_backend("mujoco,sapien", model, N)`` gives each engine an equal share of
the envs (sizes as ``numpy.array_split``, in the order given);
``make_backend("mujoco:96,sapien:32", model, 128)`` gives explicit counts, which
must sum to N. The envs of part k are one contiguous block, so env ids, names
and order are those of any backend of N envs; the front end (validation,
names, time, controls, divergence, randomization, snapshots, readouts,
pictures) is the ordinary one, in front of one :class:`MixedEngine` that
builds each part's engine in this process for its block and routes every
engine member to the parts holding the envs concerned.

* **Capabilities** are what every part has: booleans and-ed, sets
  intersected (randomization terms, sensor types, joint types, actuator
  kinds), ``delegated``, ``known_differences``, ``renderers_absent`` and
  ``contact_buffers`` joined; ``max_envs`` is ``None`` (each part's engine
  refuses a block it cannot hold when it is built) and ``gpu`` is false.
  ``deterministic`` is declared absent: each part is deterministic, but the
  engine that simulates env i depends on N and on i's place in the batch,
  which the capability promises it does not (a repeat run of the same mix is
  still bit-identical: ``tests/test_mixed_backend.py``).
* **dtype**: float32 where any part is float32, else float64; each part gets
  its inputs in its own dtype.
* **Stepping**: the parts step side by side, the first in the calling thread
  and each other one in a thread of its own (MuJoCo and SAPIEN release the GIL
  while they integrate; an engine that holds it while it steps overlaps only
  the others' native code: benchmarks/README.md, probe_mixed_threads.py). Ctrl-C stops the first part at its next chunk and is
  raised in the other parts' threads (as ``KeyboardInterrupt``), which stop at
  theirs; the front end then reverts every env.
* **Snapshots**: a row's engine block is ``[part, the part's own row, zeros]``
  (width: one more than the widest part's); a row restores only into an env of
  the engine that made it (:class:`~simbackend.errors.SnapshotMismatchError`
  otherwise: move a state between engines with ``set_state`` or the named
  state).
* **One env**: with shares and N = 1 the env runs on the first engine; the
  other engines hold no env but are built once, with one env, to read their
  capabilities, so that a mix declares the same capabilities at every N (its
  name says ``sapien:0``). With 2 <= N < the number of engines, shares are
  refused (an engine would hold no env).
* **Refused**: ``shards=`` (sharding composes copies of one engine), a device
  other than the CPU, ``model_fields`` (the parity suite compares one engine
  with MuJoCo: run it on each engine alone), an engine registered as a factory
  rather than an :class:`~simbackend.engine.Engine` class.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import difflib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np
import torch

from simbackend.capabilities import Capabilities
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import InvalidArgumentError, SnapshotMismatchError, UnsupportedFeatureError

__all__ = [
    "MixSpec",
    "MixedEngine",
    "combined_capabilities",
    "engines_of",
    "is_mix",
    "lacking",
    "mixed_engine_class",
    "parse_mix",
    "spec_engines",
]


@dataclass(frozen=True)
class MixSpec:
    """A parsed mix: the engines in order and the envs each holds.

    Attributes:
        engines: registered names, lower case, in the order given.
        counts: envs per engine (sums to ``num_envs``; 0 only for the engines after the first
            when ``num_envs`` is 1 and shares were given).
        shares: whether the counts came from shares (no count given) rather than from the spec.
    """

    engines: tuple[str, ...]
    counts: tuple[int, ...]
    shares: bool

    @property
    def name(self) -> str:
        """The normalised spec, ``"mujoco:64,sapien:64"``."""
        return ",".join(f"{e}:{n}" for e, n in zip(self.engines, self.counts))

    @property
    def starts(self) -> tuple[int, ...]:
        """First env of each part, and N at the end."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.counts)]))


def is_mix(sim: Any) -> bool:
    """Whether ``sim`` is a mix spec (a string with ``,`` or ``:``) rather than one backend's name."""
    return isinstance(sim, str) and ("," in sim or ":" in sim)


def engines_of(sim: str, checked: bool = True) -> tuple[str, ...]:
    """The engine names ``sim`` runs on: a mix spec's (checked as :func:`spec_engines` checks them, unless
    ``checked=False``: a record of a past run may name an engine this process lacks), or one backend's name."""
    if not is_mix(sim):
        return (str(sim).strip().lower(),)
    return spec_engines(sim) if checked else tuple(name for name, _ in _pieces(sim))


def _bad(sim: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"sim: {sim!r}: {problem}")


def _pieces(sim: str) -> list[tuple[str, str | None]]:
    """``(name, count text or None)`` per comma-separated piece, names lower case; raises on a malformed piece."""
    out = []
    for piece in sim.split(","):
        name, sep, count = piece.partition(":")
        name = name.strip().lower()
        if not name:
            raise _bad(sim, "an empty engine name (expected 'ENGINE,ENGINE' or 'ENGINE:COUNT,ENGINE:COUNT')")
        out.append((name, count.strip() if sep else None))
    return out


def spec_engines(sim: str, registered: Sequence[str] | None = None) -> tuple[str, ...]:
    """The engine names of mix spec ``sim``, lower case, checked (registered, none repeated, counts
    either on every engine or on none, each a whole number >= 1), without the number of envs."""
    if not isinstance(sim, str):
        raise InvalidArgumentError(f"sim: expected a backend name or a mix such as 'mujoco,sapien', got {sim!r}")
    if registered is None:
        from simbackend.plugins import available_backends

        registered = available_backends()
    pieces = _pieces(sim)
    names = [n for n, _ in pieces]
    for name in names:
        if name not in registered:
            close = difflib.get_close_matches(name, list(registered), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"registered backends: {', '.join(registered)}"
            raise _bad(sim, f"unknown engine {name!r}; {hint}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise _bad(
            sim, f"engine {repeated[0]!r} named twice (one part per engine: give it the sum of the counts instead)"
        )
    given = [c is not None for _, c in pieces]
    if any(given) and not all(given):
        raise _bad(sim, "give every engine a count ('mujoco:96,sapien:32') or none (equal shares: 'mujoco,sapien')")
    for name, count in pieces:
        if count is not None:
            _count(sim, name, count)
    return tuple(names)


def _count(sim: str, name: str, text: str) -> int:
    if not text.isdigit():
        raise _bad(sim, f"count of {name!r} is {text!r}, not a whole number >= 1")
    value = int(text)
    if value < 1:
        raise _bad(sim, f"count of {name!r} is {value}; every engine holds at least one env")
    return value


def parse_mix(sim: str, num_envs: int, registered: Sequence[str] | None = None) -> MixSpec:
    """Mix spec ``sim`` for ``num_envs`` envs (validated, >= 1); raises a one-line
    :class:`InvalidArgumentError` naming ``sim`` for a spec that cannot hold them."""
    engines = spec_engines(sim, registered)
    pieces = _pieces(sim)
    if pieces[0][1] is not None:  # explicit counts
        counts = tuple(_count(sim, n, c) for n, c in pieces if c is not None)
        if sum(counts) != num_envs:
            raise _bad(
                sim,
                f"the counts sum to {sum(counts)}, but num_envs is {num_envs} (give counts that sum to num_envs,"
                " or no counts for equal shares)",
            )
        return MixSpec(engines, counts, shares=False)
    k = len(engines)
    if num_envs == 1:  # one env cannot be split: the first engine's (see the module docstring)
        return MixSpec(engines, (1,) + (0,) * (k - 1), shares=True)
    if num_envs < k:
        raise _bad(
            sim,
            f"{num_envs} envs shared among {k} engines would leave an engine with none (num_envs >= {k},"
            " or fewer engines)",
        )
    base, extra = divmod(num_envs, k)  # numpy.array_split's sizes, without an array of N ids
    return MixSpec(engines, tuple(base + 1 if i < extra else base for i in range(k)), shares=True)


# ----------------------------------------------------------------------
# capabilities
# ----------------------------------------------------------------------
#: frozenset capabilities that are lists of things an engine does not do (joined, not intersected)
_JOINED_SETS = ("delegated",)
#: capabilities fixed for every mix
_FIXED = {"gpu": False, "max_envs": None, "cuda_graphs": False, "deterministic": False}


def combined_capabilities(parts: Sequence[Capabilities]) -> Capabilities:
    """What every part has: booleans and-ed, sets intersected (lists of things absent joined), the
    fields of :data:`_FIXED` fixed (see the module docstring)."""
    values: dict[str, Any] = {}
    for f in fields(Capabilities):
        got = [getattr(c, f.name) for c in parts]
        if f.name in _FIXED:
            values[f.name] = _FIXED[f.name]
        elif isinstance(got[0], bool):
            values[f.name] = all(got)
        elif isinstance(got[0], frozenset):
            joined = f.name in _JOINED_SETS
            out = frozenset(got[0])
            for g in got[1:]:
                out = out | g if joined else out & g
            values[f.name] = out
        elif isinstance(got[0], tuple):
            seen: list[Any] = []
            for g in got:
                seen += [x for x in g if x not in seen]
            values[f.name] = tuple(seen)
        else:  # a capability of a kind this module does not know how to combine: none of the parts' own
            raise TypeError(f"capabilities.{f.name}: no rule to combine {type(got[0]).__name__} values of a mix")
    return Capabilities(**values)


def lacking(engine: Any, entry: str) -> tuple[str, ...]:
    """The engines of mixed engine ``engine`` (``"sapien (envs 64-127)"``) that lack ``entry``: a boolean
    capability's name, ``"sensor_types=accelerometer"``, or a ``"<term>:<phase>"`` randomization entry;
    ``()`` for an engine that is not a mix."""
    parts = getattr(engine, "parts", None) or ()
    caps = getattr(engine, "part_capabilities", None) or ()
    return tuple(f"{name} ({env_range(a, b)})" for (name, a, b), c in zip(parts, caps) if _lacks(c, entry))


def env_range(start: int, stop: int) -> str:
    """``"envs 2-3"``, ``"env 2"`` or ``"no envs"``."""
    return "no envs" if start == stop else f"env {start}" if stop == start + 1 else f"envs {start}-{stop - 1}"


def _lacks(caps: Capabilities, entry: str) -> bool:
    """Whether ``caps`` lacks ``entry``: a boolean capability's name, ``"field=value"`` for a set's
    member, or a ``"<term>:<phase>"`` randomization entry."""
    if "=" in entry:
        name, value = entry.split("=", 1)
        return value not in getattr(caps, name)
    if hasattr(caps, entry):
        return not getattr(caps, entry)
    return entry not in caps.domain_randomization


# ----------------------------------------------------------------------
# the engine
# ----------------------------------------------------------------------
def _async_raise(ident: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``ident`` at its next bytecode (``None``: forget one not raised yet). Only the
    main thread receives signals: this is how Ctrl-C reaches a part stepping in another thread."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None if exc is None else ctypes.py_object(exc))


class _LazyPair(Sequence):
    """The ``(a, b)`` a frame member returns, each joined from the parts' when first read (a part's
    own pair may compute its halves lazily: a caller wanting positions does not pay for orientations)."""

    __slots__ = ("_parts", "_join", "_done")

    def __init__(self, parts: list[Any], join: Callable[[list[Any]], torch.Tensor]):
        self._parts, self._join = parts, join
        self._done: list[Any] = [None, None]

    def __getitem__(self, i: Any) -> Any:
        v = self._done[i]
        if v is None:
            v = self._done[i] = self._join([p[i] for p in self._parts])
        return v

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Any:
        return iter((self[0], self[1]))


def _tensor(x: Any) -> torch.Tensor:
    """An engine's output as a tensor (a read-only array, e.g. a broadcast view, is copied)."""
    if isinstance(x, torch.Tensor):
        return x
    a = np.ascontiguousarray(x)
    return torch.from_numpy(a if a.flags.writeable else a.copy())


def _join(parts: list[Any]) -> torch.Tensor:
    """The parts' rows as one CPU tensor, in the widest dtype among them (every conversion exact)."""
    ts = [_tensor(p).cpu() for p in parts]
    if len(ts) == 1:
        return ts[0]
    dtype = ts[0].dtype
    for t in ts[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return torch.cat([t.to(dtype) for t in ts])


class MixedEngine(Engine):
    """Several engines, each holding one contiguous block of the envs, as one engine of N.

    Not registered: :func:`mixed_engine_class` makes the subclass of one mix (its ``name``,
    ``dtype`` and parts are class attributes, as the front end reads them from the class), and
    ``make_backend`` builds it for a mix spec. See the module docstring.
    """

    name = "mixed"
    devices = ("cpu",)
    #: the mix this class builds: ``(engine name, engine class, count, the engine's option block)``
    mix: ClassVar[tuple[tuple[str, type[Engine], int, Mapping[str, Any]], ...]] = ()

    def __init__(self, build: EngineBuild) -> None:
        super().__init__(build)
        if not self.mix:
            raise InvalidArgumentError(
                "sim: MixedEngine is built through a mix spec (make_backend('mujoco,sapien', ...))"
            )
        if build.options.shards is not None:
            raise InvalidArgumentError(f"shards: a mixed backend ({self.name!r}) runs its engines in this process")
        if build.device.type != "cpu":
            raise InvalidArgumentError(
                f"device: a mixed backend ({self.name!r}) runs on the CPU, got {str(build.device)!r}"
            )
        counts = [c for _, _, c, _ in self.mix]
        if sum(counts) != build.num_envs:
            raise InvalidArgumentError(
                f"num_envs: {build.num_envs}, but the mix {self.name!r} holds {sum(counts)} envs"
            )
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._names = tuple(n for n, _, _, _ in self.mix)
        self._engines: list[Engine] = []  # the parts holding envs, in order
        self._held: list[int] = []  # their indices in the mix
        probes: list[Capabilities] = []
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._stepped: set[int] = set()
        #: step the parts side by side (threads); False steps them one after the other in this thread
        self.parallel = True
        self._lock = threading.Lock()
        self._threads: dict[int, int] = {}  # part -> the thread stepping it, while it steps
        self._interrupted: set[int] = set()  # the parts told to stop in this step
        try:
            for k, (_name, cls, count, block) in enumerate(self.mix):
                part = replace(build, num_envs=max(count, 1), options=replace(build.options, engine=dict(block)))
                engine = cls(part)
                if count:
                    self._engines.append(engine)
                    self._held.append(k)
                else:  # one env in all: this engine holds none, its capabilities still bound the mix's
                    try:
                        probes.append(engine.capabilities)
                    finally:
                        engine.close()
            self._settle(probes)
        except BaseException:  # a part that failed to build (or to describe itself): none is left open
            self._close_parts()
            raise

    def _settle(self, probes: list[Capabilities]) -> None:
        """The mix's description, once every part is built (``probes``: the capabilities of the engines
        holding no env)."""
        own = iter([e.capabilities for e in self._engines])
        empty = iter(probes)
        #: ``(engine name, first env, stop env)`` of each engine of the mix, in order
        self.parts: tuple[tuple[str, int, int], ...] = tuple(
            (n, int(self._starts[k]), int(self._starts[k + 1])) for k, n in enumerate(self._names)
        )
        #: each engine's own capabilities, in the order of ``parts`` (an engine holding no env: as built with one)
        self.part_capabilities: tuple[Capabilities, ...] = tuple(
            next(own) if k in self._held else next(empty) for k in range(len(self.mix))
        )
        #: the engines holding envs, in the order of ``parts`` (for engine-specific inspection)
        self.part_engines: tuple[Engine, ...] = tuple(self._engines)
        self._capabilities = combined_capabilities(list(self.part_capabilities))
        widths = [e.state_width for e in self._engines] if self._capabilities.snapshot_restore else []
        self._widths = widths
        if len(self._engines) > 1:
            self._pool = concurrent.futures.ThreadPoolExecutor(len(self._engines) - 1, thread_name_prefix="mixed-part")

    # ------------------------------------------------------------------
    # what it is
    # ------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def env_engines(self) -> tuple[str, ...]:
        return tuple(name for name, a, b in self.parts for _ in range(b - a))

    @property
    def notes(self) -> tuple[str, ...]:
        out = [
            f"mixed backend: {', '.join(f'{n} ({self._range(k)})' for k, n in enumerate(self._names))}; capabilities"
            " are those every engine has; deterministic is not declared: each engine is, but which engine simulates"
            " an env depends on num_envs and on the env's place in the batch"
        ]
        for k, name in enumerate(self._names):
            if k not in self._held:
                out.append(f"{name} ({self._range(k)}): holds no env (one env runs on {self._names[0]})")
        for k, engine in zip(self._held, self._engines):
            out += [f"{self._names[k]} ({self._range(k)}): {line}" for line in engine.notes]
        return tuple(out)

    # ------------------------------------------------------------------
    # state and stepping
    # ------------------------------------------------------------------
    def read_state(self) -> tuple[Any, Any]:
        got = [e.read_state() for e in self._engines]
        return _join([g[0] for g in got]), _join([g[1] for g in got])

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        for i, local, rows in self._split(env_ids):
            e = self._engines[i]
            pos = torch.as_tensor(rows, device=qpos.device)
            e.write_state(local, qpos[pos].to(e.dtype).contiguous(), qvel[pos].to(e.dtype).contiguous())

    def write_state_masked(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        for i, e in enumerate(self._engines):
            rows = self._rows(i)
            part = mask[rows]
            if bool(part.any()):
                e.write_state_masked(
                    part.contiguous(), qpos[rows].to(e.dtype).contiguous(), qvel[rows].to(e.dtype).contiguous()
                )

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> Any:
        self._stepped = set()  # first: a revert after a failure here undoes only the parts that began
        calls = []
        for i, e in enumerate(self._engines):
            rows = self._rows(i)
            c = ctrl[rows].to(e.dtype).contiguous()
            f = None
            if forces is not None:
                f = BodyForces(
                    forces.bodies,
                    forces.force[rows].to(e.dtype).contiguous(),
                    forces.torque[rows].to(e.dtype).contiguous(),
                )
            calls.append((e, c, f))
        results: list[Any] = [None] * len(calls)
        errors: list[BaseException] = []
        if self.parallel and self._pool is not None:
            self._step_parallel(calls, nsteps, results, errors)
        else:
            try:
                for i, (e, c, f) in enumerate(calls):
                    self._stepped.add(i)
                    results[i] = e.step(c, nsteps, f)
            except BaseException as err:  # Ctrl-C included: the parts after it never began
                errors.append(err)
        if errors:
            raise errors[0]
        if all(r is None for r in results):
            return None
        return np.concatenate(
            [
                np.zeros(e.num_envs, bool) if r is None else _tensor(r).cpu().numpy().astype(bool)
                for e, r in zip(self._engines, results)
            ]
        )

    def _step_parallel(self, calls: list, nsteps: int, results: list[Any], errors: list[BaseException]) -> None:
        """Step part 0 in this thread and the others in the pool's threads, all at once. An error here
        (Ctrl-C included, as it reaches only this thread) is passed on to the parts in threads as a
        ``KeyboardInterrupt`` raised in their thread, which their engines take as Ctrl-C between two
        chunks of their step; every part's answer is awaited before this returns."""
        assert self._pool is not None
        self._interrupted = set()
        futures = {}
        for i in range(1, len(calls)):
            self._stepped.add(i)
            engine, ctrl, forces = calls[i]
            futures[i] = self._pool.submit(self._part_step, i, engine, ctrl, forces, nsteps)
        try:
            self._stepped.add(0)
            e, c, f = calls[0]
            results[0] = e.step(c, nsteps, f)
        except BaseException as err:
            errors.append(err)
            self._interrupt_parts(futures)
        for i, fut in futures.items():
            while True:
                try:
                    results[i] = fut.result()
                    break
                except BaseException as err:  # noqa: BLE001 - raised by step, once every part has answered
                    errors.append(err)
                    if fut.done() and fut.exception() is err:  # the part's own error
                        break
                    self._interrupt_parts(futures)  # raised here while waiting (a signal): stop the parts
        with self._lock:  # every part has answered: no thread of the pool is a part's any more
            self._threads.clear()

    def _part_step(self, i: int, engine: Engine, ctrl: torch.Tensor, forces: BodyForces | None, nsteps: int) -> Any:
        """Part ``i``'s step, in a pool thread that :meth:`_interrupt_parts` may interrupt while it runs."""
        with self._lock:
            if i in self._interrupted:  # stopped before it began: it changed nothing, and has nothing to revert
                self._stepped.discard(i)
                raise KeyboardInterrupt
            self._threads[i] = threading.get_ident()
        try:
            return engine.step(ctrl, nsteps, forces)
        finally:
            with self._lock:  # no interrupt reaches this thread once its step is over
                self._threads.pop(i, None)
                _async_raise(threading.get_ident(), None)

    def _interrupt_parts(self, parts: Any) -> None:
        """Tell ``parts`` to stop this step: ``KeyboardInterrupt`` raised in the thread of each one stepping
        (once per part and step: a second one could land after the part's step, in the pool's own loop, and
        end its thread); one whose thread has not begun yet does not begin (:meth:`_part_step`)."""
        with self._lock:
            for i in parts:
                if i not in self._interrupted:
                    self._interrupted.add(i)
                    ident = self._threads.get(i)
                    if ident is not None:
                        _async_raise(ident, KeyboardInterrupt)

    def revert(self, envs: torch.Tensor) -> None:
        mask = torch.as_tensor(envs, dtype=torch.bool)
        for i in sorted(self._stepped):  # a part whose step never began has nothing to undo
            part = mask[self._rows(i)]
            if bool(part.any()):
                self._engines[i].revert(part.contiguous())

    # ------------------------------------------------------------------
    # frames and readings
    # ------------------------------------------------------------------
    def body_pose(self, ids: np.ndarray) -> tuple[Any, Any]:
        return _LazyPair([e.body_pose(ids) for e in self._engines], _join)  # type: ignore[return-value]

    def body_velocity(self, ids: np.ndarray) -> tuple[Any, Any]:
        return _LazyPair([e.body_velocity(ids) for e in self._engines], _join)  # type: ignore[return-value]

    def site_pose(self, ids: np.ndarray) -> tuple[Any, Any]:
        return _LazyPair([e.site_pose(ids) for e in self._engines], _join)  # type: ignore[return-value]

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[Any, Any]:
        got = [e.site_jacobian(site_id, cols) for e in self._engines]
        return _join([g[0] for g in got]), _join([g[1] for g in got])

    def sensor(self, sensor_id: int) -> Any:
        return _join([e.sensor(sensor_id) for e in self._engines])

    def contact_forces(self, body_ids: np.ndarray) -> Any:
        return _join([e.contact_forces(body_ids) for e in self._engines])

    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> Any:
        out = []
        for i, e in enumerate(self._engines):
            rows = self._rows(i)
            out.append(
                e.cast_rays(
                    origins[rows].to(e.dtype).contiguous(), directions[rows].to(e.dtype).contiguous(), exclude_body
                )
            )
        return _join(out)

    def model_fields(self) -> dict[str, np.ndarray]:
        raise UnsupportedFeatureError(
            self.name,
            "model_fields",
            "a mixed backend holds one model per engine; compare each engine with MuJoCo alone"
            " (simbackend parity --sim ENGINE)",
        )

    # ------------------------------------------------------------------
    # per-env model fields
    # ------------------------------------------------------------------
    def read_params(self, field: str) -> np.ndarray | None:
        got = [e.read_params(field) for e in self._engines]
        if all(g is None for g in got):
            return None
        from simbackend.randomization import FIELDS

        model = np.asarray(getattr(self.info, FIELDS[field][0]), np.float64)
        return np.concatenate(
            [
                np.broadcast_to(model, (e.num_envs,) + model.shape) if g is None else np.asarray(g, np.float64)
                for e, g in zip(self._engines, got)
            ]
        )

    def write_params(self, env_ids: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        split = self._split(env_ids)
        done: list[tuple[int, np.ndarray, dict[str, np.ndarray]]] = []  # what a later refusal puts back
        try:
            for i, local, rows in split:
                old = {f: self._part_field(i, f)[local] for f in values} if len(split) > 1 else {}
                part = {f: np.ascontiguousarray(np.asarray(v)[rows]) for f, v in values.items()}
                self._engines[i].write_params(local, part)
                done.append((i, local, old))
        except BaseException:
            # a part refused after an earlier one wrote: the earlier ones get their values back, so that
            # a refused write leaves every env as it was
            for i, local, old in done:
                self._engines[i].write_params(local, old)
            raise

    def _part_field(self, i: int, field: str) -> np.ndarray:
        got = self._engines[i].read_params(field)
        if got is not None:
            return np.array(got, np.float64)
        from simbackend.randomization import FIELDS

        model = np.asarray(getattr(self.info, FIELDS[field][0]), np.float64)
        return np.broadcast_to(model, (self._engines[i].num_envs,) + model.shape).copy()

    # ------------------------------------------------------------------
    # snapshots: [part, the part's own row, zeros]
    # ------------------------------------------------------------------
    @property
    def state_width(self) -> int:
        if not self._widths:
            return super().state_width
        return 1 + max(self._widths)

    def save_state(self, env_ids: np.ndarray) -> Any:
        out = np.zeros((len(env_ids), self.state_width), np.float64)
        for i, local, rows in self._split(env_ids):
            out[rows, 0] = self._held[i]
            out[rows, 1 : 1 + self._widths[i]] = _tensor(self._engines[i].save_state(local)).cpu().numpy()
        return out

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[Any, Any]:
        r = rows.cpu()
        qpos = np.empty((len(env_ids), self.info.nq))
        qvel = np.empty((len(env_ids), self.info.nv))
        for i, local, pos in self._split(env_ids):
            k, width = self._held[i], self._widths[i]
            mine = r[pos]
            tag, pad = mine[:, 0], mine[:, 1 + width :]
            wrong = (tag != k) | (pad != 0).any(dim=1) if pad.shape[1] else tag != k
            if bool(wrong.any()):
                bad = np.asarray(env_ids)[pos][wrong.numpy()]
                made = mine[int(np.flatnonzero(wrong.numpy())[0]), 0].item()
                src = self._names[int(made)] if float(made).is_integer() and 0 <= made < len(self._names) else None
                raise SnapshotMismatchError(
                    f"state (env_ids {bad[:8].tolist()}): rows made by"
                    f" {f'an env of {src!r}' if src else 'no engine of this mix'}, given to envs of"
                    f" {self._names[k]!r} ({self._range(k)}); a snapshot holds one engine's own state: move states"
                    " between engines with set_state(qpos, qvel) or set_named_state"
                )
            q, v = self._engines[i].check_saved(local, mine[:, 1 : 1 + width].contiguous())
            qpos[pos], qvel[pos] = _tensor(q).cpu().numpy(), _tensor(v).cpu().numpy()
        return qpos, qvel

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        r = rows.cpu()
        for i, local, pos in self._split(env_ids):
            self._engines[i].restore_state(local, r[torch.as_tensor(pos)][:, 1 : 1 + self._widths[i]].contiguous())

    # ------------------------------------------------------------------
    # resources
    # ------------------------------------------------------------------
    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._close_parts()

    def _close_parts(self) -> None:
        errors = []
        for e in self._engines:
            try:
                e.close()
            except Exception as err:  # noqa: BLE001 - every part is closed; the first error is raised after
                errors.append(err)
        self._engines = []
        self.part_engines = ()
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------
    # layout
    # ------------------------------------------------------------------
    def _range(self, k: int) -> str:
        return env_range(int(self._starts[k]), int(self._starts[k + 1]))

    def _rows(self, i: int) -> slice:
        """The rows of the ``i``-th part holding envs."""
        k = self._held[i]
        return slice(int(self._starts[k]), int(self._starts[k + 1]))

    def _split(self, env_ids: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(part index among those holding envs, local ids, positions in env_ids)`` for each part
        holding some of ``env_ids`` (their order kept)."""
        ids = np.asarray(env_ids, np.int64)
        k = np.searchsorted(self._starts, ids, side="right") - 1
        out = []
        for part in np.unique(k):
            pos = np.flatnonzero(k == part)
            out.append((self._held.index(int(part)), ids[pos] - self._starts[part], pos))
        return out


def mixed_engine_class(sim: str, num_envs: int, device: Any, options: Mapping[str, Any]) -> type[MixedEngine] | str:
    """The :class:`MixedEngine` subclass of mix spec ``sim`` for ``num_envs`` envs, every part's engine
    class loaded and its options (``options[<engine>]`` and the common ones) checked; builds nothing.
    A spec of one engine (``"mujoco:128"`` with 128 envs) gives that engine's name: the ordinary backend."""
    from simbackend._validate import positive_int
    from simbackend.devices import require_device
    from simbackend.options import parse_options
    from simbackend.plugins import get_backend_factory

    num_envs = positive_int(num_envs, "num_envs")
    spec = parse_mix(sim, num_envs)
    if len(spec.engines) == 1:
        return spec.engines[0]
    if options.get("shards") is not None:
        raise InvalidArgumentError(
            f"shards: a mixed backend ({spec.name!r}) runs its engines in this process; shards compose copies"
            " of one engine (name one engine, or leave shards out)"
        )
    dev = require_device(device)
    if dev.type != "cpu":
        raise InvalidArgumentError(f"device: a mixed backend ({spec.name!r}) runs on the CPU, got {str(dev)!r}")
    mix = []
    for name, count in zip(spec.engines, spec.counts):
        cls = get_backend_factory(name)
        if not (isinstance(cls, type) and issubclass(cls, Engine)):
            raise _bad(sim, f"backend {name!r} is registered as a factory, not an Engine class; only engines mix")
        if "cpu" not in cls.devices:
            raise _bad(sim, f"engine {name!r} does not run on the CPU, where a mixed backend runs")
        opts = parse_options(name, options, cls.options)
        mix.append((name, cls, count, dict(opts.engine)))
    dtype = torch.float32 if any(cls.dtype == torch.float32 for _, cls, _, _ in mix) else torch.float64
    dists: list[str] = []
    for _, cls, _, _ in mix:
        dists += [d for d in cls.distributions if d not in dists]
    attrs = {
        "name": spec.name,
        "dtype": dtype,
        "mix": tuple(mix),
        "distributions": tuple(dists),
        "__module__": __name__,
        "__doc__": f"The mixed engine {spec.name!r} (see :class:`MixedEngine`).",
    }
    return type(f"MixedEngine[{spec.name}]", (MixedEngine,), attrs)
