"""Recordings: what some envs of any backend did, streamed to one HDF5 file.

Why HDF5 (``h5py``): a recording grows row by row while the simulation runs,
and must reach disk as it goes (a multi-gigabyte run never sits in memory);
HDF5 datasets are resizable and chunked, so rows are appended a chunk at a
time and any slice is read back without loading the rest; the header,
names and model live in the same single file; and HDF5 is what the field
already uses for trajectories (robomimic, ManiSkill), readable from any
language. (``npz`` cannot append; ``zarr`` writes a directory of files.)

Format ``simbackend-recording``, version 1 (:data:`VERSION`):

``/`` attributes
    ``format``, ``version``, ``backend`` (the recording backend's name),
    ``fingerprint`` (``ModelInfo.fingerprint``), ``num_envs`` (of the
    backend), ``physics_dt`` (s), ``nq``, ``nv``, ``nu``, ``snapshot_width``
    (0 when the backend has no snapshots), ``plan`` (a randomization plan as
    JSON, or ``""``), ``metadata`` (JSON), ``simbackend`` (version),
    ``created`` (ISO 8601), ``write_kinds`` (JSON list: the codes of
    ``events/kind``), ``delegated`` (JSON list: the model elements whose
    physics the recording engine took from MuJoCo, ``capabilities.delegated``;
    absent in files written before 0.8, read as none).
``/model``
    the compiled MuJoCo model as MJB bytes (``uint8``), so that the recording
    replays and renders without the files the model came from.
``/names/{body,joint,actuator}``, ``/layout/*``
    names, and each joint's type and qpos/qvel columns (``joint_type``,
    ``joint_qposadr``, ``joint_dofadr``), so a reader needs no engine;
    ``/layout/params`` lists the per-env parameter fields (JSON attribute).
``/env_ids`` ``(k,)``
    the recorded envs (ids in the recording backend).
``/rows/*``: one row per event on the timeline, ``T`` rows
    ``nsteps (T,)`` int32: substeps of the ``step`` that produced the row (0
    for a write: a state or parameter change between steps; row 0, the
    state when recording started, is one); ``time (T, k)`` float64;
    ``qpos (T, k, nq)``, ``qvel (T, k, nv)``, ``ctrl (T, k, nu)`` float32
    (the controls last applied, clamped); ``diverged (T, k)`` bool.
``/events/*``: one entry per recorded env per write, ``E`` entries
    ``row (E,)`` (the write row), ``env (E,)`` (position in ``env_ids``),
    ``kind (E,)`` (index into ``write_kinds``), and the env's complete state
    after the write: the named state (``time``, ``qpos``, ``qvel``, ``ctrl``,
    ``body_pos``, ``body_quat``, ``body_lin_vel``, ``body_ang_vel``,
    ``params (E, P)`` float64, the per-env parameters flattened in
    ``/layout/params`` order) and, where the backend has them, its snapshot
    ``snapshot (E, S)`` float64 (exact restore on the same backend).

Rows are buffered ``chunk_rows`` at a time and appended to the datasets; the
memory a recording takes does not grow with its length. One ``Recorder`` at a
time writes a file.

:class:`Recording` checks all of the above when it opens a file, once, before
any of it is used (every shape, dtype and attribute against the header and the
stored model, every float finite) and raises one
:class:`~simbackend.errors.RecordingError` naming the dataset otherwise.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    InvalidArgumentError,
    ModelLoadError,
    RecordingError,
    SnapshotMismatchError,
    format_shape,
)
from simbackend.model_info import JOINT_BALL, JOINT_FREE
from simbackend.state import BODY_FIELDS, NamedState

FORMAT = "simbackend-recording"
VERSION = 1
#: the writes a recording notes, in the order of the codes of ``events/kind``
WRITE_KINDS = (
    "start",
    "set_state",
    "set_physics_state",
    "set_named_state",
    "apply_init_randomization",
    "apply_interval_randomization",
    "apply_body_velocity_delta",
)
SUFFIXES = (".h5", ".hdf5")


def _h5py() -> Any:
    from simbackend._extras import require_extra

    require_extra("h5py", purpose="recordings")
    import h5py

    return h5py


def check_output_path(path: Any, argument: str, suffixes: Sequence[str], overwrite: bool = True) -> Path:
    """``path`` as a Path whose folder exists and whose suffix is one of ``suffixes``; one-line errors."""
    if not isinstance(path, (str, Path)):
        raise ArgumentTypeError(f"{argument}: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise InvalidArgumentError(f"{argument}: expected a {' or '.join(suffixes)} file, got {str(p)!r}")
    if not p.parent.is_dir():
        raise InvalidArgumentError(f"{argument}: folder {str(p.parent)!r} does not exist")
    if p.is_dir():
        raise InvalidArgumentError(f"{argument}: {str(p)!r} is a folder")
    if p.exists() and not overwrite:
        raise InvalidArgumentError(f"{argument}: {str(p)!r} exists (overwrite=True replaces it)")
    return p


def _joint_widths(joint_type: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(joint_type)
    return (
        np.where(t == JOINT_FREE, 7, np.where(t == JOINT_BALL, 4, 1)),
        np.where(t == JOINT_FREE, 6, np.where(t == JOINT_BALL, 3, 1)),
    )


def _row_spec(k: int, nq: int, nv: int, nu: int) -> dict[str, tuple[tuple[int, ...], Any, tuple[str, ...]]]:
    """``rows/<name>``: ``(shape of one row, dtype written, names of the shape's sizes)``."""
    return {
        "nsteps": ((), np.int32, ()),
        "time": ((k,), np.float64, ("k",)),
        "qpos": ((k, nq), np.float32, ("k", "nq")),
        "qvel": ((k, nv), np.float32, ("k", "nv")),
        "ctrl": ((k, nu), np.float32, ("k", "nu")),
        "diverged": ((k,), np.bool_, ("k",)),
    }


def _event_spec(
    nq: int, nv: int, nu: int, nb: int, P: int, S: int
) -> dict[str, tuple[tuple[int, ...], Any, tuple[str, ...]]]:
    """``events/<name>``: ``(shape of one entry, dtype written, names of the shape's sizes)``;
    ``nb`` bodies without the world, ``P`` parameter columns, ``S`` snapshot width (0: none)."""
    return {
        "row": ((), np.int64, ()),
        "env": ((), np.int64, ()),
        "kind": ((), np.int8, ()),
        "time": ((), np.float64, ()),
        "qpos": ((nq,), np.float32, ("nq",)),
        "qvel": ((nv,), np.float32, ("nv",)),
        "ctrl": ((nu,), np.float32, ("nu",)),
        "params": ((P,), np.float64, ("P",)),
        **{f"body_{b}": ((nb, w), np.float32, ("nbody-1", str(w))) for b, w in BODY_FIELDS.items()},
        **({"snapshot": ((S,), np.float64, ("snapshot_width",))} if S else {}),
    }


#: the Recorders writing now, by resolved path: a second one on the same file is refused
_WRITING: weakref.WeakValueDictionary[str, Recorder] = weakref.WeakValueDictionary()


class Recorder:
    """Records envs ``env_ids`` of ``sim`` to ``path`` from now on, as the backend runs.

    The recorder observes the backend (:meth:`SimBackend.add_observer`): every
    ``step`` appends a row, and every write between steps that touches a
    recorded env (``set_state``, a randomization, a snapshot restore, ...)
    appends a write row and an event holding those envs' complete new state.
    Use it as a context manager, or call :meth:`close`; ``sim`` can be any
    backend.

    Args:
        sim: the backend.
        path: the ``.h5``/``.hdf5`` file to write (its folder must exist).
        env_ids: the envs to record (ids, a mask, or ``None`` for all).
        chunk_rows: rows kept in memory before they are appended to the file.
        plan: the :class:`~simbackend.randomization.RandomizationPlan` in use,
            stored for reference (its values reach the file anyway, through the
            per-env parameters of every event).
        metadata: JSON-serialisable data of the caller's (task, policy, seed...).
        compression: ``"lzf"`` (fast, default), ``"gzip"`` or ``None``.
        overwrite: replace an existing file.

    Raises:
        InvalidArgumentError: for a bad argument, and for a ``path`` that another
            ``Recorder`` is writing, or that HDF5 cannot create (open in a
            :class:`Recording` or another program): nothing is written then.
    """

    sim: Any
    closed: bool

    def __init__(
        self,
        sim: Any,
        path: Any,
        env_ids: Any = None,
        *,
        chunk_rows: int = 256,
        plan: Any = None,
        metadata: dict | None = None,
        compression: str | None = "lzf",
        overwrite: bool = True,
    ):
        from simbackend.contract import SimBackend
        from simbackend.models import model_to_bytes
        from simbackend.randomization import FIELDS, RandomizationPlan

        if not isinstance(sim, SimBackend):
            raise ArgumentTypeError(f"sim: expected a SimBackend, got {type(sim).__name__}")
        if sim.closed:
            raise BackendClosedError(f"sim: backend {sim.name!r} is closed")
        self.path = check_output_path(path, "path", SUFFIXES, overwrite)
        key = os.path.realpath(self.path)
        other = _WRITING.get(key)
        if other is not None and not other.closed:
            raise InvalidArgumentError(
                f"path: {str(self.path)!r} is being written by another Recorder (of backend {other.sim.name!r});"
                " close that one first or write another file"
            )
        ids = V.env_ids(env_ids, sim.num_envs)
        ids.flags.writeable = False  # the backend validates a read-only id array once (every step reads these rows)
        if not ids.size:
            raise InvalidArgumentError("env_ids: no env to record")
        self.chunk_rows = V.positive_int(chunk_rows, "chunk_rows")
        if compression not in ("lzf", "gzip", None):
            raise InvalidArgumentError(f"compression: expected 'lzf', 'gzip' or None, got {compression!r}")
        if plan is not None and not isinstance(plan, RandomizationPlan):
            raise ArgumentTypeError(f"plan: expected a RandomizationPlan or None, got {type(plan).__name__}")
        try:
            meta = json.dumps({} if metadata is None else metadata)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"metadata: not JSON-serialisable ({e})") from None
        info = sim.info
        if info.compiled is None:
            raise InvalidArgumentError(f"sim: backend {sim.name!r} holds no compiled model to store in the recording")
        self.sim, self.env_ids = sim, ids
        k, nq, nv, nu, nb = ids.size, info.nq, info.nv, info.nu, info.nbody - 1
        self._snap = bool(sim.capabilities.snapshot_restore)
        S = sim.snapshot_layout.width if self._snap else 0
        self._fields = list(FIELDS)
        P = sum(int(np.prod(np.asarray(getattr(info, FIELDS[f][0])).shape)) for f in self._fields)
        h5 = _h5py()
        # no chunk cache: rows arrive a whole chunk at a time, so a cache would only hold memory (1 MB per dataset)
        try:
            self._file = f = h5.File(self.path, "w", rdcc_nbytes=0)
        except OSError as e:  # HDF5 refuses before it truncates anything
            raise InvalidArgumentError(
                f"path: {str(self.path)!r} cannot be written, is it open in a Recording or another program?"
                f" (h5py: {' '.join(str(e).split())})"
            ) from e
        try:
            f.attrs.update(
                {
                    "format": FORMAT,
                    "version": VERSION,
                    "backend": sim.name,
                    "fingerprint": info.fingerprint,
                    "num_envs": sim.num_envs,
                    "physics_dt": sim.physics_dt,
                    "nq": nq,
                    "nv": nv,
                    "nu": nu,
                    "snapshot_width": S,
                    "plan": "" if plan is None else plan.to_json(),
                    "metadata": meta,
                    "simbackend": _version(),
                    "created": datetime.datetime.now(datetime.UTC).isoformat(),
                    "write_kinds": json.dumps(WRITE_KINDS),
                    "delegated": json.dumps(sorted(sim.capabilities.delegated)),
                }
            )
            f.create_dataset("model", data=np.frombuffer(model_to_bytes(info.compiled), np.uint8))
            strings = h5.string_dtype()
            for kind, names in (
                ("body", info.body_names[1:]),
                ("joint", info.joint_names),
                ("actuator", info.actuator_names),
            ):
                f.create_dataset(f"names/{kind}", data=np.array(names, dtype=object), dtype=strings)
            for name in ("joint_type", "joint_qposadr", "joint_dofadr"):
                f.create_dataset(f"layout/{name}", data=np.asarray(getattr(info, name), np.int64))
            f.create_dataset("layout/params", data=np.array(self._fields, dtype=object), dtype=strings)
            f["layout/params"].attrs["shapes"] = json.dumps(
                [list(np.asarray(getattr(info, FIELDS[n][0])).shape) for n in self._fields]
            )
            f.create_dataset("env_ids", data=ids)
            opts = {"compression": compression} if compression else {}
            c = self.chunk_rows

            def table(name: str, shape: tuple, dtype: Any) -> Any:
                return f.create_dataset(
                    name,
                    shape=(0,) + shape,
                    maxshape=(None,) + shape,
                    dtype=dtype,
                    chunks=(c,) + shape if all(shape) else None,
                    **opts,
                )

            self._row_spec = {n: (shape, dt) for n, (shape, dt, _) in _row_spec(k, nq, nv, nu).items()}
            self._event_spec = {n: (shape, dt) for n, (shape, dt, _) in _event_spec(nq, nv, nu, nb, P, S).items()}
            self._row_sets = {n: table(f"rows/{n}", shape, dt) for n, (shape, dt) in self._row_spec.items()}
            self._event_sets = {n: table(f"events/{n}", shape, dt) for n, (shape, dt) in self._event_spec.items()}
        except BaseException:
            f.close()
            raise
        self._row_buf = {n: np.zeros((c,) + shape, dt) for n, (shape, dt) in self._row_spec.items()}
        self._event_buf = {n: np.zeros((c,) + shape, dt) for n, (shape, dt) in self._event_spec.items()}
        self._nrow_buf = self._nevent_buf = 0
        self.rows_written = 0  # rows on the timeline so far (buffered included)
        self.closed = False
        _WRITING[key] = self
        sim.add_observer(self)
        self.on_write(sim, ids, "start")

    # ------------------------------------------------------------------
    # the observer protocol
    # ------------------------------------------------------------------
    def on_step(self, sim: Any, nsteps: int, info: dict) -> None:
        """A ``step`` ended: append the recorded envs' new row."""
        self._append_row(nsteps, info["diverged"].cpu().numpy()[self.env_ids])

    def on_write(self, sim: Any, env_ids: np.ndarray, what: str) -> None:
        """Some envs changed between steps: a write row, and an event per recorded env touched."""
        touched = np.flatnonzero(np.isin(self.env_ids, env_ids))
        if not touched.size:
            return
        row = self.rows_written
        self._append_row(0, np.zeros(self.env_ids.size, bool))
        ids = self.env_ids[touched]
        state = sim.get_named_state(ids)
        snap = sim.get_physics_state(ids).cpu().numpy() if self._snap else None
        buf = self._row_buf  # the write row just appended holds these envs' state
        last = self._nrow_buf - 1
        qpos, qvel, ctrl = buf["qpos"][last, touched], buf["qvel"][last, touched], buf["ctrl"][last, touched]
        params = np.concatenate([state.params[n].cpu().numpy().reshape(len(ids), -1) for n in self._fields], 1)
        kind = WRITE_KINDS.index(what) if what in WRITE_KINDS else -1
        for i, pos in enumerate(touched):
            entry = {
                "row": row,
                "env": pos,
                "kind": kind,
                "time": state.time[i].item(),
                "qpos": qpos[i],
                "qvel": qvel[i],
                "ctrl": ctrl[i],
                "params": params[i],
                **{f"body_{b}": getattr(state, f"body_{b}")[i].cpu().numpy() for b in BODY_FIELDS},
            }
            if snap is not None:
                entry["snapshot"] = snap[i]
            if self._nevent_buf == self.chunk_rows:
                self._flush_events()
            for name, value in entry.items():
                self._event_buf[name][self._nevent_buf] = value
            self._nevent_buf += 1

    # ------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------
    def _append_row(self, nsteps: int, diverged: np.ndarray) -> None:
        if self.closed:
            return
        sim, ids = self.sim, self.env_ids
        if self._nrow_buf == self.chunk_rows:
            self._flush_rows()
        i = self._nrow_buf
        b = self._row_buf
        b["nsteps"][i] = nsteps
        # the getters' values of the recorded rows only
        b["time"][i] = sim.get_time(ids).cpu().numpy()
        b["qpos"][i] = sim.get_qpos(ids).cpu().numpy()
        b["qvel"][i] = sim.get_qvel(ids).cpu().numpy()
        b["ctrl"][i] = sim.get_ctrl(ids).cpu().numpy()
        b["diverged"][i] = diverged
        self._nrow_buf += 1
        self.rows_written += 1

    @staticmethod
    def _append(datasets: dict, buffers: dict, n: int) -> None:
        """Append the first ``n`` buffered entries of every table to its dataset."""
        for name, ds in datasets.items():
            start = ds.shape[0]
            ds.resize(start + n, axis=0)
            ds[start:] = buffers[name][:n]

    def _flush_rows(self) -> None:
        if self._nrow_buf:
            self._append(self._row_sets, self._row_buf, self._nrow_buf)
            self._nrow_buf = 0

    def _flush_events(self) -> None:
        if self._nevent_buf:
            self._append(self._event_sets, self._event_buf, self._nevent_buf)
            self._nevent_buf = 0

    def flush(self) -> None:
        """Write the buffered rows and events to the file (and HDF5's own buffers to disk)."""
        if self.closed:
            return
        self._flush_rows()
        self._flush_events()
        self._file.flush()

    def close(self) -> None:
        """Stop recording: flush, stop observing the backend, close the file. Idempotent."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            if not self.sim.closed:
                self.sim.remove_observer(self)
            self._file.close()
            key = os.path.realpath(self.path)
            if _WRITING.get(key) is self:
                del _WRITING[key]

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _version() -> str:
    from simbackend import __version__

    return __version__


_KIND_WORDS = {"fiu": "numbers", "iu": "integers", "biu": "booleans or integers"}


def _kinds(dtype: Any) -> str:
    """The dtype kinds a dataset written as ``dtype`` may be read from."""
    return {"f": "fiu", "i": "iu", "u": "iu", "b": "biu"}[np.dtype(dtype).kind]


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _short(v: Any) -> str:
    text = " ".join(repr(v).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _unreadable(e: BaseException) -> str:
    """Why HDF5 could not read a file, for :class:`RecordingError`: h5py's message on one line."""
    reason = e.args[0] if isinstance(e, KeyError) and e.args else e
    return f"a damaged or truncated HDF5 file, or not HDF5 at all (h5py: {' '.join(str(reason).split())})"


def _check_finite(ds: Any, name: str, env_ids: np.ndarray | None, bad: Any) -> None:
    """Raise ``bad(name, ...)`` at the first row (entry) of ``ds`` holding NaN or inf; reads a few MB at a time.
    ``env_ids``: the recorded envs, when the axis after the rows is theirs."""
    n = ds.shape[0]
    row_bytes = max(1, int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize)
    block = max(1, (4 << 20) // row_bytes)
    if ds.chunks:  # whole chunks: none is decompressed twice
        block = max(ds.chunks[0], block // ds.chunks[0] * ds.chunks[0])
    for start in range(0, n, block):
        v = np.asarray(ds[start : start + block])
        finite = np.isfinite(v).reshape(len(v), -1).all(1)
        if finite.all():
            continue
        i = int(np.flatnonzero(~finite)[0])
        row = v[i]
        at = np.unravel_index(int(np.flatnonzero(~np.isfinite(row))[0]), row.shape) if row.ndim else ()
        value = row[at] if row.ndim else row
        where = f"row {start + i}" if env_ids is not None else f"entry {start + i}"
        if env_ids is not None and at:
            where += f", env {int(env_ids[at[0]])}" + (f", column {', '.join(map(str, at[1:]))}" if len(at) > 1 else "")
        elif at:
            where += f", column {', '.join(map(str, at))}"
        raise bad(name, f"non-finite value {float(value)} at {where}; a recording holds finite values only")


def _first_difference(got: Sequence[Any], want: Sequence[Any]) -> int:
    return next(i for i, (x, y) in enumerate(zip(got, want)) if x != y)


class _FileChecks:
    """The reads :class:`Recording` checks a file with, each failing with a
    :class:`~simbackend.errors.RecordingError` that names the attribute or dataset: header attributes
    of a type (:meth:`text`, :meth:`count`, :meth:`names_list`, :meth:`json_text`), datasets of a shape
    and dtype (:meth:`dataset`, :meth:`shaped`, :meth:`strings`)."""

    def __init__(self, f: Any, p: Path):
        self.f, self.p, self.h5 = f, p, _h5py()

    def bad(self, dataset: str, problem: str) -> RecordingError:
        return RecordingError(str(self.p), dataset, problem)

    # ---- header attributes
    def attribute(self, name: str, default: Any = None) -> Any:
        a = self.f.attrs
        if name not in a:
            if default is not None:
                return default
            raise self.bad(f"attribute {name}", "missing (a damaged or partial recording)")
        return a[name]

    def text(self, name: str, default: str | None = None) -> str:
        v = self.attribute(name, default)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        if not isinstance(v, str):
            raise self.bad(f"attribute {name}", f"expected a string, got {type(v).__name__} {_short(v)}")
        return v

    def json_text(self, name: str, text_: str) -> Any:
        try:
            return json.loads(text_)
        except ValueError as e:
            raise self.bad(f"attribute {name}", f"not JSON ({e})") from None

    def count(self, name: str, minimum: int) -> int:
        v = self.attribute(name)
        if not _is_int(v) or int(v) < minimum:
            raise self.bad(f"attribute {name}", f"expected an integer >= {minimum}, got {_short(v)}")
        return int(v)

    def names_list(self, name: str, default: str | None = None) -> tuple[str, ...]:
        v = self.json_text(name, self.text(name, default))
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.bad(f"attribute {name}", f"expected a JSON list of strings, got {_short(v)}")
        return tuple(v)

    # ---- datasets: presence, shapes and dtypes
    def dataset(self, name: str) -> Any:
        if name not in self.f:
            raise self.bad(name, "missing (a damaged or partial recording)")
        ds = self.f[name]
        if not isinstance(ds, self.h5.Dataset):
            raise self.bad(name, f"expected a dataset, got a {type(ds).__name__}")
        return ds

    def shaped(self, name: str, shape: Sequence[int], labels: Sequence[str], kinds: str) -> Any:
        ds = self.dataset(name)
        if tuple(ds.shape) != tuple(shape):
            raise self.bad(
                name, f"expected shape {format_shape(shape)} = {format_shape(labels)}, got {format_shape(ds.shape)}"
            )
        if ds.dtype.kind not in kinds:
            raise self.bad(name, f"expected {_KIND_WORDS[kinds]}, got dtype {ds.dtype}")
        return ds

    def strings(self, name: str, size: int | None, label: str) -> tuple[str, ...]:
        ds = self.dataset(name)
        if ds.ndim != 1 or (size is not None and ds.shape[0] != size):
            want = format_shape((size,)) + f" = ({label},)" if size is not None else "(n,)"
            raise self.bad(name, f"expected shape {want}, got {format_shape(ds.shape)}")
        if self.h5.check_string_dtype(ds.dtype) is None:
            raise self.bad(name, f"expected strings, got dtype {ds.dtype}")
        return tuple(s.decode() if isinstance(s, bytes) else str(s) for s in ds[()])


class Recording:
    """A recording read back (``Recording(path)``; a context manager): header, rows, events, model.

    Opening checks the whole file once, before any of it is used, against its
    header and against the model it stores (``/model``): every dataset the
    format names is there with the shape the header and the model give it
    (``T`` rows as ``rows/nsteps``, ``k`` envs as ``env_ids``, ``E`` events as
    ``events/row``; ``nq``, ``nv``, ``nu``, bodies, joints and per-env
    parameters as the stored model), with numeric (or string) values; every
    attribute is there with its type and agrees with the model; names and
    joint layout are the model's; env ids are distinct and below ``num_envs``;
    row 0 holds every recorded env's start state and every event sits on a
    write row; and every float value is finite (the datasets are read a few MB
    at a time). A file that fails raises :class:`~simbackend.errors.RecordingError`
    naming the dataset (expected and found shape, the first non-finite row,
    ...); one HDF5 cannot read (damaged, truncated, not HDF5) raises it with
    h5py's reason; another format or format version raises
    :class:`~simbackend.errors.SnapshotMismatchError`.

    Rows are read from the file when asked (:meth:`rows`), never all at once
    unless asked. Attributes mirror the file's header (see the module docstring).
    """

    def __init__(self, path: Any):
        if not isinstance(path, (str, Path)):
            raise ArgumentTypeError(f"path: expected a file path, got {type(path).__name__}")
        p = Path(path)
        if not p.is_file():
            raise InvalidArgumentError(f"path: no such file {str(p)!r}")
        if not os.access(p, os.R_OK):
            raise InvalidArgumentError(f"path: {str(p)!r} cannot be read (permission denied)")
        writer = _WRITING.get(os.path.realpath(p))
        if writer is not None and not writer.closed:
            raise InvalidArgumentError(
                f"path: {str(p)!r} is being written by a Recorder (of backend {writer.sim.name!r}); close it first"
            )
        h5 = _h5py()
        try:
            self._file = f = h5.File(p, "r")
        except OSError as e:
            raise RecordingError(str(p), None, _unreadable(e)) from e
        try:
            self._read_checked(f, p)
        except (OSError, KeyError, RuntimeError) as e:  # what h5py raises for a damaged object in a file it opened
            f.close()
            raise RecordingError(str(p), None, _unreadable(e)) from e
        except BaseException:
            f.close()
            raise

    def _read_checked(self, f: Any, p: Path) -> None:
        """Read the header and check the whole file against it and against the stored model (the
        checks of the class docstring, one step each below); sets the attributes."""
        file = _FileChecks(f, p)
        self._read_header(file)
        info = self._check_names_and_layout(file)
        row_sets, event_sets = self._check_shapes(file, info)
        self._check_values(file, row_sets, event_sets)
        if self.snapshot_width:
            self._check_snapshot_headers(file, event_sets["snapshot"])

    def _read_header(self, file: _FileChecks) -> None:
        """The format and version, then every header attribute with its type."""
        from simbackend.randomization import RandomizationPlan

        a, p = file.f.attrs, file.p
        if a.get("format") != FORMAT:
            raise SnapshotMismatchError(f"path: {str(p)!r} is not a simbackend recording (format {a.get('format')!r})")
        version = a.get("version")
        if not _is_int(version) or int(version) != VERSION:
            raise SnapshotMismatchError(
                f"path: recording format version {version!r}; this simbackend reads version {VERSION}"
            )
        self.path = p
        self.backend = file.text("backend")
        self.fingerprint = file.text("fingerprint")
        self.created = file.text("created")
        self.metadata = file.json_text("metadata", file.text("metadata"))
        self.write_kinds = file.names_list("write_kinds")
        #: the elements whose physics the recording engine took from MuJoCo (capabilities.delegated)
        self.delegated = file.names_list("delegated", "[]")
        self._plan_json = file.text("plan")
        if self._plan_json:
            try:
                RandomizationPlan.from_json(self._plan_json)
            except (ValueError, TypeError, LookupError) as e:
                raise file.bad("attribute plan", f"not a randomization plan ({' '.join(str(e).split())})") from None
        self.num_envs = file.count("num_envs", 1)
        dt = file.attribute("physics_dt")
        if isinstance(dt, (bool, np.bool_)) or not isinstance(dt, (int, float, np.integer, np.floating)):
            raise file.bad("attribute physics_dt", f"expected a finite number > 0 (s), got {_short(dt)}")
        if not (math.isfinite(float(dt)) and float(dt) > 0):
            raise file.bad("attribute physics_dt", f"expected a finite number > 0 (s), got {_short(dt)}")
        self.physics_dt = float(dt)
        self.nq, self.nv, self.nu = file.count("nq", 0), file.count("nv", 0), file.count("nu", 0)
        self.snapshot_width = file.count("snapshot_width", 0)

    def _check_names_and_layout(self, file: _FileChecks) -> Any:
        """The stored model, the header's sizes against it, its names, joint layout and per-env parameter
        fields; returns the model's :class:`~simbackend.models.info.ModelInfo`."""
        from simbackend.models.binary import model_from_bytes
        from simbackend.models.info import model_info
        from simbackend.randomization import FIELDS

        bad = file.bad
        model = file.dataset("model")
        if model.ndim != 1 or model.dtype != np.uint8:
            raise bad(
                "model", f"expected the MJB bytes (n,) uint8, got {model.dtype} of shape {format_shape(model.shape)}"
            )
        try:
            info = model_info(model_from_bytes(np.asarray(model[()], np.uint8).tobytes()))
        except ModelLoadError as e:
            raise bad("model", str(e)) from None
        for name, got, want in (("nq", self.nq, info.nq), ("nv", self.nv, info.nv), ("nu", self.nu, info.nu)):
            if got != want:
                raise bad(f"attribute {name}", f"the header says {got}, the stored model (model) has {name} = {want}")
        nj = len(info.joint_names)
        names: dict[str, tuple[str, ...]] = {}
        for kind, want_names, label in (
            ("body", info.body_names[1:], "nbody-1"),
            ("joint", info.joint_names, "njnt"),
            ("actuator", info.actuator_names, "nu"),
        ):
            names[kind] = file.strings(f"names/{kind}", len(want_names), label)
            if names[kind] != tuple(want_names):
                i = _first_difference(names[kind], want_names)
                raise bad(
                    f"names/{kind}",
                    f"entry {i} is {names[kind][i]!r}, the stored model's {kind} {i} is {want_names[i]!r}",
                )
        self.body_names, self.joint_names, self.actuator_names = names["body"], names["joint"], names["actuator"]
        layout: dict[str, np.ndarray] = {}
        for name in ("joint_type", "joint_qposadr", "joint_dofadr"):
            layout[name] = np.asarray(file.shaped(f"layout/{name}", (nj,), ("njnt",), "iu")[()], np.int64)
            want_layout = np.asarray(getattr(info, name), np.int64)
            if not np.array_equal(layout[name], want_layout):
                i = _first_difference(layout[name].tolist(), want_layout.tolist())
                raise bad(f"layout/{name}", f"entry {i} is {layout[name][i]}, the stored model has {want_layout[i]}")
        self.joint_type, self.joint_qposadr, self.joint_dofadr = (
            layout["joint_type"],
            layout["joint_qposadr"],
            layout["joint_dofadr"],
        )
        self.param_fields = file.strings("layout/params", None, "")
        shapes = file.json_text("layout/params", str(file.dataset("layout/params").attrs.get("shapes", "")))
        if (
            not isinstance(shapes, list)
            or len(shapes) != len(self.param_fields)
            or not all(isinstance(s, list) and all(_is_int(d) and d >= 0 for d in s) for s in shapes)
        ):
            raise bad(
                "layout/params",
                f"attribute shapes: expected a JSON list of {len(self.param_fields)} shapes, got {_short(shapes)}",
            )
        self.param_shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        for name, shape in zip(self.param_fields, self.param_shapes):
            if name not in FIELDS:
                raise bad("layout/params", f"{name!r} is not a per-env parameter (known: {', '.join(FIELDS)})")
            want_shape = tuple(np.asarray(getattr(info, FIELDS[name][0])).shape)
            if shape != want_shape:
                raise bad(
                    "layout/params",
                    f"{name!r} has shape {format_shape(shape)}, the stored model's is {format_shape(want_shape)}",
                )
        return info

    def _check_shapes(self, file: _FileChecks, info: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The env ids, and every row and event dataset with the shape the header and the model give it;
        returns the row and the event datasets by name."""
        bad = file.bad
        ids = file.dataset("env_ids")
        if ids.ndim != 1 or ids.shape[0] < 1 or ids.dtype.kind not in "iu":
            raise bad(
                "env_ids",
                f"expected shape (k,) with k >= 1 integers, got {ids.dtype} of shape {format_shape(ids.shape)}",
            )
        self.env_ids = np.asarray(ids[()], np.int64)
        k = self.env_ids.size
        if np.unique(self.env_ids).size != k or self.env_ids.min() < 0 or self.env_ids.max() >= self.num_envs:
            raise bad(
                "env_ids",
                f"expected distinct ids in [0, {self.num_envs}) (num_envs = {self.num_envs}),"
                f" got {self.env_ids.tolist()[:16]}",
            )
        nsteps, event_rows = file.dataset("rows/nsteps"), file.dataset("events/row")
        if nsteps.ndim != 1 or nsteps.shape[0] < 1:
            raise bad(
                "rows/nsteps", f"expected shape (T,) with T >= 1 (row 0: the start), got {format_shape(nsteps.shape)}"
            )
        if event_rows.ndim != 1:
            raise bad("events/row", f"expected shape (E,), got {format_shape(event_rows.shape)}")
        T, E = nsteps.shape[0], event_rows.shape[0]
        nb = info.nbody - 1
        P = sum(int(np.prod(s)) for s in self.param_shapes)
        row_sets = {
            name: file.shaped(f"rows/{name}", (T, *shape), ("T", *labels), _kinds(dt))
            for name, (shape, dt, labels) in _row_spec(k, info.nq, info.nv, info.nu).items()
        }
        event_sets = {
            name: file.shaped(f"events/{name}", (E, *shape), ("E", *labels), _kinds(dt))
            for name, (shape, dt, labels) in _event_spec(info.nq, info.nv, info.nu, nb, P, self.snapshot_width).items()
        }
        if not self.snapshot_width and "snapshot" in file.f.get("events", {}):
            raise bad("events/snapshot", "present, but the header says snapshot_width = 0")
        return row_sets, event_sets

    def _check_values(self, file: _FileChecks, row_sets: dict[str, Any], event_sets: dict[str, Any]) -> None:
        """The timeline's values: row 0 the start, events on write rows within range, every recorded env's
        start state, finite floats everywhere, times >= 0."""
        bad = file.bad
        nsteps = file.f["rows/nsteps"]
        T, k = nsteps.shape[0], self.env_ids.size
        self.nsteps = np.asarray(nsteps[()], np.int64)
        if self.nsteps.min() < 0 or self.nsteps[0] != 0:
            r = int(np.flatnonzero(self.nsteps < 0)[0]) if self.nsteps.min() < 0 else 0
            raise bad("rows/nsteps", f"{self.nsteps[r]} at row {r}; expected 0 at row 0 (the start) and >= 0 elsewhere")
        ev = {name: np.asarray(event_sets[name][()], np.int64) for name in ("row", "env", "kind")}
        for name, low, high in (("row", 0, T), ("env", 0, k), ("kind", -1, len(self.write_kinds))):
            out = (ev[name] < low) | (ev[name] >= high)
            if out.any():
                at = int(np.flatnonzero(out)[0])
                raise bad(f"events/{name}", f"{ev[name][at]} at entry {at}; expected values in [{low}, {high})")
        stepped = self.nsteps[ev["row"]] > 0
        if stepped.any():
            at = int(np.flatnonzero(stepped)[0])
            raise bad(
                "events/row",
                f"entry {at} is on row {ev['row'][at]}, a stepped row; events sit on write rows (nsteps 0)",
            )
        started = np.zeros(k, bool)
        started[ev["env"][ev["row"] == 0]] = True
        if not started.all():
            missing = self.env_ids[~started].tolist()
            raise bad("events/row", f"no start state (an event at row 0) for recorded envs {missing[:16]}")
        for prefix, sets, env_axis in (("rows", row_sets, True), ("events", event_sets, False)):
            for name, ds in sets.items():
                if ds.dtype.kind == "f":
                    _check_finite(ds, f"{prefix}/{name}", self.env_ids if env_axis else None, bad)
        times = np.asarray(event_sets["time"][()])
        if (times < 0).any():
            at = int(np.flatnonzero(times < 0)[0])
            raise bad("events/time", f"{times[at]} at entry {at}; expected times >= 0")

    def _check_snapshot_headers(self, file: _FileChecks, snapshots: Any) -> None:
        """Each snapshot's own header: this recording's backend, model fingerprint and width."""
        from simbackend.snapshot import HEADER_WIDTH, LAYOUT_VERSION, MAGIC, backend_code

        S, E = self.snapshot_width, snapshots.shape[0]
        fp = self.fingerprint
        header = [MAGIC, LAYOUT_VERSION, backend_code(self.backend), -1, -1, S]
        if len(fp) == 16 and all(c in "0123456789abcdef" for c in fp):
            header[3:5] = [int(fp[:8], 16), int(fp[8:], 16)]
        if S < HEADER_WIDTH:
            raise file.bad("attribute snapshot_width", f"expected 0 or at least {HEADER_WIDTH}, got {S}")
        heads = np.asarray(snapshots[:, :HEADER_WIDTH]).reshape(E, HEADER_WIDTH)
        wrong = (heads != np.asarray(header, np.float64)).any(1)
        if wrong.any():
            at = int(np.flatnonzero(wrong)[0])
            raise file.bad(
                "events/snapshot",
                f"the snapshot of entry {at} has header {heads[at].tolist()}; the recording's header gives"
                f" {header} (magic, layout version, backend {self.backend!r}, fingerprint {fp}, width)",
            )

    # ------------------------------------------------------------------
    def __len__(self) -> int:
        """``T``, the rows on the timeline."""
        return int(self.nsteps.size)

    @property
    def num_recorded(self) -> int:
        """``k``, the envs recorded."""
        return int(self.env_ids.size)

    @property
    def plan(self) -> Any:
        """The randomization plan stored with the recording, or ``None``."""
        from simbackend.randomization import RandomizationPlan

        return RandomizationPlan.from_json(self._plan_json) if self._plan_json else None

    @property
    def env_steps(self) -> int:
        """Env-steps recorded: stepped rows times recorded envs."""
        return int((self.nsteps > 0).sum()) * self.num_recorded

    def rows(self, name: str, rows: Any = slice(None), envs: Any = slice(None)) -> np.ndarray:
        """``rows/<name>`` for ``rows`` (a slice or ids) and env positions ``envs``: ``(t, e, ...)``
        (``nsteps``: ``(t,)``). Read from the file; only what is asked."""
        if name not in ("nsteps", "time", "qpos", "qvel", "ctrl", "diverged"):
            raise InvalidArgumentError(f"name: expected one of nsteps, time, qpos, qvel, ctrl, diverged, got {name!r}")
        ds = self._file[f"rows/{name}"]
        data = ds[rows] if not isinstance(rows, (list, np.ndarray)) else ds[np.asarray(rows)]
        return data if name == "nsteps" else data[:, envs]

    def env_positions(self, envs: Any) -> np.ndarray:
        """Positions in :attr:`env_ids` of recorded envs ``envs`` (recording-backend env ids), or all for ``None``."""
        if envs is None:
            return np.arange(self.num_recorded)
        ids = np.atleast_1d(np.asarray(envs, np.int64))
        missing = [int(i) for i in ids if i not in self.env_ids]
        if missing:
            raise InvalidArgumentError(f"envs: {missing} were not recorded; recorded envs: {self.env_ids.tolist()}")
        return np.array([int(np.flatnonzero(self.env_ids == i)[0]) for i in ids], np.int64)

    def events(self) -> dict[str, np.ndarray]:
        """Every event's ``row``, ``env`` (position) and ``kind``, ``(E,)`` each."""
        return {k: np.asarray(self._file[f"events/{k}"][()]) for k in ("row", "env", "kind")}

    def event_state(self, index: Any) -> NamedState:
        """The named state after events ``index`` (ints), one row per event."""
        idx = np.atleast_1d(np.asarray(index, np.int64))
        e = self._file["events"]

        def read(name: str) -> np.ndarray:
            return np.asarray(e[name][np.sort(idx)])[np.argsort(np.argsort(idx))]

        qpos, qvel = read("qpos"), read("qvel")
        wq, wv = _joint_widths(self.joint_type)
        params, col = {}, 0
        flat = read("params")
        for name, shape in zip(self.param_fields, self.param_shapes):
            size = int(np.prod(shape))
            params[name] = torch.as_tensor(flat[:, col : col + size].reshape((idx.size,) + tuple(shape)))
            col += size
        return NamedState(
            time=torch.as_tensor(read("time")),
            body_names=self.body_names,
            **{f"body_{b}": torch.as_tensor(read(f"body_{b}")) for b in BODY_FIELDS},
            joint_pos={
                j: torch.as_tensor(qpos[:, a : a + w]) for j, a, w in zip(self.joint_names, self.joint_qposadr, wq)
            },
            joint_vel={
                j: torch.as_tensor(qvel[:, a : a + w]) for j, a, w in zip(self.joint_names, self.joint_dofadr, wv)
            },
            actuator_ctrl={u: torch.as_tensor(read("ctrl")[:, k]) for k, u in enumerate(self.actuator_names)},
            params=params,
            fingerprint=self.fingerprint,
        )

    def event_snapshot(self, index: Any) -> torch.Tensor | None:
        """``(n, S)`` snapshots after events ``index``, or ``None`` if the backend had none."""
        if not self.snapshot_width:
            return None
        idx = np.atleast_1d(np.asarray(index, np.int64))
        data = np.asarray(self._file["events/snapshot"][np.sort(idx)])[np.argsort(np.argsort(idx))]
        return torch.as_tensor(data)

    def model(self) -> Any:
        """The compiled MuJoCo model the recording was made with (rebuilt from its MJB bytes)."""
        from simbackend.models import model_from_bytes

        return model_from_bytes(np.asarray(self._file["model"][()], np.uint8).tobytes())

    def make_backend(self, sim: str | None = None, num_envs: int | None = None, **kwargs: Any) -> Any:
        """A backend (``sim``, default the recording's) of the recorded model with ``num_envs``
        (default: the envs recorded), for replays and pictures."""
        from simbackend.registry import make_backend

        return make_backend(
            sim or self.backend, self.model(), self.num_recorded if num_envs is None else num_envs, **kwargs
        )

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Recording {str(self.path)!r} backend={self.backend!r} rows={len(self)} envs={self.env_ids.tolist()}>"
