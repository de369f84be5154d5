"""The process side of a shard: one ordinary engine behind a Ray actor.

:class:`ShardWorker` is a plain class; :mod:`simbackend.sharding.cluster` makes
it a Ray actor. It builds the engine of its envs from the driver's
:class:`~simbackend.engine.EngineBuild` (``num_envs`` = the shard's envs) and
serves the engine members by name. Everything crossing the process boundary is
numpy (Ray moves numpy arrays without pickling them element by element); the
worker turns the driver's arrays into the tensors the engine interface
promises (engine dtype, contiguous, on the engine's device) and every output
into a fresh numpy array (an engine may answer with views of its memory).

A call that changes the state (:data:`MUTATING`) answers with an
:class:`Update`: its result plus the shard's state after it, the frame reads
the driver asked to be sent along (so that getters need no round trip of their
own), and, when the driver keeps restart points, the engine's snapshot rows.
"""

from __future__ import annotations

import ctypes
import dis
import functools
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simbackend.engine import BodyForces, Engine, EngineBuild

#: engine members that change the state: their answer carries the state after them
MUTATING = ("step", "revert", "write_state", "restore_state", "write_params")
#: members that may be sent along with a mutating call (read keys: ``(member, *args)``)
PREFETCHABLE = ("body_pose", "body_velocity", "site_pose", "sensor", "contact_forces")
#: positions of real-tensor arguments, per member (ids stay host numpy arrays)
_REAL_ARGS = {"write_state": (1, 2), "step": (0,), "cast_rays": (0, 1)}
_F64_ARGS = {"check_saved": (1,), "restore_state": (1,)}
_MASK_ARGS = {"revert": (0,)}


@dataclass
class Interrupted:
    """The answer of a step that :meth:`ShardWorker.interrupt` stopped (the driver had a Ctrl-C):
    ``started`` says whether the engine's ``step`` had begun (then it is to be reverted; otherwise the
    engine is as it was and a revert would undo the step before)."""

    started: bool


@dataclass
class Update:
    """A mutating call's answer: ``result``, ``qpos``/``qvel`` after it, the frame reads asked for
    (``{key: value}``) and the engine's snapshot rows of every env (``None`` unless asked)."""

    result: Any
    qpos: np.ndarray
    qvel: np.ndarray
    reads: dict
    saved: np.ndarray | None


def to_numpy(x: Any) -> Any:
    """A fresh numpy copy of an engine output (tensor, array, tuple of them or ``None``)."""
    if x is None:
        return None
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):  # a tuple, or a frame member's lazy pair
        return tuple(to_numpy(v) for v in x)
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().copy()
    return np.array(x, copy=True)


class ShardWorker:
    """Hosts one engine at a time (a pooled actor hosts the next one after ``close``)."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.keep = False
        self._lock = threading.Lock()
        self._running: tuple[int, int] | None = None  # (step number, thread) of the step being run
        self._cancelled = -1  # steps up to this number are not to run (or to stop)

    def ready(self) -> tuple[int, str]:
        """``(pid, host name)``: the actor is up."""
        return os.getpid(), socket.gethostname()

    def build(self, engine_cls: type[Engine], build: EngineBuild, keep: bool, threads: int) -> dict[str, Any]:
        """Build an ``engine_cls`` from ``build`` (the class travels by reference: its module must be
        importable here, as an installed backend's is); answers what the driver declares for the whole backend."""
        if self.engine is not None:  # a pooled actor whose last backend was not closed cleanly
            self.close()
        if threads > 0:
            torch.set_num_threads(threads)
        self.engine = engine_cls(build)
        self.keep = keep and self.engine.capabilities.snapshot_restore
        qpos, qvel = self.engine.read_state()
        return {
            "capabilities": self.engine.capabilities,
            "notes": tuple(self.engine.notes),
            "state_width": self.engine.state_width if self.engine.capabilities.snapshot_restore else None,
            "update": self._update(None, ()),
        }

    def call(self, member: str, args: tuple, reads: tuple = (), seq: int = -1) -> Any:
        """Engine member ``member`` with ``args`` (numpy, converted here); a mutating member answers
        an :class:`Update` carrying the reads ``reads``. A call numbered ``seq`` (steps) can be
        stopped by :meth:`interrupt` and then answers :class:`Interrupted`; an error it raises
        carries ``step_started`` (whether the engine's member had begun)."""
        if seq < 0:
            return self._call(member, args, reads)
        engine = self._engine()
        fn = getattr(engine, member)
        inputs = self._inputs(member, args)
        returned = False
        try:
            with self._lock:
                if seq <= self._cancelled:
                    return Interrupted(started=False)
                self._running = (seq, threading.get_ident())  # from here on interrupt() may raise in this thread
            try:
                out = fn(*inputs)
                returned = True
            finally:
                with self._lock:
                    self._running = None
            return self._finish(member, out, reads)
        except KeyboardInterrupt as e:
            return Interrupted(started=returned or _entered(e))
        except BaseException as e:
            e.step_started = returned or _entered(e)  # type: ignore[attr-defined]
            raise

    def interrupt(self, seq: int) -> None:
        """Stop step ``seq`` as Ctrl-C would stop it in one process (it raises KeyboardInterrupt in
        the engine, which is interruptible between its chunks of substeps), or keep it from starting.
        Runs beside the call it stops (the actor's ``control`` concurrency group); raises at most once
        per step."""
        with self._lock:
            self._cancelled = max(self._cancelled, seq)
            if self._running is not None and self._running[0] <= seq:
                thread, self._running = self._running[1], None
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(KeyboardInterrupt))

    def _call(self, member: str, args: tuple, reads: tuple) -> Any:
        engine = self._engine()
        return self._finish(member, getattr(engine, member)(*self._inputs(member, args)), reads)

    def _finish(self, member: str, out: Any, reads: tuple) -> Any:
        """``out`` of engine member ``member`` as it crosses to the driver."""
        if member in MUTATING:
            return self._update(out, reads)
        if member in ("capabilities", "state_width"):
            return out
        if member == "model_fields":
            return {k: to_numpy(v) for k, v in out.items()}
        return to_numpy(out)

    def read(self, member: str, args: tuple) -> Any:
        """One read (a member of :data:`PREFETCHABLE`, ``read_params``, ...), as numpy; tuple
        arguments are id lists (the driver's hashable read keys)."""
        args = tuple(np.asarray(a, np.int64) if isinstance(a, tuple) else a for a in args)
        return to_numpy(getattr(self._engine(), member)(*args))

    def reads(self, keys: tuple) -> dict:
        """Several reads, keyed as asked."""
        return {key: self.read(key[0], key[1:]) for key in keys}

    def close(self) -> None:
        """Close the engine (the actor stays up, e.g. for a pool)."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    # ------------------------------------------------------------------
    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("this shard hosts no engine (closed)")
        return self.engine

    def _inputs(self, member: str, args: tuple) -> tuple:
        engine = self._engine()
        out = list(args)
        for i in _REAL_ARGS.get(member, ()):
            out[i] = torch.tensor(out[i], dtype=engine.dtype, device=engine.device)
        for i in _F64_ARGS.get(member, ()):
            out[i] = torch.tensor(out[i], dtype=torch.float64, device=engine.device)
        for i in _MASK_ARGS.get(member, ()):
            out[i] = torch.tensor(out[i], dtype=torch.bool, device=engine.device)
        if member == "step" and out[2] is not None:
            bodies, force, torque = out[2]
            out[2] = BodyForces(
                bodies,
                torch.tensor(force, dtype=engine.dtype, device=engine.device),
                torch.tensor(torque, dtype=engine.dtype, device=engine.device),
            )
        return tuple(out)

    def _update(self, result: Any, reads: tuple) -> Update:
        engine = self._engine()
        qpos, qvel = to_numpy(engine.read_state())
        saved = to_numpy(engine.save_state(np.arange(engine.num_envs))) if self.keep else None
        return Update(to_numpy(result), qpos, qvel, self.reads(reads), saved)


@functools.cache
def _resume_offset(code: Any) -> int:
    """Offset of the instruction where a call of ``code`` begins (an interrupt there ran no line of it)."""
    return next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)


def _entered(exc: BaseException) -> bool:
    """Whether ``exc``, caught in :meth:`ShardWorker.call`, left the engine member after the member
    began: it passed through the member's frame, and not from the instruction that starts it (an
    interrupt raised on arrival, before the engine took the state a revert goes back to)."""
    tb = exc.__traceback__
    callee = tb.tb_next if tb is not None else None  # tb: call's own frame
    if callee is None:
        return False
    return callee.tb_next is not None or callee.tb_lasti > _resume_offset(callee.tb_frame.f_code)
