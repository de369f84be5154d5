"""The SimBackend contract: the front end every robot-learning component talks to.

One batched simulation of ``N = num_envs`` copies of one model. ``SimBackend``
validates and converts every input, resolves names, keeps the per-env
bookkeeping (time, controls, pending forces), applies the contract's
divergence rule and notifies observers; the physics is an
:class:`~simbackend.engine.Engine`, reached only through that interface. The
domain-randomization, snapshot, readout, height-scanner and picture calls are
served by services beside it (:mod:`simbackend.randomization.apply`,
:mod:`simbackend.snapshot`, :mod:`simbackend.readout`, :mod:`simbackend.scanner`,
:mod:`simbackend.playback.api`), each built on the engine's public members.

The conventions every backend shares (tensors, frames, quaternions, the qpos/qvel
layout, body quantities, ids, time, divergence) are written once, in
``docs/conventions.md``; each method's docstring states its shapes and units.

Errors (``simbackend.errors``): every public method validates all of its
arguments before it writes anything, so a call that raises leaves every env as
it was. After :meth:`SimBackend.close`, every public method raises
:class:`~simbackend.errors.BackendClosedError` (the properties describing the
model keep answering).

GPU backends (``capabilities.gpu``) never synchronise with the host in
``step``, ``set_state`` or a getter: shapes and dtypes are checked from tensor
metadata, ids come from host copies, and input *values* (NaN/inf, magnitudes)
are checked by device reductions whose verdict is read at the next call
(:mod:`simbackend.frontend.faults`). CPU backends raise at once.
"""

from __future__ import annotations

import contextlib
import copy
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from simbackend import _validate as V
from simbackend import checks
from simbackend.capabilities import Capabilities
from simbackend.devices import require_device
from simbackend.divergence import MAX_QPOS, MAX_QVEL, any_diverged, diverged_rows, forced_rows
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    IndexRangeError,
    InvalidArgumentError,
    InvalidQuaternionError,
    NonFiniteError,
    ReentrantCallError,
    ShardFailedError,
    SimBackendError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.frontend.bookkeeping import EnvBook
from simbackend.frontend.faults import DeferredFaults
from simbackend.frontend.guard import guard_public_methods
from simbackend.frontend.interrupts import HeldInterrupt
from simbackend.frontend.names import NameTable
from simbackend.math import quat_apply_inverse, quat_conj, quat_mul
from simbackend.model_info import ModelInfo
from simbackend.options import parse_options
from simbackend.playback.api import Playback, PlayCapabilities
from simbackend.randomization.apply import ActuatorGains, Prepared, Randomizer
from simbackend.randomization.plan import RandomizationPlan
from simbackend.readout import Readout
from simbackend.scanner import HeightScanner, check_scanner_arguments
from simbackend.snapshot import SnapshotLayout, Snapshots
from simbackend.state import NamedState

__all__ = ["ActuatorGains", "SimBackend"]

Names = str | Sequence[str]
Ids = Any  # int, sequence of ints, numpy array or torch tensor
PreStepControl = Callable[["SimBackend", torch.Tensor], Any]


@guard_public_methods
class SimBackend:
    """A batch of ``num_envs`` simulations of one model behind one engine.

    Build one with :func:`simbackend.make_backend` (``make_backend("mujoco",
    "arm7", 1024)``) or directly from an engine class:
    ``SimBackend(MuJoCoEngine, model, num_envs, *, device=None, seed=0,
    **options)``; the options every backend accepts are listed in
    :mod:`simbackend.options`, and ``<engine name>={...}`` holds the engine's own.

    Args:
        engine: the :class:`~simbackend.engine.Engine` subclass that simulates.
        model: an MJCF/URDF path, a ``mujoco.MjSpec`` or ``mujoco.MjModel``, or a
            built-in model name (:func:`simbackend.models.builtin_models`).
        num_envs: N >= 1.
        device: torch device of every returned tensor (and of the physics on GPU
            engines); ``None``: ``"cpu"``.
        seed: seed of the backend's random streams, an integer in ``[0, 2**63)``.
    """

    def __init__(self, engine: Any, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any):
        self._closed = True  # until the engine is built: a failed construction leaves nothing to close
        self._lost: ShardFailedError | None = None  # a shard lost: only close() answers (frontend.guard)
        if not (isinstance(engine, type) and issubclass(engine, Engine)):
            raise ArgumentTypeError(f"engine: expected an Engine subclass (simbackend.engine.Engine), got {engine!r}")
        num_envs = V.positive_int(num_envs, "num_envs")
        seed = V.seed_value(seed)
        opts = parse_options(engine.name, options, engine.options)
        dev = require_device(device, allowed=engine.devices)
        from simbackend.models import compile_model, model_info  # MuJoCo's compiler reads every model

        m = compile_model(model, **opts.model)
        if m is model or opts.timestep is not None:
            m = copy.copy(m)  # never hold (or edit) a model the caller passed in
        if opts.timestep is not None:
            m.opt.timestep = opts.timestep
        info = model_info(m)
        # the front end's per-env tables first: an impossible num_envs fails here, before an engine allocates
        self._book = EnvBook(info, num_envs, dev, engine.dtype)
        build = EngineBuild(info=info, source=model, num_envs=num_envs, device=dev, options=opts, seed=seed)
        if opts.shards is None:
            self._engine: Engine = engine(build)
        else:  # K Ray actors, each an ordinary engine of about N/K envs (simbackend.sharding)
            if dev.type != "cpu":
                raise InvalidArgumentError(f"shards: sharded backends run on CPU, got device {str(dev)!r}")
            from simbackend.sharding.engine import ShardedEngine

            self._engine = ShardedEngine(build, inner=engine)
        self._info, self._num_envs, self._device, self._seed = info, num_envs, dev, seed
        self._dtype: torch.dtype = engine.dtype
        self._names = NameTable(info)
        self._host_ids = V.HostIds()
        self._dr = Randomizer(info, num_envs, dev, self._engine)
        self._dr.ctrl_source = self._book  # a first action latency starts from the controls last applied
        self._snapshots = Snapshots(self, self._engine, self._book, self._dr, self._check_snapshot_state)
        self._readout = Readout(self, self._host_ids)
        self._playback = Playback(self, self._host_ids)
        self._faults: DeferredFaults | None = None
        # decided on first use, from capabilities.gpu, unless the option says
        self._deferred: bool | None = opts.deferred_checks
        self._contact_sensing = opts.contact_sensing
        self._pre_step: PreStepControl | None = None
        self._in_step = False
        self._observers: list = []
        self._silenced = False
        self._index_cache: dict[str, Any] = {}  # index tensors (per device) and host index arrays
        self._inv_weight: torch.Tensor | None = None  # bodies' inverse weights, for divergence rule 5
        self._row_memo: dict[int, tuple] = {}
        quat_cols = info.quat_qpos_index[:, None] + np.arange(4) if info.quat_qpos_index.size else np.zeros((0, 4), int)
        self._quat_cols = torch.as_tensor(quat_cols, dtype=torch.long, device=dev)
        self._ctrl_shape = (num_envs, info.nu)
        self._dof_columns = {"dof_qpos": info.dof_qpos_index, "dof_qvel": info.dof_qvel_index}  # computed once
        self._np_dtype = np.float32 if engine.dtype == torch.float32 else np.float64
        self._closed = False

    # ------------------------------------------------------------------
    # properties: what the backend is (they keep answering after close)
    # ------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every public method then raises ``BackendClosedError``)."""
        return self._closed

    @property
    def engine(self) -> Engine:
        """The :class:`~simbackend.engine.Engine` simulating (for engine-specific inspection)."""
        return self._engine

    @property
    def name(self) -> str:
        """Registered name of the engine (lower case)."""
        return self._engine.name

    @property
    def capabilities(self) -> Capabilities:
        """The features this backend supports on its device (see :class:`Capabilities`)."""
        return self._engine.capabilities

    @property
    def notes(self) -> tuple[str, ...]:
        """What the engine's conversion of the model approximates (nothing unsupported is dropped silently)."""
        return tuple(self._engine.notes)

    @property
    def env_engines(self) -> tuple[str, ...]:
        """The registered name of the engine simulating each env, in env order: :attr:`name` N times, except
        on a mixed backend (``make_backend("mujoco,sapien", ...)``), whose envs span engines. Code that
        reports per engine (training logs, evaluations) groups envs by it."""
        return tuple(self._engine.env_engines)

    @property
    def info(self) -> ModelInfo:
        """The engine-neutral description of the compiled model (read-only)."""
        return self._info

    @property
    def num_envs(self) -> int:
        """Number of parallel environments N."""
        return self._num_envs

    @property
    def device(self) -> torch.device:
        """Torch device of every returned tensor."""
        return self._device

    @property
    def contact_sensing(self) -> bool:
        """Whether contact forces are computed (the ``contact_sensing`` construction option)."""
        return self._contact_sensing

    @property
    def deferred_checks(self) -> bool:
        """Whether input values are checked on the device and reported at the next call (GPU backends,
        or the ``deferred_checks=True`` option): then ``step``, the getters and ``set_state`` with a
        device mask read nothing back from the device (docs/conventions.md, "Host reads")."""
        return self._defers_checks

    @property
    def seed(self) -> int:
        """Seed of the backend's random streams."""
        return self._seed

    @property
    def physics_dt(self) -> float:
        """Duration of one physics substep, seconds."""
        return self._info.timestep

    @property
    def nq(self) -> int:
        """Size of qpos."""
        return self._info.nq

    @property
    def nv(self) -> int:
        """Size of qvel."""
        return self._info.nv

    @property
    def num_dof(self) -> int:
        """Number of hinge and slide joints (columns of ``get_dof_pos/vel``)."""
        return self._info.num_dof

    @property
    def num_actuators(self) -> int:
        """Number of actuators nu (columns of ``ctrl``)."""
        return self._info.nu

    @property
    def body_names(self) -> tuple[str, ...]:
        """Body names in id order, world body first (``'world'``)."""
        return self._info.body_names

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Joint names in id order."""
        return self._info.joint_names

    @property
    def dof_names(self) -> tuple[str, ...]:
        """Names of the joints behind ``get_dof_pos/vel`` columns, in order."""
        return tuple(self._info.joint_names[j] for j in self._info.dof_joints)

    @property
    def site_names(self) -> tuple[str, ...]:
        """Site names in id order."""
        return self._info.site_names

    @property
    def actuator_names(self) -> tuple[str, ...]:
        """Actuator names in id order (``ctrl`` columns)."""
        return self._info.actuator_names

    @property
    def sensor_names(self) -> tuple[str, ...]:
        """Sensor names in id order."""
        return self._info.sensor_names

    @property
    def keyframe_names(self) -> tuple[str, ...]:
        """Names of the model's keyframes (``get_keyframe_qpos`` takes them), in model order."""
        return self._info.keyframe_names

    @property
    def geom_names(self) -> tuple[str, ...]:
        """Geom names in id order (unnamed geoms: ``geom<id>``)."""
        return self._info.geom_names

    @property
    def base_body_id(self) -> int:
        """Body id of the base: root body of the first kinematic tree."""
        return self._info.base_body

    @property
    def has_floating_base(self) -> bool:
        """Whether the base body is attached to the world by a free joint."""
        return self._info.has_floating_base

    @property
    def snapshot_layout(self) -> SnapshotLayout:
        """The column layout of this backend's snapshot rows (``capabilities.snapshot_restore``)."""
        self._require("snapshot_restore")
        return self._snapshots.layout

    # ------------------------------------------------------------------
    # model queries
    # ------------------------------------------------------------------
    def get_actuator_ctrl_range(self) -> torch.Tensor:
        """``(nu, 2)`` ctrl ``[low, high]`` per actuator; ``[-inf, inf]`` if unlimited."""
        return self._out(self._info.actuator_ctrl_range)

    def get_joint_range(self) -> torch.Tensor:
        """``(num_dof, 2)`` position limits ``[low, high]`` per dof; ``[-inf, inf]`` if unlimited."""
        return self._out(self._info.joint_range[self._info.dof_joints])

    def get_default_qpos(self) -> torch.Tensor:
        """``(nq,)`` the model's reference configuration (MuJoCo's ``qpos0``)."""
        return self._out(self._info.qpos0)

    def get_keyframe_qpos(self, name: str) -> torch.Tensor:
        """``(nq,)`` qpos of keyframe ``name`` (:attr:`keyframe_names` lists them)."""
        return self._out(self._info.key_qpos[self._names.resolve("keyframe", name)])

    def get_model_actuator_gains(self) -> ActuatorGains:
        """The model's servo gains ``(kp (nu,), kv (nu,))``; see :class:`ActuatorGains`.

        Per-env values (after domain randomization): :meth:`get_env_actuator_gains`.
        """
        return ActuatorGains(self._out(self._info.actuator_kp), self._out(self._info.actuator_kv))

    def model_fields(self) -> dict[str, np.ndarray]:
        """The physical model as the engine holds it, read back from the engine.

        Not the :attr:`info` every backend derives from the compiled MuJoCo
        model, but what the engine was actually given (after its own
        conversions, clamping or float32 storage), so the parity suite
        (:mod:`simbackend.parity`) can compare it with the reference. These are
        the model's values, shared by all envs (not per-env randomized ones).

        Returns:
            A dict of float64 numpy arrays, in the compiled model's order
            (ids as in ``body_names``, ``joint_names``, ``actuator_names``):

            * ``body_mass`` ``(nbody,)``: kg; the world body (id 0) has 0.
            * ``body_com`` ``(nbody, 3)``: centre of mass in the body frame, m.
            * ``body_inertia`` ``(nbody, 3, 3)``: inertia tensor about the
              centre of mass, expressed in the body frame, kg m^2 (symmetric).
            * ``joint_range`` ``(njnt, 2)``: ``[low, high]`` position limits
              (rad or m); ``[-inf, inf]`` where unlimited (free and ball joints too).
            * ``actuator_ctrl_range`` ``(nu, 2)``: ctrl ``[low, high]``,
              ``[-inf, inf]`` where unlimited.
            * ``actuator_force_range`` ``(nu, 2)``: actuator force (or torque)
              ``[low, high]``, ``[-inf, inf]`` where unlimited.
            * ``timestep`` ``()``: one physics substep, s.
            * ``gravity`` ``(3,)``: world frame, m/s^2.

        Raises:
            UnsupportedFeatureError: the engine cannot read its model back.
        """
        return self._engine.model_fields()

    # ------------------------------------------------------------------
    # name resolution
    # ------------------------------------------------------------------
    def get_body_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` body ids of ``names`` (a name or a sequence of names)."""
        return self._id_tensor(self._names.resolve_many("body", names))

    def get_joint_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` joint ids of ``names``."""
        return self._id_tensor(self._names.resolve_many("joint", names))

    def get_site_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` site ids of ``names``."""
        return self._id_tensor(self._names.resolve_many("site", names))

    def get_actuator_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` actuator ids (ctrl columns) of ``names``."""
        return self._id_tensor(self._names.resolve_many("actuator", names))

    def get_sensor_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` sensor ids of ``names``."""
        return self._id_tensor(self._names.resolve_many("sensor", names))

    def get_geom_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` geom ids of ``names`` (a name or a sequence of names)."""
        return self._id_tensor(self._names.resolve_many("geom", names))

    def get_body_id(self, name: str) -> int:
        """The id of body ``name``, a plain int."""
        return self._names.resolve("body", name)

    def get_body_subtree_ids(self, body: Any) -> torch.Tensor:
        """``(k,)`` ids of ``body`` (a name or an id) and all its descendants, in id order."""
        info = self._info
        if isinstance(body, str):
            root = self._names.resolve("body", body)
        else:
            root = V.scalar_id(body, info.nbody, "body", "body", self._host_ids)
        inside = np.zeros(info.nbody, bool)
        inside[root] = True
        for b in range(root + 1, info.nbody):  # MuJoCo orders parents before children
            inside[b] = inside[info.body_parent[b]]
        return self._id_tensor(np.flatnonzero(inside))

    def get_joint_dof_pos_indices(self, names: Names) -> torch.Tensor:
        """``(n,)`` columns of ``get_dof_pos()`` of hinge/slide joints ``names``."""
        return self._id_tensor(self._names.dof_columns(names))

    def get_joint_dof_vel_indices(self, names: Names) -> torch.Tensor:
        """``(n,)`` columns of ``get_dof_vel()`` of hinge/slide joints ``names``.

        Every dof joint has one position and one velocity column, so these equal
        :meth:`get_joint_dof_pos_indices`; both exist so that code says which
        array it indexes.
        """
        return self._id_tensor(self._names.dof_columns(names))

    def get_joint_qpos_indices(self, names: Names) -> torch.Tensor:
        """``(k,)`` columns of ``get_qpos()`` of joints ``names``, any type, in the order named.

        A hinge or slide joint has 1 column, a ball joint 4 (its quaternion), a
        free joint 7 (position, then quaternion); ``k`` is their sum.
        """
        return self._id_tensor(self._names.joint_columns(names, velocity=False))

    def get_joint_qvel_indices(self, names: Names) -> torch.Tensor:
        """``(k,)`` columns of ``get_qvel()`` (and of Jacobians) of joints ``names``, any type.

        A hinge or slide joint has 1 column, a ball joint 3, a free joint 6
        (linear velocity in the world frame, then body-local angular velocity).
        The one way to find a joint's qvel columns (of ``get_qvel``, ``set_state``'s qvel, ``get_zero_qvel``).
        """
        return self._id_tensor(self._names.joint_columns(names, velocity=True))

    # ------------------------------------------------------------------
    # geoms
    # ------------------------------------------------------------------
    def get_geom_body_ids(self, geom_ids: Ids = None) -> torch.Tensor:
        """``(G,)`` id of the body owning each geom; ``None`` for all geoms."""
        return self._id_tensor(self._info.geom_body[self._geom_index(geom_ids)])

    def get_geom_size(self, geom_ids: Ids = None) -> torch.Tensor:
        """``(G, 3)`` MuJoCo's size parameters of each geom (model values)."""
        return self._out(self._info.geom_size[self._geom_index(geom_ids)])

    def get_geom_contact_masks(self, geom_ids: Ids = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(contype (G,), conaffinity (G,))`` int64 contact bit masks: two geoms may touch when
        ``contype_a & conaffinity_b or contype_b & conaffinity_a``."""
        ids = self._geom_index(geom_ids)
        return self._id_tensor(self._info.geom_contype[ids]), self._id_tensor(self._info.geom_conaffinity[ids])

    # ------------------------------------------------------------------
    # state getters: generalized coordinates, time, controls
    # ------------------------------------------------------------------
    def get_qpos(self, env_ids: Ids = None) -> torch.Tensor:
        """``(n, nq)`` generalized positions of envs ``env_ids`` (``None``: all N), MuJoCo's layout (quaternions wxyz)."""
        return self._state_out(0, env_ids)

    def get_qvel(self, env_ids: Ids = None) -> torch.Tensor:
        """``(n, nv)`` generalized velocities of envs ``env_ids`` (``None``: all N), MuJoCo's layout
        (free joint: linear world, angular local)."""
        return self._state_out(1, env_ids)

    def get_dof_pos(self) -> torch.Tensor:
        """``(N, num_dof)`` hinge/slide joint positions (rad or m), joint order."""
        return self._out(self._columns(self._engine.read_state()[0], "dof_qpos"))

    def get_dof_vel(self) -> torch.Tensor:
        """``(N, num_dof)`` hinge/slide joint velocities (rad/s or m/s), joint order."""
        return self._out(self._columns(self._engine.read_state()[1], "dof_qvel"))

    def get_zero_qvel(self) -> torch.Tensor:
        """``(N, nv)`` zeros: the initial velocity of every env (``set_state``'s default).

        Its columns are qvel's; :meth:`get_joint_qvel_indices` is the way to find a joint's columns.
        """
        return torch.zeros((self.num_envs, self.nv), dtype=torch.float32, device=self._device)

    def get_time(self, env_ids: Ids = None) -> torch.Tensor:
        """``(n,)`` float64 simulated time of envs ``env_ids`` (``None``: all N), s.

        Starts at 0; every ``step`` adds ``nsteps * physics_dt`` to the envs it
        advanced (a diverged env keeps its time with its state). ``set_state``
        leaves it; ``set_physics_state`` and ``set_named_state`` restore it.
        float64, unlike the contract's other reals: float32 cannot count 2 ms
        substeps past a few hours.
        """
        if env_ids is None:
            return self._book.time.clone()
        return self._book.time[self._row_index(env_ids)]

    def get_ctrl(self, env_ids: Ids = None) -> torch.Tensor:
        """``(n, nu)`` float32 controls last applied to envs ``env_ids`` (``None``: all N), by ``step``
        or a pre-step control function, clamped to each ctrl range as the engine applied them;
        zeros before the first step."""
        return self._book.clamped_ctrl(None if env_ids is None else self._row_index(env_ids))

    # ------------------------------------------------------------------
    # state getters: base
    # ------------------------------------------------------------------
    def get_base_pos(self) -> torch.Tensor:
        """``(N, 3)`` base body frame origin, world frame."""
        return self._out(self._engine.body_pose(self._base_ids())[0][:, 0])

    def get_base_quat(self) -> torch.Tensor:
        """``(N, 4)`` base body orientation, wxyz, world frame."""
        return self._out(self._engine.body_pose(self._base_ids())[1][:, 0])

    def get_base_lin_vel(self) -> torch.Tensor:
        """``(N, 3)`` linear velocity of the base frame origin, world frame."""
        return self._out(self._engine.body_velocity(self._base_ids())[0][:, 0])

    def get_base_ang_vel(self) -> torch.Tensor:
        """``(N, 3)`` angular velocity of the base, world frame (a gyro reads it in the body frame)."""
        return self._out(self._engine.body_velocity(self._base_ids())[1][:, 0])

    # ------------------------------------------------------------------
    # state getters: bodies and sites
    # ------------------------------------------------------------------
    def get_body_pos_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` body frame origins, world frame; ``None`` for all bodies."""
        return self._out(self._engine.body_pose(self._body_index(body_ids))[0])

    def get_body_quat_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 4)`` body orientations, wxyz, world frame."""
        return self._out(self._engine.body_pose(self._body_index(body_ids))[1])

    def get_body_lin_vel_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` linear velocity of each body frame's origin, world frame."""
        return self._out(self._engine.body_velocity(self._body_index(body_ids))[0])

    def get_body_ang_vel_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` angular velocity of each body, world frame."""
        return self._out(self._engine.body_velocity(self._body_index(body_ids))[1])

    def get_body_pos_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` body frame origins relative to the base, in base coordinates."""
        ids = self._body_index(body_ids)
        rel = self.get_body_pos_w(ids) - self.get_base_pos()[:, None]
        return quat_apply_inverse(self.get_base_quat()[:, None].expand(-1, ids.size, -1), rel)

    def get_body_quat_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 4)`` body orientations relative to the base (``q_base^-1 * q_body``), wxyz."""
        ids = self._body_index(body_ids)
        base_quat = self.get_base_quat()[:, None].expand(-1, ids.size, -1)
        return quat_mul(quat_conj(base_quat), self.get_body_quat_w(ids))

    def get_body_lin_vel_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` world-frame origin linear velocities expressed in base coordinates."""
        ids = self._body_index(body_ids)
        base_quat = self.get_base_quat()[:, None].expand(-1, ids.size, -1)
        return quat_apply_inverse(base_quat, self.get_body_lin_vel_w(ids))

    def get_body_ang_vel_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` world-frame angular velocities expressed in base coordinates."""
        ids = self._body_index(body_ids)
        base_quat = self.get_base_quat()[:, None].expand(-1, ids.size, -1)
        return quat_apply_inverse(base_quat, self.get_body_ang_vel_w(ids))

    def get_site_pos_w(self, site_ids: Ids = None) -> torch.Tensor:
        """``(N, S, 3)`` site positions, world frame; ``None`` for all sites."""
        return self._out(self._engine.site_pose(self._site_index(site_ids))[0])

    def get_site_quat_w(self, site_ids: Ids = None) -> torch.Tensor:
        """``(N, S, 4)`` site orientations, wxyz, world frame."""
        return self._out(self._engine.site_pose(self._site_index(site_ids))[1])

    def get_body_contact_force_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` net contact force on each body, world frame, N: the sum of the forces the
        contacts of the body's geoms exerted on it in the last substep of the last ``step``,
        normal force and friction together.

        A body resting on the floor reads its weight, upward, and so does one held by static
        friction on a slope; a body touching nothing reads zero.
        Envs written since their last step (``set_state``, a reset, a divergence revert, a
        snapshot restore) read zero until they step. Needs ``capabilities.contact_forces`` and
        the ``contact_sensing=True`` construction option (MuJoCo pays an extra pass per substep).
        """
        self._require("contact_forces")
        if not self._contact_sensing:
            raise InvalidArgumentError(
                "contact_sensing: contact forces are computed only in a backend built with contact_sensing=True"
            )
        return self._out(self._engine.contact_forces(self._body_index(body_ids)))

    def get_body_contact_mask(self, body_ids: Ids = None, threshold: float = 1.0) -> torch.Tensor:
        """``(N, B)`` bool: whether each body's net contact force (:meth:`get_body_contact_force_w`)
        is larger than ``threshold`` newtons (a finite number >= 0)."""
        limit = checks.real(threshold, "threshold", minimum=0.0)
        force = self.get_body_contact_force_w(body_ids)
        return (force * force).sum(-1) > limit * limit

    def get_sensor_data(self, name: str) -> torch.Tensor:
        """``(N, dim)`` reading of sensor ``name``, with MuJoCo's meaning and frame for its type."""
        return self._out(self._engine.sensor(self._sensor_id(name)))

    # ------------------------------------------------------------------
    # combined readouts
    # ------------------------------------------------------------------
    def get_body_pose_w(self, body_ids: Ids = None, env_ids: Ids = None, out: Any = None) -> torch.Tensor:
        """``(n, B, 7)`` body frame position (3) and orientation (wxyz, 4), world frame.

        Each row equals the rows of :meth:`get_body_pos_w` and :meth:`get_body_quat_w`
        side by side, bit for bit.

        Args:
            body_ids: bodies (``None``: all).
            env_ids: env rows in the order given (ids or a ``(N,)`` bool mask; ``None``: all).
            out: a contiguous float32 tensor of exactly the result's shape on the backend's
                device, written in place and returned (nothing is allocated for the result);
                a wrong one raises, naming ``out``, before anything is written.
        """
        ids = self._body_index(body_ids)
        return self._readout.combined([self.get_body_pos_w, self.get_body_quat_w], ids, 7, env_ids, out)

    def get_body_vel_w(self, body_ids: Ids = None, env_ids: Ids = None, out: Any = None) -> torch.Tensor:
        """``(n, B, 6)`` linear velocity of each body frame's origin (3) and angular velocity (3), world
        frame: :meth:`get_body_lin_vel_w` and :meth:`get_body_ang_vel_w` side by side (arguments as
        :meth:`get_body_pose_w`)."""
        ids = self._body_index(body_ids)
        return self._readout.combined([self.get_body_lin_vel_w, self.get_body_ang_vel_w], ids, 6, env_ids, out)

    def get_body_state_w(self, body_ids: Ids = None, env_ids: Ids = None, out: Any = None) -> torch.Tensor:
        """``(n, B, 13)`` pose (7) then velocities (6), as :meth:`get_body_pose_w` and :meth:`get_body_vel_w`."""
        ids = self._body_index(body_ids)
        getters = [self.get_body_pos_w, self.get_body_quat_w, self.get_body_lin_vel_w, self.get_body_ang_vel_w]
        return self._readout.combined(getters, ids, 13, env_ids, out)

    def get_sensors(self, names: Any, env_ids: Ids = None, out: Any = None) -> torch.Tensor:
        """``(n, sum of dims)`` the named sensors' readings concatenated in the order named
        (each as :meth:`get_sensor_data` gives it, bit for bit), rows ``env_ids``, into ``out``
        if given (see :meth:`get_body_pose_w`). A sensor type the backend does not serve raises
        ``UnsupportedFeatureError`` as :meth:`get_sensor_data` does."""
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, (list, tuple)) or not names:
            raise ArgumentTypeError("names: expected a sensor name or a non-empty sequence of names")
        return self._readout.sensors([self._sensor_id(n) for n in names], names, env_ids, out)

    # ------------------------------------------------------------------
    # Jacobians
    # ------------------------------------------------------------------
    def get_site_jacobian_w(self, site_id: Any, dof_indices: Ids = None) -> tuple[torch.Tensor, torch.Tensor]:
        """World-frame geometric Jacobian of a site's point.

        Args:
            site_id: one site id (an int, or the one-element tensor ``get_site_ids`` returns).
            dof_indices: ``(k,)`` columns of qvel to keep (``get_joint_qvel_indices``
                gives them for joints); ``None`` for all ``nv``.

        Returns:
            ``(jacp, jacr)``, each ``(N, 3, k)``: ``site_lin_vel_w = jacp @ qvel[cols]``
            and ``site_ang_vel_w = jacr @ qvel[cols]`` when only those columns move.
        """
        self._require("site_jacobians")
        sid = V.scalar_id(site_id, len(self.site_names), "site", "site_id", self._host_ids)
        cols = V.index_array(dof_indices, self.nv, "qvel column", "dof_indices", host_ids=self._host_ids)
        jacp, jacr = self._engine.site_jacobian(sid, cols)
        return self._out(jacp), self._out(jacr)

    # ------------------------------------------------------------------
    # mutation
    # ------------------------------------------------------------------
    def set_state(self, env_ids: Ids, qpos: Any, qvel: Any = None, *, randomization: Any = None) -> None:
        """Write the state of some envs; getters reflect it at once, without a step.

        Args:
            env_ids: ``(n,)`` distinct env ids in any order, a boolean mask ``(N,)``,
                or ``None`` for all envs. Envs not named are untouched.
            qpos: ``(n, nq)`` positions, row i for ``env_ids[i]``; with a boolean
                mask tensor also ``(N, nq)``, of which the selected envs' rows are
                used (the form that reads nothing back from a GPU). Free and ball
                joint quaternions are normalised; a zero quaternion is rejected.
            qvel: ``(n, nv)`` (or ``(N, nv)``, as ``qpos``) velocities, or ``None`` for zero.
            randomization: a :class:`~simbackend.randomization.RandomizationPlan`
                whose ``reset`` terms are drawn for the named envs and applied
                together with the state (velocity pushes add to ``qvel``).

        Raises:
            NonFiniteError: NaN or inf in a row (naming the env ids).
            ValueRangeError: a state the divergence rule would flag at once
                (``|qpos| > 1e10`` or ``|qvel| > 1e5``, :mod:`simbackend.divergence`).
            InvalidQuaternionError: a zero quaternion.

        Controls, actuator activations, time and pending forces of the named envs
        are left as they are; their solver warm-start caches are cleared, so a
        replay from the same state reproduces the same trajectory.
        """
        self._enter_mutation("set_state")
        if self._masked_rows(env_ids, qpos):
            self._set_state_masked(env_ids, qpos, qvel, randomization)
            return
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        n = ids.size
        dev, dt = self._device, self._input_dtype
        qpos = V.real_tensor(qpos, "qpos", (n, self.nq), device=dev, dtype=dt)
        qvel = (
            torch.zeros((n, self.nv), dtype=dt, device=dev)
            if qvel is None
            else V.real_tensor(qvel, "qvel", (n, self.nv), device=dev, dtype=dt)
        )
        if n == 0:
            return
        if n > 1 and not (ids[1:] > ids[:-1]).all():  # written in env order
            order = np.argsort(ids, kind="stable")
            perm = torch.as_tensor(order, device=dev)
            ids, qpos, qvel = ids[order], qpos[perm], qvel[perm]
        checks: list[tuple[str, Any, Any, Any]] = [("qpos", qpos, "nonfinite", None), ("qvel", qvel, "nonfinite", None)]
        checks += [("qpos", qpos, MAX_QPOS, None), ("qvel", qvel, MAX_QVEL, None)]
        if (
            not self._defers_checks
            and dev.type == "cpu"
            and V.bounded(qpos.numpy(), MAX_QPOS)
            and V.bounded(qvel.numpy(), MAX_QVEL)
        ):
            checks = []  # the common case, one reduction each: finite and within the rule's bounds
        if self._quat_cols.numel():
            qpos, zero = V.normalised_quaternions(qpos, self._quat_cols)
            checks.append(("qpos", zero, "zero quaternion", None))
        held = self._check_values(ids, checks)
        qpos, qvel = qpos.to(self._dtype), qvel.to(self._dtype)
        if held is not None:  # deferred checks: the envs of rows with bad values are not written at all
            if randomization is None and not (self._observers and not self._silenced):
                select = torch.zeros(self.num_envs, dtype=torch.bool, device=dev)
                select[torch.as_tensor(ids, device=dev)] = ~held  # no host read of the marks
                self._write_rows_masked(select, torch.as_tensor(ids, device=dev), qpos, qvel)
                return
            keep = ~held.cpu().numpy()  # a plan's draws and the observers need the written ids on the host
            rows = torch.as_tensor(np.flatnonzero(keep), device=dev)
            ids, qpos, qvel = ids[keep], qpos[rows], qvel[rows]
            if not ids.size:
                assert self._faults is not None  # a hold mask comes from the deferred checks
                self._faults.publish()
                return
        if randomization is not None:  # drawn and checked before anything is written
            prepared = self._dr.prepare(randomization, "reset", ids, True)
            pushed = self._dr.commit(prepared, qpos, qvel)
            assert pushed is not None  # commit returns the rows it was given
            qpos, qvel = pushed
        self._engine.write_state(ids, qpos.contiguous(), qvel.contiguous())
        if self._faults is not None:
            self._faults.publish()
        self._notify_write(ids, "set_state")

    def _masked_rows(self, env_ids: Any, qpos: Any) -> bool:
        """Whether ``set_state`` was given a boolean mask tensor with one row per env (all N)."""
        return (
            isinstance(env_ids, torch.Tensor)
            and env_ids.dtype == torch.bool
            and tuple(env_ids.shape) == (self.num_envs,)
            and getattr(qpos, "shape", (None,))[:1] == (self.num_envs,)
        )

    def _set_state_masked(self, mask: torch.Tensor, qpos: Any, qvel: Any, randomization: Any) -> None:
        """``set_state`` of the envs selected by ``mask`` from ``(N, nq)`` / ``(N, nv)`` rows. A backend with
        deferred checks reads nothing from the device (bad rows are recorded and keep their state), unless a
        randomization plan or an observer needs the env ids on the host; the others take the ids' path."""
        n, dev, dt = self.num_envs, self._device, self._input_dtype
        V.check_tensor_storage(mask, "env_ids")
        qpos = V.real_tensor(qpos, "qpos", (n, self.nq), device=dev, dtype=dt)
        qvel = None if qvel is None else V.real_tensor(qvel, "qvel", (n, self.nv), device=dev, dtype=dt)
        if not self._defers_checks or randomization is not None or (self._observers and not self._silenced):
            ids = np.flatnonzero(mask.detach().cpu().numpy())
            rows = torch.as_tensor(ids, device=dev)
            self.set_state(ids, qpos[rows], None if qvel is None else qvel[rows], randomization=randomization)
            return
        select = mask.detach().to(dev)
        if qvel is None:
            qvel = torch.zeros((n, self.nv), dtype=dt, device=dev)
        qpos, zero = V.normalised_quaternions(qpos, self._quat_cols)
        checks = [
            ("qpos", qpos, "nonfinite", None),
            ("qvel", qvel, "nonfinite", None),
            ("qpos", qpos, MAX_QPOS, None),
            ("qvel", qvel, MAX_QVEL, None),
            ("qpos", zero, "zero quaternion", None),
        ]
        held = self._check_values(self._all_env_ids, checks, select=select)
        write = select if held is None else select & ~held
        self._write_rows_masked(write, None, qpos.to(self._dtype), qvel.to(self._dtype))

    def _write_rows_masked(
        self, write: torch.Tensor, rows: torch.Tensor | None, qpos: torch.Tensor, qvel: torch.Tensor
    ) -> None:
        """Write the envs ``write`` (``(N,)`` bool on the device) selects, reading nothing back: from
        ``qpos``/``qvel`` rows of every env (``rows`` ``None``) or of the device ids ``rows``."""
        if rows is not None:  # scattered into every env's rows: the others are not inputs
            full_q = torch.zeros((self.num_envs, self.nq), dtype=qpos.dtype, device=qpos.device)
            full_v = torch.zeros((self.num_envs, self.nv), dtype=qvel.dtype, device=qvel.device)
            full_q[rows], full_v[rows] = qpos, qvel
            qpos, qvel = full_q, full_v
        self._engine.write_state_masked(write, qpos.contiguous(), qvel.contiguous())
        if self._faults is not None:
            self._faults.publish()

    def step(self, ctrl: Any = None, nsteps: int = 1) -> dict:
        """Advance every env by ``nsteps`` substeps with the same ``ctrl``.

        Args:
            ctrl: ``(N, nu)`` controls, MuJoCo's meaning per actuator, clamped to
                each ctrl range. ``None`` only if the model has no actuators.
            nsteps: number of substeps (decimation), >= 1.

        Returns:
            ``info`` with ``"diverged"``: ``(N,)`` bool tensor, true for envs whose
            physics diverged during the call by the contract's definition
            (:mod:`simbackend.divergence`); those keep their last finite state
            (the state from before the call, or, with a pre-step control
            function, from before the substep that diverged) and the others
            advance normally; and ``"timing"``: seconds spent in ``"physics"``
            and in ``"total"``.

        Forces from :meth:`apply_body_force` act during this call and are then cleared.
        With a pre-step control function set, it is called before every substep;
        the function is the one set when the call started.

        Action latency (the ``action_latency`` randomization term): an env with a
        latency of ``L`` substeps applies, in its first ``min(L, nsteps)``
        substeps, the ``ctrl`` of the previous ``step`` call (a latency longer
        than the call acts as ``nsteps``: the whole call applies the previous
        command), and ``ctrl`` from there on. The substeps are split at the
        distinct latencies, one engine call per part; with a pre-step control
        function, the function is given the delayed command in those substeps.

        Interruption: an exception raised during the call (a ``KeyboardInterrupt``
        from Ctrl-C included; long calls check for it between chunks of
        substeps; an error in a pre-step control function or its output at any
        substep) puts every env back at its state from before the call, time
        and controls included, and the getters describe it. Pending forces stay
        pending. (With a pre-step control function, an engine without
        ``snapshot_restore`` restores qpos and qvel, and clears warm starts as
        ``set_state`` does.)
        """
        t0 = time.perf_counter()
        self._enter_mutation("step")
        nsteps = V.positive_int(nsteps, "nsteps")
        ctrl, hold = self._check_ctrl(ctrl, "ctrl")
        fn = self._pre_step
        held_forces = self._dr.held_forces()
        if held_forces is not None:
            self._book.add_forces(*held_forces)
        self._in_step = True
        completed = False
        try:
            delayed = self._dr.latency_plan(nsteps)
            if fn is None:
                if delayed is None:
                    diverged = self._advance(ctrl, nsteps, hold)
                else:
                    diverged = self._advance_delayed(ctrl, nsteps, hold, *delayed)
                physics = time.perf_counter() - t0
            else:
                diverged = torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)
                physics = 0.0
                given = ctrl.to(torch.float32)
                # the function runs between substeps and cannot be checked in advance: keep what undoes them
                mark = self._mark() if nsteps > 1 else None
                pending = self._dr.pending_ctrl  # the previous call's command (kept while a latency is set)
                prev = given if pending is None else pending.to(given.dtype)
                try:
                    for k in range(nsteps):
                        command = given if delayed is None else torch.where(delayed[0][:, None] > k, prev, given)
                        out = fn(self, command.clone())
                        if self._closed:
                            raise BackendClosedError(
                                f"backend {self.name!r} was closed by the pre-step control function"
                            )
                        sub, sub_hold = self._check_ctrl(out, "pre-step control output")
                        ts = time.perf_counter()
                        # an env refused once is held for the rest of the call (as a diverged one stays)
                        hold = sub_hold if hold is None else (hold if sub_hold is None else hold | sub_hold)
                        diverged |= self._advance(sub, 1, hold)
                        physics += time.perf_counter() - ts
                except BaseException:
                    if mark is not None and not self._closed:  # every env back at its pre-call state
                        with HeldInterrupt():  # a second Ctrl-C waits for the rewind to end
                            self._rewind(mark)
                    raise
            completed = True
        finally:
            self._in_step = False
            if not completed and held_forces is not None:  # pending forces stay pending, without the held ones
                self._book.remove_forces(*held_forces)
        self._book.clear_forces()
        self._dr.keep_command(ctrl, hold)
        self._dr.age_held_forces(nsteps * self.physics_dt)
        if self._faults is not None:
            self._faults.publish()
        info = {
            "diverged": diverged,
            "timing": {"physics": physics, "total": time.perf_counter() - t0},
        }
        if self._observers:
            for observer in tuple(self._observers):
                observer.on_step(self, nsteps, info)
        return info

    def set_pre_step_control(self, fn: PreStepControl | None) -> None:
        """Call ``fn(backend, ctrl)`` before every substep; ``None`` removes it.

        ``ctrl`` is the ``(N, nu)`` float32 tensor given to ``step``; ``fn`` returns
        the ctrl to apply in this substep, of the same shape (validated like
        ``step``'s). The backend's getters describe the current substep's state,
        so ``fn`` can turn a policy action into actuator commands (a PD law on
        motors, say) at the physics rate. ``fn`` may read getters; calling
        ``step``, ``set_state`` or ``apply_body_force`` from it raises
        :class:`~simbackend.errors.ReentrantCallError`. Setting or removing the
        function from inside it takes effect at the next ``step`` call.

        An error in ``fn`` or in its output, at any substep, leaves every env as
        it was before the ``step`` call (the substeps already taken are undone)
        and pending body forces stay pending.
        """
        if fn is not None and not callable(fn):
            raise ArgumentTypeError(f"pre-step control must be callable or None, got {type(fn).__name__}")
        if fn is not None:
            self._require("pre_step_control")
        self._pre_step = fn

    def apply_body_force(self, body_ids: Ids, force: Any, torque: Any = None) -> None:
        """Apply world-frame forces (and torques) at body frame origins during the next ``step``.

        Args:
            body_ids: ``(B,)`` distinct body ids, not the world body.
            force: ``(N, B, 3)`` force in newtons, world frame, acting at each body
                frame's origin.
            torque: ``(N, B, 3)`` torque in N m, world frame, or ``None`` for zero.

        Calls made before a ``step`` add up; the ``step`` call then clears them.
        """
        self._enter_mutation("apply_body_force")
        self._require("body_forces")
        ids = V.index_array(
            body_ids, self._info.nbody, "body", "body_ids", allow_duplicates=False, host_ids=self._host_ids
        )
        if (ids == 0).any():
            raise IndexRangeError("body_ids: the world body (id 0) cannot take a force")
        shape = (self.num_envs, ids.size, 3)
        dev, dt = self._device, self._input_dtype
        force = V.real_tensor(force, "force", shape, device=dev, dtype=dt)
        torque = (
            torch.zeros(shape, dtype=dt, device=dev)
            if torque is None
            else V.real_tensor(torque, "torque", shape, device=dev, dtype=dt)
        )
        every = np.arange(self.num_envs)
        held = self._check_values(
            every,
            [
                ("force", force, "nonfinite", None),
                ("torque", torque, "nonfinite", None),
                ("force", force, V.MAX_REAL_INPUT, None),
                ("torque", torque, V.MAX_REAL_INPUT, None),
            ],
        )
        if held is not None:  # GPU: bad rows add nothing
            force = torch.where(held[:, None, None], 0.0, force)
            torque = torch.where(held[:, None, None], 0.0, torque)
            assert self._faults is not None  # a hold mask comes from the deferred checks
            self._faults.publish()
        if ids.size:
            self._book.add_forces(ids, force, torque)

    def apply_body_velocity_delta(self, body_ids: Ids, delta: Any, env_ids: Ids = None) -> None:
        """Change the velocity of free bodies (a push): ``(n, B, 6)`` linear (3) and angular (3), world frame.

        Each body must be attached to the world by a free joint; its frame
        origin's linear velocity and its angular velocity change by exactly
        ``delta``. The positions are untouched; the envs not named keep their state.
        """
        self._enter_mutation("apply_body_velocity_delta")
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        bodies = V.index_array(
            body_ids, self._info.nbody, "body", "body_ids", allow_duplicates=False, host_ids=self._host_ids
        )
        adrs = [self._dr.free_dofadr(int(b), "body_ids") for b in bodies]
        d = V.real_tensor(
            delta, "delta", (ids.size, bodies.size, 6), device=torch.device("cpu"), dtype=torch.float64
        ).numpy()
        if not np.isfinite(d).all():
            raise NonFiniteError("delta", ids[~np.isfinite(d).all(axis=(1, 2))])
        if not ids.size or not bodies.size:
            return
        order = np.argsort(ids, kind="stable")
        p = Prepared(ids=ids[order])
        p.lin_ang_delta = [(adr, d[order, k, :3], d[order, k, 3:]) for k, adr in enumerate(adrs)]
        self._dr.commit(p)
        self._notify_write(p.ids, "apply_body_velocity_delta")

    def synchronize(self) -> None:
        """Wait for the device and raise any input error a GPU backend deferred (no-op on CPU backends).

        The marks are read whatever the calls since: a replayed CUDA graph (:mod:`simbackend.graphs`)
        updates them without a Python call."""
        if self._faults is not None:
            self._faults.pending = True
            self._faults.publish()
            self._faults.raise_if_any(wait=True)

    # ------------------------------------------------------------------
    # domain randomization
    # ------------------------------------------------------------------
    def get_dr_capabilities(self) -> dict[str, frozenset[str]]:
        """``{term kind: phases}`` this backend (on this device) applies; absent kinds are unsupported."""
        return self._dr.capabilities()

    def apply_init_randomization(self, plan: RandomizationPlan, *, strict: bool = True) -> list[str]:
        """Apply the plan's ``init`` terms to every env: per-env model parameters, set on the cold path.

        Call it before the first ``step`` (it may recompute derived model
        constants for every env). Every env draws its values from
        ``(plan.seed, term, env id, draw count)`` (:mod:`simbackend.randomization`).

        Args:
            plan: a :class:`RandomizationPlan`.
            strict: ``True``: a term this backend does not support in this
                phase raises ``UnsupportedFeatureError`` before anything
                changes. ``False``: such terms are skipped.

        Returns:
            The names of the terms skipped (``"<index>:<kind>"`` unless named).
        """
        self._enter_mutation("apply_init_randomization")
        prepared = self._dr.prepare(plan, "init", np.arange(self.num_envs), strict)
        self._dr.commit(prepared)
        self._notify_write(prepared.ids, "apply_init_randomization")
        return prepared.dropped

    def apply_interval_randomization(
        self, plan: RandomizationPlan, env_ids: Ids = None, *, terms: Sequence[str] | None = None, strict: bool = True
    ) -> list[str]:
        """Apply the plan's ``interval`` terms to ``env_ids`` (``None``: all) during an episode.

        Args:
            plan: a :class:`RandomizationPlan`.
            env_ids: envs to resample (ids, a bool mask or ``None``); the others are untouched.
            terms: names of the interval terms to apply (default: all of them);
                :class:`~simbackend.randomization.IntervalScheduler` passes the due ones.
            strict: as in :meth:`apply_init_randomization`.

        Returns:
            The names of the terms skipped (``strict=False``).
        """
        self._enter_mutation("apply_interval_randomization")
        ids = np.unique(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids))
        prepared = self._dr.prepare(plan, "interval", ids, strict, only=terms)
        self._dr.commit(prepared)
        self._notify_write(ids, "apply_interval_randomization")
        return prepared.dropped

    def get_env_body_mass(self) -> torch.Tensor:
        """``(N, nbody)`` mass of every body in every env as the engine holds it, kg (world 0)."""
        return self._out(self._dr.env_field("body_mass"))

    def get_env_body_com(self) -> torch.Tensor:
        """``(N, nbody, 3)`` centre of mass of every body in its body frame, m."""
        return self._out(self._dr.env_field("body_com"))

    def get_env_body_inertia(self) -> torch.Tensor:
        """``(N, nbody, 3)`` principal moments of inertia about the centre of mass, kg m^2.

        The principal axes are the model's (``info.body_iquat``, relative to the body frame).
        """
        return self._out(self._dr.env_field("body_inertia"))

    def get_env_geom_friction(self) -> torch.Tensor:
        """``(N, ngeom, 3)`` friction coefficients (sliding, torsional, rolling) of every geom."""
        return self._out(self._dr.env_field("geom_friction"))

    def get_env_geom_compliance(self) -> torch.Tensor:
        """``(N, ngeom, 2)`` contact compliance of every geom: MuJoCo's ``solref``, ``(timeconst s,
        dampratio)`` in its standard form (see the ``geom_compliance`` term in docs/randomization.md).
        A backend that does not declare the term (its contacts are not MuJoCo's spring-damper) raises
        ``UnsupportedFeatureError``: the model's values are not what it acts with."""
        return self._out(self._dr.env_field(self._contact_term("geom_compliance")))

    def get_env_geom_impedance(self) -> torch.Tensor:
        """``(N, ngeom, 3)`` contact impedance of every geom: MuJoCo's ``solimp[:3]``, ``(dmin, dmax,
        width m)`` (see the ``geom_impedance`` term in docs/randomization.md); raises
        ``UnsupportedFeatureError`` where the term is not declared, as ``get_env_geom_compliance``."""
        return self._out(self._dr.env_field(self._contact_term("geom_impedance")))

    def _contact_term(self, kind: str) -> str:
        """``kind`` (``geom_compliance``, ``geom_impedance``) if this backend declares the term in some phase.

        Every engine holds a mass, a friction or a damping, so the other getters read the model's value
        where the term is not declared; these two are MuJoCo's contact model, which an engine that does
        not declare them does not use at all."""
        if not self._dr.capabilities().get(kind):
            raise UnsupportedFeatureError(
                self.name,
                f"domain randomization term {kind!r}",
                f"get_env_{kind}: its contacts do not use MuJoCo's {'solref' if kind == 'geom_compliance' else 'solimp'}"
                " (get_dr_capabilities() lists the terms it holds)",
            )
        return kind

    def get_env_actuator_gains(self) -> ActuatorGains:
        """Per-env servo gains: :class:`ActuatorGains` of ``(N, nu)`` tensors."""
        return ActuatorGains(self._out(self._dr.env_field("actuator_kp")), self._out(self._dr.env_field("actuator_kv")))

    def get_env_joint_damping(self) -> torch.Tensor:
        """``(N, nv)`` joint damping per qvel column (``get_joint_qvel_indices`` gives a joint's)."""
        return self._out(self._dr.env_field("dof_damping"))

    def get_env_joint_armature(self) -> torch.Tensor:
        """``(N, nv)`` joint armature (rotor inertia) per qvel column."""
        return self._out(self._dr.env_field("dof_armature"))

    def get_env_joint_frictionloss(self) -> torch.Tensor:
        """``(N, nv)`` joint dry friction (frictionloss) per qvel column."""
        return self._out(self._dr.env_field("dof_frictionloss"))

    def get_env_gravity(self) -> torch.Tensor:
        """``(N, 3)`` gravity of every env, world frame, m/s^2."""
        return self._out(self._dr.env_field("gravity"))

    def get_env_default_qpos(self) -> torch.Tensor:
        """``(N, nq)`` each env's default configuration: the model's ``qpos0`` plus any
        ``joint_default_pos`` randomization (an encoder-offset model for resets and action offsets)."""
        return self._out(self._dr.env_default_qpos())

    # ------------------------------------------------------------------
    # snapshots and named states
    # ------------------------------------------------------------------
    def get_physics_state(self, env_ids: Ids = None) -> torch.Tensor:
        """``(n, S)`` float64 snapshots of envs ``env_ids`` (``None``: all), rows in the order given.

        Restoring a row with :meth:`set_physics_state` and stepping with the
        same controls reproduces the trajectory: bit for bit where the backend
        declares ``capabilities.snapshot_exact``, otherwise up to the engine's
        caches it cannot serialise (the backend's documentation gives the
        measured size). The layout is in :mod:`simbackend.snapshot`; float64
        so that nothing is rounded.
        """
        self._require("snapshot_restore")
        return self._snapshots.get(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids))

    def set_physics_state(self, env_ids: Ids, state: Any) -> None:
        """Restore snapshots: row i of ``state`` ``(n, S)`` into env ``env_ids[i]``.

        Everything the snapshot holds is restored (state, time, controls,
        per-env parameters, held forces) and the getters describe it at once.
        Envs not named are untouched.

        Raises:
            SnapshotMismatchError: a row made by another backend, another model or
                another layout version (move states between engines with
                ``set_state`` or :meth:`set_named_state`).
            InputShapeError / InputDTypeError: not ``(n, S)`` float64.
            NonFiniteError: NaN or inf in a row (naming the env ids).
            ValueRangeError: a state the divergence rule would flag at once, or
                per-env parameters out of their physical bounds.
        """
        self._enter_mutation("set_physics_state")
        self._require("snapshot_restore")
        ids = self._snapshots.set(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids), state)
        self._notify_write(ids, "set_physics_state")

    def get_named_state(self, env_ids: Ids = None) -> NamedState:
        """The :class:`~simbackend.state.NamedState` of envs ``env_ids`` (``None``: all): every body,
        joint and actuator by name, the time and the per-env model parameters."""
        return self._snapshots.named(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids))

    def set_named_state(self, env_ids: Ids, state: NamedState, *, params: bool = True) -> None:
        """Import a :class:`~simbackend.state.NamedState` into envs ``env_ids``, matching by name.

        The joints' positions and velocities become the envs' state (as
        ``set_state``: getters reflect it at once); time and controls are
        restored; with ``params``, the per-env model parameters the state
        carries are applied where they differ from what the envs hold (a
        backend that cannot apply one raises ``UnsupportedFeatureError``).
        Body poses are not inputs: they follow from the joints. The state must
        name exactly this model's joints and actuators (a state from another
        model raises ``UnknownNameError`` or ``InvalidArgumentError``).
        """
        self._enter_mutation("set_named_state")
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        with self._quiet():  # one notification, for the whole import
            written = self._snapshots.set_named(ids, state, params)
        self._notify_write(written, "set_named_state")

    # ------------------------------------------------------------------
    # height scanner
    # ------------------------------------------------------------------
    def create_height_scanner(
        self,
        body: Any,
        offsets: Any,
        *,
        direction: Any = (0.0, 0.0, -1.0),
        alignment: str = "yaw",
        max_distance: float = 10.0,
        exclude_body: bool = True,
    ) -> HeightScanner:
        """A scanner of rays from points fixed to ``body``, created once and queried every step.

        Args:
            body: a body name or id.
            offsets: ``(R, 3)`` ray origins in the body frame (:func:`simbackend.scanner.grid_offsets`
                builds a grid).
            direction: the rays' direction (normalised); world frame for ``yaw``
                and ``world``, body frame for ``full``.
            alignment: ``yaw`` (points turn with the body's heading only, rays
                keep the world direction: the usual terrain scan), ``full``
                (points and rays turn with the body) or ``world`` (points only
                translate with the body).
            max_distance: longest ray, m; a miss, or a hit farther away, reads this distance.
            exclude_body: ignore the body's own geoms (never the world body's:
                a scanner on the world body sees the terrain).

        Queries (``distances``, ``heights``, ``hit_points``) see the collision
        geoms (``contype`` or ``conaffinity`` non-zero; visual-only geoms are
        transparent, whatever their colour) of every env at the current state,
        with the same rules on every engine: a ray reports the first point at
        distance >= 0 where it crosses a geom's surface (one starting inside a
        geom reports where it leaves it); planes are unbounded, as in
        collision, and one-sided (a ray hits one only from its front, moving
        towards it). Raises ``UnsupportedFeatureError`` where
        ``capabilities.ray_casting`` is false.
        """
        self._require("ray_casting")
        b = (
            self._names.resolve("body", body)
            if isinstance(body, str)
            else V.scalar_id(body, self._info.nbody, "body", "body", self._host_ids)
        )
        off, d, alignment, max_distance, exclude = check_scanner_arguments(
            offsets, direction, alignment, max_distance, exclude_body
        )
        return HeightScanner(
            self._engine, int(b), off, d, alignment, max_distance, exclude, self._out, self._check_open
        )

    # ------------------------------------------------------------------
    # pictures
    # ------------------------------------------------------------------
    def get_play_capabilities(self) -> PlayCapabilities:
        """What pictures this backend can give; see :class:`~simbackend.playback.api.PlayCapabilities`.
        Creates no GL context."""
        return self._playback.capabilities()

    def render(
        self,
        env_ids: Ids = None,
        *,
        camera: Any = "free",
        width: int = 320,
        height: int = 240,
        tile: bool = False,
        spacing: float | None = None,
        dress: bool = True,
    ) -> torch.Tensor:
        """Pictures of envs at their current state.

        Args:
            env_ids: envs to draw (ids or a ``(N,)`` bool mask; ``None``: all), in that order.
            camera: a model camera name or id, ``"free"`` (frames the model's moving
                parts and follows a floating base, or with ``tile`` frames the whole
                grid) or a :class:`~simbackend.playback.render.FreeCamera`.
            width, height: image size, pixels.
            tile: draw the chosen envs side by side in ONE scene and picture, env ``k``
                of the list shifted by ``tile_offsets(n, spacing)[k]`` (a grid along
                +x and +y, the first env in place); the floor is drawn once.
            spacing: metres between neighbouring envs of a tiled view (default
                ``1.1 * model extent``).
            dress: add the floor, light and sky the model lacks
                (:mod:`simbackend.playback.render.dress`); ``False`` draws the model alone.

        Returns:
            ``(n, H, W, 3)`` uint8, or ``(H, W, 3)`` with ``tile=True``, on ``backend.device``.

        Raises:
            UnsupportedFeatureError: the backend carries no compiled MuJoCo model.
            RenderingError: no OpenGL context can be created here.
        """
        return self._playback.render(env_ids, camera, width, height, tile, spacing, dress)

    def get_camera_images(
        self,
        cameras: Any,
        env_ids: Ids = None,
        *,
        modes: Any = ("rgb",),
        width: int = 320,
        height: int = 240,
        segmentation: str = "geom",
    ) -> dict[str, dict[str, torch.Tensor]]:
        """Camera observations of envs at their current state.

        Args:
            cameras: a camera (model camera name or id, ``"free"``, a ``FreeCamera``), a
                sequence of cameras, or a mapping ``{key: camera}`` naming them.
            env_ids: envs (ids or a ``(N,)`` bool mask; ``None``: all), in that order.
            modes: ``"rgb"``, ``"depth"``, ``"segmentation"`` or a sequence of them.
            width, height: image size, pixels.
            segmentation: ``"geom"`` (geom ids) or ``"body"`` (body ids).

        Returns:
            ``{camera key: {mode: tensor}}``, keys the camera names (``"free"`` for a free
            camera) or the mapping's keys: ``rgb`` ``(n, H, W, 3)`` uint8, ``depth``
            ``(n, H, W, 1)`` float32 metres along the optical axis (``inf``: nothing hit),
            ``segmentation`` ``(n, H, W, 1)`` int32 (-1: background or not a geom).
        """
        return self._playback.camera_images(cameras, env_ids, modes, width, height, segmentation)

    def get_point_cloud(
        self, cameras: Any, env_ids: Ids = None, *, width: int = 320, height: int = 240, segmentation: str = "geom"
    ) -> dict[str, torch.Tensor]:
        """Points the cameras see, fused, in the world frame, for envs at their current state.

        Args:
            cameras: a camera or a sequence (or mapping) of cameras, as :meth:`get_camera_images`.
            env_ids: envs (``None``: all), in that order.
            width, height: each camera's image size, pixels.
            segmentation: ``"geom"`` or ``"body"`` ids for the ``segmentation`` field.

        Returns:
            ``xyz`` ``(n, P, 3)`` float32 world-frame metres (0 where invalid), ``rgb``
            ``(n, P, 3)`` uint8, ``segmentation`` ``(n, P)`` int32 and ``valid`` ``(n, P)``
            bool (False where nothing was hit), ``P = cameras * H * W``, each camera's pixels
            row-major in turn. ManiSkill's ``pointcloud`` gives ``xyzw`` with ``w = 0`` for
            points at infinity instead of the mask (see :mod:`simbackend.playback.render`).
        """
        return self._playback.point_cloud(cameras, env_ids, width, height, segmentation)

    # ------------------------------------------------------------------
    # observers
    # ------------------------------------------------------------------
    @property
    def observers(self) -> tuple[Any, ...]:
        """The observers added (:meth:`add_observer`), in the order they run."""
        return tuple(self._observers)

    def add_observer(self, observer: Any) -> None:
        """Call ``observer`` after every successful ``step`` and state or parameter write.

        ``observer.on_step(backend, nsteps, info)`` runs at the end of every
        ``step`` (``info`` is what ``step`` returns); ``observer.on_write(backend,
        env_ids, what)`` after every call that changed some envs' state or
        parameters between steps (``what``: ``set_state``, ``set_physics_state``,
        ``set_named_state``, ``apply_init_randomization``,
        ``apply_interval_randomization``, ``apply_body_velocity_delta``;
        ``env_ids`` a sorted int64 host array). A recorder
        (:class:`simbackend.playback.recording.Recorder`) is one. Observers run
        in the order added; an exception from one propagates from the call,
        whose own work is already done.
        """
        if not (callable(getattr(observer, "on_step", None)) and callable(getattr(observer, "on_write", None))):
            raise ArgumentTypeError(
                f"observer: expected an object with on_step and on_write methods, got {type(observer).__name__}"
            )
        if any(o is observer for o in self._observers):
            raise InvalidArgumentError("observer: already added")
        self._observers.append(observer)

    def remove_observer(self, observer: Any) -> None:
        """Stop calling ``observer`` (added by :meth:`add_observer`)."""
        for k, o in enumerate(self._observers):
            if o is observer:
                del self._observers[k]
                return
        raise InvalidArgumentError("observer: not added to this backend")

    # ------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------
    def close(self) -> None:
        """Release the engine's resources; idempotent. Every public method raises ``BackendClosedError`` afterwards.

        An input error deferred and not raised yet (deferred checks: a bad value seen by the last calls)
        is raised by ``close`` once everything is released, as a file's ``close`` raises the error of its
        last flush: the backend is closed either way, and a second ``close`` does nothing. Leaving a
        ``with`` block because of another exception, that exception goes on, with the deferred error
        added as a note.
        """
        if self._closed:
            return
        self._closed = True
        pending: SimBackendError | None = None
        try:
            if self._faults is not None:
                try:
                    self._faults.pending = True  # a replayed CUDA graph marks without a Python call
                    self._faults.publish()
                    self._faults.raise_if_any(wait=True)
                except SimBackendError as e:
                    pending = e
        finally:
            try:
                self._playback.close()
            finally:
                self._engine.close()
        if pending is not None:
            raise pending

    def __enter__(self) -> SimBackend:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except SimBackendError as pending:  # the exception leaving the block goes on; the deferred error is noted
            exc.add_note(f"also pending when the backend closed: {type(pending).__name__}: {pending}")

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<SimBackend {self.name!r} num_envs={self.num_envs} device={self.device}{state}>"

    # ------------------------------------------------------------------
    # internals: stepping and the divergence rule
    # ------------------------------------------------------------------
    def _advance_delayed(
        self, ctrl: torch.Tensor, nsteps: int, hold: torch.Tensor | None, late: torch.Tensor, bounds: list[int]
    ) -> torch.Tensor:
        """``nsteps`` substeps in which env ``i`` applies the previous call's command for its first
        ``late[i]`` substeps, then ``ctrl``: one engine call per part between consecutive ``bounds``.
        An env that diverges in a part is held (and reverted) in the parts after it, so that it keeps its
        state from before the call as in a single call; an exception puts every env back where the call
        found it."""
        prev = self._dr.pending_ctrl
        assert prev is not None  # a latency keeps the pending command
        prev = prev.to(ctrl.dtype)
        mark = self._mark() if len(bounds) > 2 else None
        diverged = torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)
        stay = hold
        try:
            for a, b in zip(bounds[:-1], bounds[1:]):
                part = torch.where((late > a)[:, None], prev, ctrl)
                diverged |= self._advance(part, b - a, stay, judge_steps=nsteps)
                if self._defers_checks or bool(diverged.any()):  # a GPU engine: no host read of the mask
                    stay = diverged if hold is None else hold | diverged
        except BaseException:
            if mark is not None and not self._closed:
                with HeldInterrupt():
                    self._rewind(mark)
            raise
        return diverged

    def _advance(
        self, ctrl: torch.Tensor, nsteps: int, hold: torch.Tensor | None, judge_steps: int | None = None
    ) -> torch.Tensor:
        """``nsteps`` engine substeps with ``ctrl``, judged by the contract's divergence rule; diverged
        and held envs (``hold``: GPU input faults) get back their pre-call state. Returns the
        ``(N,)`` diverged mask (held envs excluded); time and the last controls follow. ``judge_steps``:
        the substeps of the whole ``step`` call this is part of (rule 5 judges a push over the call)."""
        engine, defer = self._engine, self._defers_checks
        if hold is not None:  # held envs step with their own last controls, then are reverted
            ctrl = self._keep_held_ctrl(ctrl, hold)
        forces = self._book.pending_forces()
        try:
            failed = engine.step(ctrl, nsteps, forces)
            qpos, qvel = engine.read_state()
            # a CPU backend's common case, judged by one reduction per array: nothing diverged, nothing to revert
            clean = (
                not defer
                and forces is None
                and hold is None
                and (failed is None or not failed.any())
                and not any_diverged(qpos, qvel)
            )
            if not clean:
                diverged = self._mask(diverged_rows(qpos, qvel))
                if forces is not None:  # rule 5: a push no engine integrates (simbackend.divergence)
                    diverged = diverged | self._pushed_too_hard(forces, judge_steps or nsteps)
                if failed is not None:
                    diverged = diverged | self._mask(failed)
                stayed = diverged if hold is None else diverged | hold
                if defer or bool(stayed.any()):  # a GPU engine reverts by mask, no host read
                    engine.revert(stayed)
        except BaseException:
            # interrupted (Ctrl-C) or failed anywhere, judging included: every env back at its pre-call state;
            # a second Ctrl-C waits for the revert to end
            with HeldInterrupt():
                engine.revert(torch.ones(self.num_envs, dtype=torch.bool, device=self._device))
            raise
        self._book.keep_ctrl(ctrl)  # a copy: the caller may reuse the tensor it passed
        if clean:
            self._book.advance_all(nsteps * self.physics_dt)
            return torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)
        self._book.advance(nsteps * self.physics_dt, stayed, defer)
        return diverged if hold is None else diverged & ~hold

    def _pushed_too_hard(self, forces: BodyForces, nsteps: int) -> torch.Tensor:
        """``(N,)`` rule 5 of :mod:`simbackend.divergence` for the forces of this call."""
        if self._inv_weight is None:
            weights = np.asarray(self._info.compiled.body_invweight0, np.float64).reshape(-1, 2)
            self._inv_weight = torch.as_tensor(weights, device=self._device)
        cols = torch.as_tensor(forces.bodies, device=self._device)
        w = self._inv_weight[cols]
        return forced_rows(forces.force.to(w.dtype), forces.torque.to(w.dtype), w, nsteps * self.physics_dt)

    def _mark(self) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """What undoes several substeps: the engine's snapshot rows of every env (its whole state: warm
        starts, delegated forces' memory) or, for an engine without snapshots, its qpos and qvel; and the
        front end's time and controls."""
        ids = np.arange(self.num_envs)
        if self.capabilities.snapshot_restore:
            engine: Any = torch.as_tensor(self._engine.save_state(ids), dtype=torch.float64).clone()
        else:
            engine = tuple(torch.as_tensor(x).clone() for x in self._engine.read_state())
        return engine, self._book.time.clone(), self._book.ctrl.clone()

    def _rewind(self, mark: tuple[Any, torch.Tensor, torch.Tensor]) -> None:
        """Put every env back where :meth:`_mark` found it."""
        engine, time_, ctrl = mark
        self._book.restore(time_, ctrl)
        ids = np.arange(self.num_envs)
        if isinstance(engine, tuple):
            self._engine.write_state(ids, engine[0].contiguous(), engine[1].contiguous())
        else:
            self._engine.restore_state(ids, engine)

    def _mask(self, mask: Any) -> torch.Tensor:
        """``(N,)`` bool tensor on the backend's device from an engine's numpy or torch mask."""
        return torch.as_tensor(mask, dtype=torch.bool).to(self._device)

    # ------------------------------------------------------------------
    # internals: checks
    # ------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError(f"backend {self.name!r} is closed")

    def _require(self, capability: str) -> None:
        if not getattr(self.capabilities, capability):
            raise UnsupportedFeatureError(self.name, capability)

    def _enter_mutation(self, method: str) -> None:
        """Checks every mutating call starts with: not re-entered, no deferred input error pending."""
        if self._in_step:
            raise ReentrantCallError(
                f"{method}: called from inside a pre-step control function while step runs;"
                " a pre-step function may read getters and return ctrl, nothing else"
            )
        if self._faults is not None:
            self._faults.raise_if_any()

    @property
    def _defers_checks(self) -> bool:
        if self._deferred is None:
            self._deferred = bool(self.capabilities.gpu)
        return self._deferred

    @property
    def _input_dtype(self) -> torch.dtype:
        """dtype inputs are validated in: float64 at least, so that a finite value too large for a
        float32 engine is reported as too large (``ValueRangeError``), not as infinite after the cast."""
        return torch.float64 if self._dtype.itemsize < 8 else self._dtype

    @property
    def _all_env_ids(self) -> np.ndarray:
        """``arange(N)`` on the host, made once."""
        return self._all_ids("env", self.num_envs)

    def _check_values(
        self, env_ids: np.ndarray, checks: list, select: torch.Tensor | None = None, *, at_once: bool = False
    ) -> torch.Tensor | None:
        """Value checks of validated tensors, rows aligned with ``env_ids``.

        ``checks``: ``(argument, tensor, problem, columns)`` with ``problem``
        ``"nonfinite"``, ``"zero quaternion"`` (``tensor`` is then the ``(n,)`` bad-row
        mask) or a magnitude limit. A CPU backend raises the first failing check;
        a GPU backend records them on the device and returns the ``(n,)`` mask of
        rows to hold (or ``None`` when there are no rows). ``select``: an ``(n,)`` bool
        device mask of the rows that count (the others are not inputs). ``at_once``: raise as a CPU
        backend does whatever the backend (inputs that are on the host anyway: snapshots, named states).
        """
        held = None
        defer = self._defers_checks and not at_once
        for argument, t, problem, columns in checks:
            if problem == "nonfinite":
                bad = V.nonfinite_rows(t)
            elif problem == "zero quaternion":
                bad = t
            else:
                bad = V.rows_above(t, problem, columns)
            if select is not None:
                bad = bad & select
            if not defer:
                if bool(bad.any()):
                    rows = env_ids[bad.cpu().numpy()]
                    if problem == "nonfinite":
                        raise NonFiniteError(argument, rows)
                    if problem == "zero quaternion":
                        joints = sorted({self._info.joint_names[j] for j in self._info.quat_joint})
                        raise InvalidQuaternionError(
                            f"{argument}: zero quaternion for joint(s) {joints} in env ids {rows[:8].tolist()};"
                            " a rotation needs a non-zero quaternion (wxyz)"
                        )
                    what = "values the divergence rule would flag" if problem in (MAX_QPOS, MAX_QVEL) else "values"
                    raise ValueRangeError(argument, rows, float(problem), what)
                continue
            if self._faults is None:
                self._faults = DeferredFaults(self.num_envs, self._device)
            rows_dev = None if env_ids is self._all_env_ids else torch.as_tensor(env_ids, device=self._device)
            self._faults.record(
                argument,
                "nonfinite"
                if problem == "nonfinite"
                else "zero quaternion"
                if problem == "zero quaternion"
                else str(problem),
                rows_dev,
                bad,
            )
            held = bad if held is None else held | bad
        return held

    def _check_ctrl(self, ctrl: Any, argument: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Validated ``(N, nu)`` ctrl and, on a GPU backend, the ``(N,)`` mask of envs to hold."""
        dev, dt = self._device, self._input_dtype
        if ctrl is None:
            if self.num_actuators:
                raise InvalidArgumentError(f"{argument}: required, the model has {self.num_actuators} actuators")
            return torch.zeros((self.num_envs, 0), dtype=self._dtype, device=dev), None
        shape = self._ctrl_shape
        if not self._defers_checks and dev.type == "cpu":  # fast path: one reduction checks every value
            host = V.host_real(ctrl, shape)
            if host is not None:  # the caller's tensor may be used as it is: step copies what it keeps
                return torch.from_numpy(host.astype(self._np_dtype, copy=False)), None
        if isinstance(ctrl, torch.Tensor) and ctrl.dtype in (torch.float32, torch.float16, torch.bfloat16):
            # every finite value of these fits in float32: the magnitude check has nothing to find
            t = V.real_tensor(ctrl, argument, shape, device=dev, dtype=ctrl.dtype)
            checks: list[tuple[str, Any, Any, Any]] = [(argument, t, "nonfinite", None)]
        else:
            t = V.real_tensor(ctrl, argument, shape, device=dev, dtype=dt)
            checks = [(argument, t, "nonfinite", None), (argument, t, V.MAX_REAL_INPUT, None)]
        held = self._check_values(self._all_env_ids, checks)
        t = t.to(self._dtype)
        return (t, None) if held is None else (self._keep_held_ctrl(t, held), held)

    def _keep_held_ctrl(self, ctrl: torch.Tensor, hold: torch.Tensor) -> torch.Tensor:
        """``ctrl`` with the rows of held envs (``hold``, ``(N,)`` bool: refused input) replaced by the
        controls those envs last applied: a refused row leaves the env's controls as they were."""
        return torch.where(hold[:, None], self._book.ctrl.to(ctrl.dtype), ctrl)

    def _check_snapshot_state(self, env_ids: np.ndarray, qpos: Any, qvel: Any, argument: str = "state") -> None:
        """The checks ``set_state`` applies (finite values, divergence bounds, zero quaternions) on the
        ``qpos (n, nq)`` / ``qvel (n, nv)`` a snapshot's engine rows (or a named state) hold, raised at
        once with or without deferred checks: these rows come from the host, so the check reads nothing
        back that was not read already, and a refused row writes nothing (time and controls included)."""
        qpos = torch.as_tensor(qpos, device=self._device).to(self._input_dtype)
        qvel = torch.as_tensor(qvel, device=self._device).to(self._input_dtype)
        _, zero = V.normalised_quaternions(qpos, self._quat_cols)
        self._check_values(
            env_ids,
            [
                (f"{argument} (qpos)", qpos, "nonfinite", None),
                (f"{argument} (qvel)", qvel, "nonfinite", None),
                (f"{argument} (qpos)", qpos, MAX_QPOS, None),
                (f"{argument} (qvel)", qvel, MAX_QVEL, None),
                (f"{argument} (qpos)", zero, "zero quaternion", None),
            ],
            at_once=True,
        )

    # ------------------------------------------------------------------
    # internals: ids, conversions, frames
    # ------------------------------------------------------------------
    def _out(self, a: Any) -> torch.Tensor:
        """A new float32 tensor on the backend's device holding ``a`` (numpy array or tensor) that the caller owns."""
        if isinstance(a, torch.Tensor):
            return a.to(device=self._device, dtype=torch.float32, copy=True)
        t = torch.from_numpy(np.array(a, dtype=np.float32))
        return t if self._device.type == "cpu" else t.to(self._device)

    def _id_tensor(self, a: np.ndarray) -> torch.Tensor:
        host = np.asarray(a, dtype=np.int64)
        t = torch.as_tensor(host.copy())
        t = t if self._device.type == "cpu" else t.to(self._device)
        return self._host_ids.register(t, host)

    def _state_out(self, which: int, env_ids: Ids) -> torch.Tensor:
        a = self._engine.read_state()[which]
        if env_ids is None:
            return self._out(a)
        rows = self._row_index(env_ids)
        if isinstance(a, np.ndarray):
            return self._out(a[rows.cpu().numpy()])
        return self._out(a[rows])

    def _columns(self, a: Any, which: str) -> Any:
        """``a[:, cols]`` for the dof columns ``which`` (``dof_qpos``/``dof_qvel``), numpy or tensor."""
        src = self._dof_columns[which]
        if isinstance(a, np.ndarray):
            return a[:, src]
        cols = self._index_cache.get(which)
        if cols is None:
            cols = self._index_cache[which] = torch.as_tensor(src, dtype=torch.long, device=a.device)
        return a[:, cols]

    def _row_index(self, env_ids: Any) -> torch.Tensor:
        """Validated env ids (any accepted form) as an index tensor on the device. An id tensor the
        backend made (``_id_tensor``) or a read-only numpy array is validated once, until it changes
        (a recorder passes the same one every step)."""
        memo = self._row_memo
        if isinstance(env_ids, (torch.Tensor, np.ndarray)):
            hit = memo.get(id(env_ids))
            if hit is not None and hit[0]() is env_ids and hit[1] == _version(env_ids):
                return hit[2]
        index = torch.as_tensor(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids), device=self._device)
        frozen = isinstance(env_ids, np.ndarray) and not env_ids.flags.writeable and env_ids.base is None
        if frozen or isinstance(env_ids, torch.Tensor) and self._host_ids.lookup(env_ids) is not None:
            if len(memo) >= 64:
                memo.clear()
            memo[id(env_ids)] = (weakref.ref(env_ids), _version(env_ids), index)
        return index

    def _base_ids(self) -> np.ndarray:
        return self._all_ids("base", 0)

    def _all_ids(self, kind: str, size: int) -> np.ndarray:
        """The host index of every ``kind`` (``"base"``: the base body alone), made once (engines read
        ids, never write them; left writeable, as torch warns about read-only arrays)."""
        ids = self._index_cache.get(kind)
        if ids is None:
            ids = np.array([self._info.base_body], np.int64) if kind == "base" else np.arange(size, dtype=np.int64)
            self._index_cache[kind] = ids
        return ids

    def _body_index(self, body_ids: Ids) -> np.ndarray:
        if body_ids is None:
            return self._all_ids("body", self._info.nbody)
        return V.index_array(body_ids, self._info.nbody, "body", "body_ids", host_ids=self._host_ids)

    def _site_index(self, site_ids: Ids) -> np.ndarray:
        if site_ids is None:
            return self._all_ids("site", len(self.site_names))
        return V.index_array(site_ids, len(self.site_names), "site", "site_ids", host_ids=self._host_ids)

    def _geom_index(self, geom_ids: Ids) -> np.ndarray:
        if geom_ids is None:
            return self._all_ids("geom", self._info.ngeom)
        return V.index_array(geom_ids, self._info.ngeom, "geom", "geom_ids", host_ids=self._host_ids)

    def _sensor_id(self, name: str) -> int:
        """The id of sensor ``name``, of a type the backend serves."""
        sid = self._names.resolve("sensor", name)
        stype = self._info.sensor_type[sid]
        if stype not in self.capabilities.sensor_types:
            raise UnsupportedFeatureError(self.name, f"sensor type {stype}", f"sensor {name!r}")
        return sid

    # ------------------------------------------------------------------
    # internals: observers
    # ------------------------------------------------------------------
    def _notify_write(self, env_ids: np.ndarray, what: str) -> None:
        if self._observers and not self._silenced and np.asarray(env_ids).size:
            ids = np.sort(np.asarray(env_ids, np.int64))
            for observer in tuple(self._observers):
                observer.on_write(self, ids, what)

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Suppress write notifications inside (a call made of other public calls notifies once)."""
        self._silenced, before = True, self._silenced
        try:
            yield
        finally:
            self._silenced = before


def _version(ids: Any) -> int:
    """A number that changes when ``ids`` is written in place (a read-only array never is)."""
    return ids._version if isinstance(ids, torch.Tensor) else 0  # noqa: SLF001 (torch's write counter)
