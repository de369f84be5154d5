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
memory a recording takes does not grow with its length.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.errors import ArgumentTypeError, BackendClosedError, InvalidArgumentError, SnapshotMismatchError
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
    """

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
        self._file = f = h5.File(self.path, "w", rdcc_nbytes=0)
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

            self._row_spec = {
                "nsteps": ((), np.int32),
                "time": ((k,), np.float64),
                "qpos": ((k, nq), np.float32),
                "qvel": ((k, nv), np.float32),
                "ctrl": ((k, nu), np.float32),
                "diverged": ((k,), np.bool_),
            }
            self._event_spec = {
                "row": ((), np.int64),
                "env": ((), np.int64),
                "kind": ((), np.int8),
                "time": ((), np.float64),
                "qpos": ((nq,), np.float32),
                "qvel": ((nv,), np.float32),
                "ctrl": ((nu,), np.float32),
                "params": ((P,), np.float64),
                **{f"body_{b}": ((nb, w), np.float32) for b, w in BODY_FIELDS.items()},
                **({"snapshot": ((S,), np.float64)} if S else {}),
            }
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

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _version() -> str:
    from simbackend import __version__

    return __version__


class Recording:
    """A recording read back (``Recording(path)``; a context manager): header, rows, events, model.

    Rows are read from the file when asked (:meth:`rows`), never all at once
    unless asked. Attributes mirror the file's header (see the module docstring).
    """

    def __init__(self, path: Any):
        if not isinstance(path, (str, Path)):
            raise ArgumentTypeError(f"path: expected a file path, got {type(path).__name__}")
        p = Path(path)
        if not p.is_file():
            raise InvalidArgumentError(f"path: no such file {str(p)!r}")
        h5 = _h5py()
        try:
            self._file = f = h5.File(p, "r")
        except OSError as e:
            raise InvalidArgumentError(f"path: {str(p)!r} is not an HDF5 file ({' '.join(str(e).split())})") from None
        try:
            a = f.attrs
            if a.get("format") != FORMAT:
                raise SnapshotMismatchError(
                    f"path: {str(p)!r} is not a simbackend recording (format {a.get('format')!r})"
                )
            if int(a.get("version", -1)) != VERSION:
                raise SnapshotMismatchError(
                    f"path: recording format version {a.get('version')!r}; this simbackend reads version {VERSION}"
                )
            self.path = p
            self.backend = str(a["backend"])
            self.fingerprint = str(a["fingerprint"])
            self.num_envs = int(a["num_envs"])
            self.physics_dt = float(a["physics_dt"])
            self.nq, self.nv, self.nu = int(a["nq"]), int(a["nv"]), int(a["nu"])
            self.snapshot_width = int(a["snapshot_width"])
            self.metadata = json.loads(a["metadata"])
            self.created = str(a["created"])
            self.write_kinds = tuple(json.loads(a["write_kinds"]))
            #: the elements whose physics the recording engine took from MuJoCo (capabilities.delegated)
            self.delegated = tuple(json.loads(a.get("delegated", "[]")))
            self._plan_json = str(a["plan"])
            self.env_ids = np.asarray(f["env_ids"][()], np.int64)
            self.body_names = tuple(s.decode() if isinstance(s, bytes) else str(s) for s in f["names/body"][()])
            self.joint_names = tuple(s.decode() if isinstance(s, bytes) else str(s) for s in f["names/joint"][()])
            self.actuator_names = tuple(s.decode() if isinstance(s, bytes) else str(s) for s in f["names/actuator"][()])
            self.joint_type = np.asarray(f["layout/joint_type"][()])
            self.joint_qposadr = np.asarray(f["layout/joint_qposadr"][()])
            self.joint_dofadr = np.asarray(f["layout/joint_dofadr"][()])
            self.param_fields = tuple(s.decode() if isinstance(s, bytes) else str(s) for s in f["layout/params"][()])
            self.param_shapes = tuple(tuple(s) for s in json.loads(f["layout/params"].attrs["shapes"]))
            self.nsteps = np.asarray(f["rows/nsteps"][()], np.int64)
        except KeyError as e:
            f.close()
            raise SnapshotMismatchError(f"path: {str(p)!r} lacks {e} (a damaged or partial recording)") from None
        except BaseException:
            f.close()
            raise

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
