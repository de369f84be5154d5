"""The SimBackend contract.

One batched simulation of ``N = num_envs`` copies of one model. Conventions
(``docs/ARCHITECTURE.md``, "Conventions"):

* Outputs are ``torch.Tensor`` on ``backend.device``: real values ``float32``,
  ids ``int64``. Batch first: the leading dimension is N. Every getter returns a
  new tensor that the caller owns; the backend never writes into it later.
* Inputs accept torch tensors (any device, dtype and strides), numpy arrays or
  sequences. Id tensors returned by ``get_*_ids`` can be passed back at no cost
  (the backend keeps their host copies).
* World frame: Z up, gravity along -Z. Quaternions are wxyz and unit norm.
* ``qpos``/``qvel`` use MuJoCo's layout for the model: a free joint is
  ``pos(3) + quat(4)`` in qpos and ``linear velocity (world, 3) + angular
  velocity (body-local, 3)`` in qvel; a ball joint ``quat(4)`` / ``angular
  velocity (local, 3)``; hinge and slide joints one value each.
* DoFs (``get_dof_pos/vel``) are the hinge and slide joints in joint order:
  every joint with one scalar coordinate. Free joints (the floating base and
  any free object) and ball joints are reached through ``qpos``/``qvel``
  (``get_joint_qpos_indices`` gives any joint's columns).
* Base: the root body of the model's first kinematic tree.
* Body quantities describe the body frame: ``pos``/``quat`` of the frame,
  linear velocity of the frame's **origin** (not the centre of mass), angular
  velocity in world coordinates. ``_w``: world frame. ``_b``: the same quantity
  expressed in the base frame (positions and orientations relative to the
  base; velocities are the world-frame velocities rotated into base
  coordinates, not velocities relative to the moving base).
* Ids index ``body_names`` (world body first), ``joint_names``, ``site_names``,
  ``actuator_names`` and ``sensor_names`` in the compiled model's order.
* Time: ``physics_dt`` is one substep; ``step(ctrl, nsteps=k)`` advances k
  substeps with the same ctrl. After any call returns, every getter describes
  the same instant (the current state).
* Divergence is defined once, in :mod:`simbackend.divergence`.

Errors (``simbackend.errors``): every public method validates all of its
arguments before it writes anything, so a call that raises leaves every env as
it was. After :meth:`SimBackend.close`, every public method raises
:class:`~simbackend.errors.BackendClosedError`.

Writing a backend: subclass :class:`SimBackend`, call ``super().__init__`` with
the model's :class:`~simbackend.model_info.ModelInfo`, and implement the
abstract hooks (``get_qpos``, ``get_qvel``, ``_body_*``, ``_site_*``,
``_sensor_data``, ``_set_state``, ``_step``, ...). The hook boundary is
torch-native: hooks receive validated **torch tensors on the backend's
device** in its :attr:`SimBackend.hook_dtype`, and ids as int64 host numpy
arrays. Register the class under the entry-point group
``simbackend.backends`` and run ``simbackend contract --sim NAME``.

GPU backends (``capabilities.gpu``) never synchronise with the host in
``step``, ``set_state`` or a getter: shapes and dtypes are checked from tensor
metadata, ids come from host copies, and input *values* (NaN/inf, magnitudes)
are checked by device reductions whose verdict is read at the next call: the
envs whose input was bad are left as they were (their state is not written,
they are not stepped), and the next ``step``/``set_state``/
``apply_body_force`` (or :meth:`SimBackend.synchronize`) raises the error
naming them. CPU backends raise at once.
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import time
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.capabilities import Capabilities
from simbackend.devices import require_device
from simbackend.divergence import MAX_QPOS, MAX_QVEL
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    IndexRangeError,
    InvalidArgumentError,
    InvalidQuaternionError,
    NonFiniteError,
    ReentrantCallError,
    UnknownNameError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.math import quat_apply_inverse, quat_conj, quat_mul
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_TYPE_NAMES, ModelInfo
from simbackend.options import BackendOptions, EngineOption, parse_options
from simbackend.randomization.apply import RandomizationMixin
from simbackend.readout import ReadoutMixin
from simbackend.playback.api import PlaybackMixin
from simbackend.snapshot import SnapshotMixin

Names = Union[str, Sequence[str]]
Ids = Any  # int, sequence of ints, numpy array or torch tensor
PreStepControl = Callable[["SimBackend", torch.Tensor], Any]

#: quaternions with a norm below this are rejected by set_state
MIN_QUAT_NORM = 1e-9


class ActuatorGains(NamedTuple):
    """Per-actuator servo gains, ``(nu,)`` each.

    ``kp``: position gain (force per unit position error) of position
    actuators, 0 for the others. ``kv``: velocity gain (damping) of position
    and velocity actuators, 0 for motors.
    """

    kp: torch.Tensor
    kv: torch.Tensor


class _DeferredFaults:
    """Input value checks of a GPU backend, computed on the device and read at the next call.

    One ``(K, N)`` bool tensor marks, per (argument, problem) pair, the envs
    whose input was bad; a CUDA backend copies it to pinned host memory
    without waiting, and the next call reads the copy once the copy's event
    has completed (``query`` never blocks). The envs marked were left as they
    were by the call that saw the bad input.
    """

    def __init__(self, num_envs: int, device: torch.device):
        self.kinds: list[tuple[str, str]] = []
        self.num_envs, self.device = num_envs, device
        self.masks = torch.zeros((0, num_envs), dtype=torch.bool, device=device)
        self.host: Optional[np.ndarray] = None
        self.event = None
        self.pending = False

    def _row(self, argument: str, problem: str) -> int:
        key = (argument, problem)
        if key not in self.kinds:
            self.kinds.append(key)
            shape = (len(self.kinds), self.num_envs)
            if self.device.type == "cpu":  # the marks live in host memory: numpy and torch share it
                self.host = np.zeros(shape, dtype=bool)
                grown = torch.from_numpy(self.host)
            else:
                grown = torch.zeros(shape, dtype=torch.bool, device=self.device)
                self.host = None
            grown[: self.masks.shape[0]] = self.masks
            self.masks = grown
        return self.kinds.index(key)

    def record(self, argument: str, problem: str, env_ids: torch.Tensor, bad: torch.Tensor) -> None:
        """Mark ``env_ids[bad]`` (device tensors) for ``argument``; reads nothing back."""
        k = self._row(argument, problem)  # may grow self.masks: index it afterwards
        row = self.masks[k]
        row[env_ids] = row[env_ids] | bad  # ids are distinct
        self.pending = True

    def publish(self) -> None:
        """Start the copy of the marks to the host (no wait)."""
        if not self.pending:
            return
        if self.device.type == "cuda":
            if self.host is None or self.host.shape != tuple(self.masks.shape):
                self._pinned = torch.zeros(tuple(self.masks.shape), dtype=torch.bool, pin_memory=True)
                self.host = self._pinned.numpy()  # a view of pinned host memory: no device read
                self.event = torch.cuda.Event()
            self._pinned.copy_(self.masks, non_blocking=True)
            self.event.record()

    def raise_if_any(self, wait: bool = False) -> None:
        """Raise the first recorded problem (clearing the marks), once its copy has arrived."""
        if not self.pending or self.host is None:
            return
        if self.event is not None and not (wait or self.event.query()):
            return
        if self.event is not None and wait:
            self.event.synchronize()
        self.pending = False
        if not self.host.any():
            return
        rows = [(k, np.flatnonzero(self.host[k])) for k in range(len(self.kinds)) if self.host[k].any()]
        self.masks.zero_()
        self.host[...] = False
        (argument, problem), ids = self.kinds[rows[0][0]], rows[0][1]
        note = " (a GPU backend checks input values on the device and reports them at the next call; those envs were left as they were)"
        if problem == "nonfinite":
            err: Exception = NonFiniteError(argument, ids)
        elif problem == "zero quaternion":
            err = InvalidQuaternionError(f"{argument}: zero quaternion in env ids {ids[:8].tolist()}")
        else:
            err = ValueRangeError(argument, ids, float(problem))
        err.args = (str(err) + note,)
        raise err


class SimBackend(ReadoutMixin, RandomizationMixin, SnapshotMixin, PlaybackMixin, abc.ABC):
    """A batch of ``num_envs`` simulations of one model behind one engine.

    Construction (``make_backend`` or the class): ``Backend(model, num_envs, *,
    device=None, seed=0, **options)``; the options every backend accepts are
    listed in :mod:`simbackend.options`.
    """

    #: registered name of the backend (lower case)
    name: ClassVar[str] = "abstract"
    #: dtype of the real-valued tensors the hooks receive (float32 or float64)
    hook_dtype: ClassVar[torch.dtype] = torch.float64
    #: the keys of this engine's option block (``make_backend(..., <name>={...})``)
    engine_options: ClassVar[Mapping[str, EngineOption]] = {}

    def __init__(self, info: ModelInfo, num_envs: int, *, device: Any, seed: int = 0):
        self._closed = False
        self._info = info
        self._num_envs = V.positive_int(num_envs, "num_envs")
        self._device = torch.device(device)
        self._seed = V.seed_value(seed)
        self._pre_step: Optional[PreStepControl] = None
        self._in_step = False
        self._host_ids = V.HostIds()
        self._faults: Optional[_DeferredFaults] = None
        self._deferred: Optional[bool] = None  # decided on first use, from capabilities.gpu
        # name -> id tables
        self._ids = {
            "body": {n: i for i, n in enumerate(info.body_names)},
            "joint": {n: i for i, n in enumerate(info.joint_names)},
            "site": {n: i for i, n in enumerate(info.site_names)},
            "actuator": {n: i for i, n in enumerate(info.actuator_names)},
            "sensor": {n: i for i, n in enumerate(info.sensor_names)},
            "geom": {n: i for i, n in enumerate(info.geom_names)},
            "keyframe": {n: i for i, n in enumerate(info.keyframe_names)},
        }
        self._dof_column = {int(j): c for c, j in enumerate(info.dof_joints)}
        self._index_cache: dict[str, torch.Tensor] = {}
        quat_cols = info.quat_qpos_index[:, None] + np.arange(4) if info.quat_qpos_index.size else np.zeros((0, 4), int)
        self._quat_cols = torch.as_tensor(quat_cols, dtype=torch.long, device=self._device)
        # pending body forces (apply_body_force until the next step): (N, nbody, 3) each, on first use
        self._force: Optional[torch.Tensor] = None
        self._torque: Optional[torch.Tensor] = None
        self._force_bodies = np.zeros(0, np.int64)
        self._dr_init_state()
        self._snapshot_init()
        self._observers: list = []
        self._silenced = False

    # ------------------------------------------------------------------
    # construction helpers for subclasses
    # ------------------------------------------------------------------
    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> BackendOptions:
        """Validate ``**options`` (the common ones and this engine's block; see :mod:`simbackend.options`)."""
        return parse_options(cls.name, options, cls.engine_options)

    @staticmethod
    def resolve_device(device: Any, allowed: Sequence[str] = ("cpu",)) -> torch.device:
        """``device`` (``None``: cpu) checked against the device types the backend supports."""
        return require_device(device, allowed=allowed)

    # ------------------------------------------------------------------
    # properties
    # ------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every public method then raises ``BackendClosedError``)."""
        return self._closed

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
    def seed(self) -> int:
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
        return self._info.joint_names

    @property
    def dof_names(self) -> tuple[str, ...]:
        """Names of the joints behind ``get_dof_pos/vel`` columns, in order."""
        return tuple(self._info.joint_names[j] for j in self._info.dof_joints)

    @property
    def site_names(self) -> tuple[str, ...]:
        return self._info.site_names

    @property
    def actuator_names(self) -> tuple[str, ...]:
        return self._info.actuator_names

    @property
    def sensor_names(self) -> tuple[str, ...]:
        return self._info.sensor_names

    @property
    def keyframe_names(self) -> tuple[str, ...]:
        """Names of the model's keyframes (``get_keyframe_qpos`` takes them), in model order."""
        return self._info.keyframe_names

    @property
    def base_body_id(self) -> int:
        """Body id of the base: root body of the first kinematic tree."""
        return self._info.base_body

    @property
    def has_floating_base(self) -> bool:
        """Whether the base body is attached to the world by a free joint."""
        return self._info.has_floating_base

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """The features this backend supports (see :class:`Capabilities`)."""

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
        k = self._resolve("keyframe", name)
        return self._out(self._info.key_qpos[k])

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
            UnsupportedFeatureError: the backend cannot read its model back
                (the default).
        """
        raise UnsupportedFeatureError(self.name, "model_fields")

    # ------------------------------------------------------------------
    # name resolution
    # ------------------------------------------------------------------
    def get_body_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` body ids of ``names`` (a name or a sequence of names)."""
        return self._id_tensor(self._resolve_many("body", names))

    def get_joint_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` joint ids of ``names``."""
        return self._id_tensor(self._resolve_many("joint", names))

    def get_site_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` site ids of ``names``."""
        return self._id_tensor(self._resolve_many("site", names))

    def get_actuator_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` actuator ids (ctrl columns) of ``names``."""
        return self._id_tensor(self._resolve_many("actuator", names))

    def get_sensor_ids(self, names: Names) -> torch.Tensor:
        """``(n,)`` sensor ids of ``names``."""
        return self._id_tensor(self._resolve_many("sensor", names))

    def get_joint_dof_pos_indices(self, names: Names) -> torch.Tensor:
        """``(n,)`` columns of ``get_dof_pos()`` of hinge/slide joints ``names``."""
        return self._id_tensor(self._dof_columns(names))

    def get_joint_dof_vel_indices(self, names: Names) -> torch.Tensor:
        """``(n,)`` columns of ``get_dof_vel()`` of hinge/slide joints ``names``.

        Every dof joint has one position and one velocity column, so these equal
        :meth:`get_joint_dof_pos_indices`; both exist so that code says which
        array it indexes.
        """
        return self._id_tensor(self._dof_columns(names))

    def get_joint_qpos_indices(self, names: Names) -> torch.Tensor:
        """``(k,)`` columns of ``get_qpos()`` of joints ``names``, any type, in the order named.

        A hinge or slide joint has 1 column, a ball joint 4 (its quaternion), a
        free joint 7 (position, then quaternion); ``k`` is their sum.
        """
        return self._id_tensor(self._joint_columns(names, velocity=False))

    def get_joint_qvel_indices(self, names: Names) -> torch.Tensor:
        """``(k,)`` columns of ``get_qvel()`` (and of Jacobians) of joints ``names``, any type.

        A hinge or slide joint has 1 column, a ball joint 3, a free joint 6
        (linear velocity in the world frame, then body-local angular velocity).
        The one way to find a joint's qvel columns (of ``get_qvel``, ``set_state``'s qvel, ``get_zero_qvel``).
        """
        return self._id_tensor(self._joint_columns(names, velocity=True))

    # ------------------------------------------------------------------
    # state getters: generalized coordinates
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def get_qpos(self) -> torch.Tensor:
        """``(N, nq)`` generalized positions, MuJoCo's layout (quaternions wxyz)."""

    @abc.abstractmethod
    def get_qvel(self) -> torch.Tensor:
        """``(N, nv)`` generalized velocities, MuJoCo's layout (free joint: linear world, angular local)."""

    def get_dof_pos(self) -> torch.Tensor:
        """``(N, num_dof)`` hinge/slide joint positions (rad or m), joint order."""
        return self.get_qpos()[:, self._torch_index("dof_qpos")]

    def get_dof_vel(self) -> torch.Tensor:
        """``(N, num_dof)`` hinge/slide joint velocities (rad/s or m/s), joint order."""
        return self.get_qvel()[:, self._torch_index("dof_qvel")]

    # ------------------------------------------------------------------
    # state getters: base
    # ------------------------------------------------------------------
    def get_base_pos(self) -> torch.Tensor:
        """``(N, 3)`` base body frame origin, world frame."""
        return self._body_pos_w(self._base_ids())[:, 0]

    def get_base_quat(self) -> torch.Tensor:
        """``(N, 4)`` base body orientation, wxyz, world frame."""
        return self._body_quat_w(self._base_ids())[:, 0]

    def get_base_lin_vel(self) -> torch.Tensor:
        """``(N, 3)`` linear velocity of the base frame origin, world frame."""
        return self._body_lin_vel_w(self._base_ids())[:, 0]

    def get_base_ang_vel(self) -> torch.Tensor:
        """``(N, 3)`` angular velocity of the base, world frame (a gyro reads it in the body frame)."""
        return self._body_ang_vel_w(self._base_ids())[:, 0]

    # ------------------------------------------------------------------
    # state getters: bodies and sites
    # ------------------------------------------------------------------
    def get_body_pos_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` body frame origins, world frame; ``None`` for all bodies."""
        return self._body_pos_w(self._body_index(body_ids))

    def get_body_quat_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 4)`` body orientations, wxyz, world frame."""
        return self._body_quat_w(self._body_index(body_ids))

    def get_body_lin_vel_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` linear velocity of each body frame's origin, world frame."""
        return self._body_lin_vel_w(self._body_index(body_ids))

    def get_body_ang_vel_w(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` angular velocity of each body, world frame."""
        return self._body_ang_vel_w(self._body_index(body_ids))

    def get_body_pos_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` body frame origins relative to the base, in base coordinates."""
        ids = self._body_index(body_ids)
        base_pos, base_quat = self.get_base_pos(), self.get_base_quat()
        rel = self._body_pos_w(ids) - base_pos[:, None]
        return quat_apply_inverse(base_quat[:, None].expand(-1, ids.size, -1), rel)

    def get_body_quat_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 4)`` body orientations relative to the base (``q_base^-1 * q_body``), wxyz."""
        ids = self._body_index(body_ids)
        base_quat = self.get_base_quat()[:, None].expand(-1, ids.size, -1)
        return quat_mul(quat_conj(base_quat), self._body_quat_w(ids))

    def get_body_lin_vel_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` world-frame origin linear velocities expressed in base coordinates."""
        ids = self._body_index(body_ids)
        base_quat = self.get_base_quat()[:, None].expand(-1, ids.size, -1)
        return quat_apply_inverse(base_quat, self._body_lin_vel_w(ids))

    def get_body_ang_vel_b(self, body_ids: Ids = None) -> torch.Tensor:
        """``(N, B, 3)`` world-frame angular velocities expressed in base coordinates."""
        ids = self._body_index(body_ids)
        base_quat = self.get_base_quat()[:, None].expand(-1, ids.size, -1)
        return quat_apply_inverse(base_quat, self._body_ang_vel_w(ids))

    def get_site_pos_w(self, site_ids: Ids = None) -> torch.Tensor:
        """``(N, S, 3)`` site positions, world frame; ``None`` for all sites."""
        return self._site_pos_w(self._site_index(site_ids))

    def get_site_quat_w(self, site_ids: Ids = None) -> torch.Tensor:
        """``(N, S, 4)`` site orientations, wxyz, world frame."""
        return self._site_quat_w(self._site_index(site_ids))

    def get_sensor_data(self, name: str) -> torch.Tensor:
        """``(N, dim)`` reading of sensor ``name``, with MuJoCo's meaning and frame for its type."""
        sid = self._resolve("sensor", name)
        stype = self._info.sensor_type[sid]
        if stype not in self.capabilities.sensor_types:
            raise UnsupportedFeatureError(self.name, f"sensor type {stype}", f"sensor {name!r}")
        return self._sensor_data(sid)

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
        return self._site_jacobian_w(sid, cols)

    # ------------------------------------------------------------------
    # mutation
    # ------------------------------------------------------------------
    def set_state(self, env_ids: Ids, qpos: Any, qvel: Any = None, *, randomization: Any = None) -> None:
        """Write the state of some envs; getters reflect it at once, without a step.

        Args:
            env_ids: ``(n,)`` distinct env ids in any order, a boolean mask ``(N,)``,
                or ``None`` for all envs. Envs not named are untouched.
            qpos: ``(n, nq)`` positions, row i for ``env_ids[i]``. Free and ball
                joint quaternions are normalised; a zero quaternion is rejected.
            qvel: ``(n, nv)`` velocities, or ``None`` for zero.
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
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        n = ids.size
        dev, dt = self._device, self._input_dtype
        qpos = V.real_tensor(qpos, "qpos", (n, self.nq), device=dev, dtype=dt)
        qvel = (torch.zeros((n, self.nv), dtype=dt, device=dev) if qvel is None
                else V.real_tensor(qvel, "qvel", (n, self.nv), device=dev, dtype=dt))
        if n == 0:
            return
        order = np.argsort(ids, kind="stable")
        if not (order == np.arange(n)).all():
            perm = torch.as_tensor(order, device=dev)
            ids, qpos, qvel = ids[order], qpos[perm], qvel[perm]
        checks = [("qpos", qpos, "nonfinite", None), ("qvel", qvel, "nonfinite", None),
                  ("qpos", qpos, MAX_QPOS, None), ("qvel", qvel, MAX_QVEL, None)]
        qpos, zero = self._normalised_quaternions(qpos)
        held = self._check_values(ids, checks + [("qpos", zero, "zero quaternion", None)])
        if held is not None:  # GPU: rows with bad values keep the env's current state
            rows = torch.as_tensor(ids, device=dev)
            qpos = torch.where(held[:, None], self.get_qpos()[rows].to(dt), qpos)
            qvel = torch.where(held[:, None], self.get_qvel()[rows].to(dt), qvel)
        qpos, qvel = qpos.to(self.hook_dtype), qvel.to(self.hook_dtype)
        if randomization is not None:  # drawn and checked before anything is written
            prepared = self._dr_prepare(randomization, "reset", ids, True)
            qpos, qvel = self._dr_commit(prepared, qpos, qvel)
        self._set_state(ids, qpos.contiguous(), qvel.contiguous())
        if self._faults is not None:
            self._faults.publish()
        self._notify_write(ids, "set_state")

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

        Interruption: an exception raised during the call (a ``KeyboardInterrupt``
        from Ctrl-C included; long calls check for it between chunks of
        substeps) leaves the backend consistent and the getters describing the
        state it holds: without a pre-step control function every env is back
        at its state from before the call; with one, the substeps completed
        before the exception stay taken. Pending forces stay pending.
        """
        t0 = time.perf_counter()
        self._enter_mutation("step")
        nsteps = V.positive_int(nsteps, "nsteps")
        ctrl, hold = self._check_ctrl(ctrl, "ctrl")
        fn = self._pre_step
        held_forces = self._dr_add_held_forces()
        self._in_step = True
        completed = False
        try:
            if fn is None:
                diverged = self._mask(self._step(ctrl, nsteps, hold))
                physics = time.perf_counter() - t0
                self._after_substeps(ctrl, nsteps, diverged, hold)
            else:
                diverged = torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)
                physics = 0.0
                given = ctrl.to(torch.float32)
                for _ in range(nsteps):
                    out = fn(self, given.clone())
                    if self._closed:
                        raise BackendClosedError(f"backend {self.name!r} was closed by the pre-step control function")
                    sub, sub_hold = self._check_ctrl(out, "pre-step control output")
                    ts = time.perf_counter()
                    both = hold if sub_hold is None else (sub_hold if hold is None else hold | sub_hold)
                    sub_diverged = self._mask(self._step(sub, 1, both))
                    physics += time.perf_counter() - ts
                    self._after_substeps(sub, 1, sub_diverged, both)
                    diverged |= sub_diverged
            completed = True
        finally:
            self._in_step = False
            if not completed and held_forces is not None:  # pending forces stay pending, without the held ones
                bodies, f, t = held_forces
                cols = torch.as_tensor(bodies, device=self._device)
                self._force[:, cols] -= f
                self._torque[:, cols] -= t
        self._clear_body_forces()
        self._dr_age_held_forces(nsteps * self.physics_dt)
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

    def _after_substeps(self, ctrl: torch.Tensor, nsteps: int, diverged: torch.Tensor,
                        hold: Optional[torch.Tensor]) -> None:
        """Time and the last applied controls after ``nsteps`` substeps taken with ``ctrl``
        (diverged and held envs kept their state, and so their time)."""
        stayed = diverged if hold is None else diverged | hold  # hold: GPU backends only
        self._advance_time(nsteps * self.physics_dt, stayed)
        self._last_ctrl = ctrl.clone()  # the caller may reuse the tensor it passed

    def set_pre_step_control(self, fn: Optional[PreStepControl]) -> None:
        """Call ``fn(backend, ctrl)`` before every substep; ``None`` removes it.

        ``ctrl`` is the ``(N, nu)`` float32 tensor given to ``step``; ``fn`` returns
        the ctrl to apply in this substep, of the same shape (validated like
        ``step``'s). The backend's getters describe the current substep's state,
        so ``fn`` can turn a policy action into actuator commands (a PD law on
        motors, say) at the physics rate. ``fn`` may read getters; calling
        ``step``, ``set_state`` or ``apply_body_force`` from it raises
        :class:`~simbackend.errors.ReentrantCallError`. Setting or removing the
        function from inside it takes effect at the next ``step`` call.

        An error in ``fn`` or in its output at the first substep leaves every env
        as it was; at a later substep, the substeps already taken stay taken
        (the callback runs between them, so it cannot be validated in advance)
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
        ids = V.index_array(body_ids, self._info.nbody, "body", "body_ids", allow_duplicates=False,
                            host_ids=self._host_ids)
        if (ids == 0).any():
            raise IndexRangeError("body_ids: the world body (id 0) cannot take a force")
        shape = (self.num_envs, ids.size, 3)
        dev, dt = self._device, self._input_dtype
        force = V.real_tensor(force, "force", shape, device=dev, dtype=dt)
        torque = (torch.zeros(shape, dtype=dt, device=dev) if torque is None
                  else V.real_tensor(torque, "torque", shape, device=dev, dtype=dt))
        every = np.arange(self.num_envs)
        held = self._check_values(every, [("force", force, "nonfinite", None), ("torque", torque, "nonfinite", None),
                                          ("force", force, V.MAX_REAL_INPUT, None),
                                          ("torque", torque, V.MAX_REAL_INPUT, None)])
        if held is not None:  # GPU: bad rows add nothing
            force = torch.where(held[:, None, None], 0.0, force)
            torque = torch.where(held[:, None, None], 0.0, torque)
            self._faults.publish()
        if ids.size:
            self._apply_body_force(ids, force.to(self.hook_dtype), torque.to(self.hook_dtype))

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
        self._check_open()
        if not (callable(getattr(observer, "on_step", None)) and callable(getattr(observer, "on_write", None))):
            raise ArgumentTypeError(f"observer: expected an object with on_step and on_write methods,"
                                    f" got {type(observer).__name__}")
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

    def _notify_write(self, env_ids: np.ndarray, what: str) -> None:
        if self._observers and not self._silenced and np.asarray(env_ids).size:
            ids = np.sort(np.asarray(env_ids, np.int64))
            for observer in tuple(self._observers):
                observer.on_write(self, ids, what)

    @contextlib.contextmanager
    def _quiet(self) -> Any:
        """Suppress write notifications inside (a call made of other public calls notifies once)."""
        self._silenced, before = True, self._silenced
        try:
            yield
        finally:
            self._silenced = before

    def synchronize(self) -> None:
        """Wait for the device and raise any input error a GPU backend deferred (no-op on CPU backends)."""
        self._check_open()
        if self._faults is not None:
            self._faults.publish()
            self._faults.raise_if_any(wait=True)

    def close(self) -> None:
        """Release the engine's resources; idempotent. Every public method raises ``BackendClosedError`` afterwards."""
        if self._closed:
            return
        self._closed = True
        try:
            try:
                self._close_playback()
            finally:
                self._close()
        finally:
            self.__class__ = _closed_class(type(self))

    def __enter__(self) -> "SimBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self.name!r} num_envs={self.num_envs} device={self.device}{state}>"

    # ------------------------------------------------------------------
    # the engine-specific core: implement these
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, B, 3) for validated body ids (int64 host array)."""

    @abc.abstractmethod
    def _body_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, B, 4) wxyz for validated body ids."""

    @abc.abstractmethod
    def _body_lin_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, B, 3) velocity of the body frame origins, world frame."""

    @abc.abstractmethod
    def _body_ang_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, B, 3) angular velocities, world frame."""

    @abc.abstractmethod
    def _site_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, S, 3) for validated site ids."""

    @abc.abstractmethod
    def _site_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, S, 4) wxyz for validated site ids."""

    def _sensor_data(self, sensor_id: int) -> torch.Tensor:
        """(N, dim) for a sensor whose type the capabilities list.

        The default computes the core sensor types from this backend's own body
        hooks and qpos/qvel, with MuJoCo's meaning (:mod:`simbackend.sensors`);
        an engine that evaluates MuJoCo's sensors itself overrides it.
        """
        from simbackend.sensors import FrameSensors

        sensors = self.__dict__.get("_frame_sensors") or self.__dict__.setdefault("_frame_sensors", FrameSensors(self))
        return sensors.read(self, sensor_id)

    @abc.abstractmethod
    def _set_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write the state of sorted, distinct envs; make getters current.

        Args:
            env_ids: ``(n,)`` int64 host array, sorted, distinct.
            qpos: ``(n, nq)`` validated state (finite, within the divergence
                rule's bounds, unit quaternions), :attr:`hook_dtype` on the device.
            qvel: ``(n, nv)``, likewise.
        """

    @abc.abstractmethod
    def _step(self, ctrl: torch.Tensor, nsteps: int, hold: Optional[torch.Tensor]) -> Any:
        """Advance all envs by ``nsteps``; return the diverged mask ``(N,)`` bool.

        Args:
            ctrl: ``(N, nu)`` validated (finite) controls, :attr:`hook_dtype`
                on the device; the backend clamps them to the ctrl ranges.
            nsteps: substeps (any positive int: a long call must stay
                interruptible, e.g. by stepping in chunks).
            hold: ``None``, or on a GPU backend ``(N,)`` bool on the device:
                envs whose input was rejected (their ctrl rows hold zeros),
                which must end the call in their pre-call state and are not
                reported as diverged.

        Returns:
            A numpy array or a bool tensor (a GPU backend keeps it on its
            device, so that ``step`` need not synchronise with the host),
            computed with :func:`simbackend.divergence.diverged_rows` plus the
            engine's own failure reports; diverged envs are back in their
            pre-call state.

        Pending body forces (``_force``/``_torque`` for ``_force_bodies``) act in
        every substep; they are not cleared here. On an exception (including
        ``KeyboardInterrupt``), every env must be back in its pre-call state
        before the exception propagates.
        """

    def _apply_body_force(self, body_ids: np.ndarray, force: torch.Tensor, torque: torch.Tensor) -> None:
        """Add validated (N, B, 3) world forces/torques at body origins to the pending ones.

        The pending forces live in ``_force``/``_torque``, :attr:`hook_dtype` tensors
        ``(N, nbody, 3)`` on the device, for the bodies in ``_force_bodies`` (host
        int64); a backend's ``_step`` applies them (only backends that declare
        ``body_forces`` are called here).
        """
        if self._force is None:
            self._force = torch.zeros((self.num_envs, self._info.nbody, 3), dtype=self.hook_dtype,
                                      device=self._device)
            self._torque = torch.zeros_like(self._force)
        cols = torch.as_tensor(body_ids, device=self._device)
        self._force[:, cols] += force
        self._torque[:, cols] += torque
        self._force_bodies = np.union1d(self._force_bodies, body_ids)

    def _clear_body_forces(self) -> None:
        """Drop pending forces (called at the end of every step)."""
        if self._force_bodies.size:
            self._force.zero_()
            self._torque.zero_()
            self._force_bodies = np.zeros(0, np.int64)

    def _site_jacobian_w(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        raise UnsupportedFeatureError(self.name, "site_jacobians")

    def _close(self) -> None:
        """Release engine resources (called once)."""

    # ------------------------------------------------------------------
    # helpers for subclasses
    # ------------------------------------------------------------------
    def _out(self, a: Any) -> torch.Tensor:
        """A new float32 tensor on the backend's device holding ``a`` (numpy array or tensor) that the caller owns."""
        if isinstance(a, torch.Tensor):
            return a.to(device=self._device, dtype=torch.float32, copy=True)
        t = torch.from_numpy(np.array(a, dtype=np.float32))
        return t if self._device.type == "cpu" else t.to(self._device)

    def _mask(self, diverged: Any) -> torch.Tensor:
        """``(N,)`` bool tensor on the backend's device from a hook's numpy or torch mask."""
        return torch.as_tensor(diverged, dtype=torch.bool).to(self._device)

    def _id_tensor(self, a: np.ndarray) -> torch.Tensor:
        host = np.asarray(a, dtype=np.int64)
        t = torch.as_tensor(host.copy())
        t = t if self._device.type == "cpu" else t.to(self._device)
        return self._host_ids.register(t, host)

    def _require(self, capability: str) -> None:
        if not getattr(self.capabilities, capability):
            raise UnsupportedFeatureError(self.name, capability)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError(f"backend {self.name!r} is closed")

    def _enter_mutation(self, method: str) -> None:
        """Checks every mutating call starts with: open, not re-entered, no deferred input error pending."""
        self._check_open()
        if self._in_step:
            raise ReentrantCallError(f"{method}: called from inside a pre-step control function while step runs;"
                                     " a pre-step function may read getters and return ctrl, nothing else")
        if self._faults is not None:
            self._faults.raise_if_any()

    @property
    def _defers_checks(self) -> bool:
        if self._deferred is None:
            self._deferred = bool(self.capabilities.gpu)
        return self._deferred

    def _check_values(self, env_ids: np.ndarray, checks: list) -> Optional[torch.Tensor]:
        """Value checks of validated tensors, rows aligned with ``env_ids``.

        ``checks``: ``(argument, tensor, problem, columns)`` with ``problem``
        ``"nonfinite"``, ``"zero quaternion"`` (``tensor`` is then the ``(n,)`` bad-row
        mask) or a magnitude limit. A CPU backend raises the first failing check;
        a GPU backend records them on the device and returns the ``(n,)`` mask of
        rows to hold (or ``None`` when there are no rows).
        """
        held = None
        defer = self._defers_checks
        for argument, t, problem, columns in checks:
            if problem == "nonfinite":
                bad = V.nonfinite_rows(t)
            elif problem == "zero quaternion":
                bad = t
            else:
                bad = V.rows_above(t, problem, columns)
            if not defer:
                if bool(bad.any()):
                    rows = env_ids[bad.cpu().numpy()]
                    if problem == "nonfinite":
                        raise NonFiniteError(argument, rows)
                    if problem == "zero quaternion":
                        joints = sorted({self._info.joint_names[j] for j in self._info.quat_joint})
                        raise InvalidQuaternionError(
                            f"{argument}: zero quaternion for joint(s) {joints} in env ids {rows[:8].tolist()};"
                            " a rotation needs a non-zero quaternion (wxyz)")
                    what = "values the divergence rule would flag" if problem in (MAX_QPOS, MAX_QVEL) else "values"
                    raise ValueRangeError(argument, rows, float(problem), what)
                continue
            if self._faults is None:
                self._faults = _DeferredFaults(self.num_envs, self._device)
            rows_dev = torch.as_tensor(env_ids, device=self._device)
            self._faults.record(argument, "nonfinite" if problem == "nonfinite" else
                                "zero quaternion" if problem == "zero quaternion" else str(problem), rows_dev, bad)
            held = bad if held is None else held | bad
        return held

    def _check_ctrl(self, ctrl: Any, argument: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Validated ``(N, nu)`` ctrl and, on a GPU backend, the ``(N,)`` mask of envs to hold."""
        dev, dt = self._device, self._input_dtype
        if ctrl is None:
            if self.num_actuators:
                raise InvalidArgumentError(f"{argument}: required, the model has {self.num_actuators} actuators")
            return torch.zeros((self.num_envs, 0), dtype=self.hook_dtype, device=dev), None
        t = V.real_tensor(ctrl, argument, (self.num_envs, self.num_actuators), device=dev, dtype=dt)
        held = self._check_values(np.arange(self.num_envs), [(argument, t, "nonfinite", None),
                                                             (argument, t, V.MAX_REAL_INPUT, None)])
        if held is not None:
            t = torch.where(held[:, None], 0.0, t)
        return t.to(self.hook_dtype), held

    @property
    def _input_dtype(self) -> torch.dtype:
        """dtype inputs are validated in: float64 at least, so that a finite value too large for a
        float32 hook is reported as too large (``ValueRangeError``), not as infinite after the cast."""
        return torch.float64 if self.hook_dtype.itemsize < 8 else self.hook_dtype

    def _base_ids(self) -> np.ndarray:
        return np.array([self._info.base_body], dtype=np.int64)

    def _body_index(self, body_ids: Ids) -> np.ndarray:
        return V.index_array(body_ids, self._info.nbody, "body", "body_ids", host_ids=self._host_ids)

    def _site_index(self, site_ids: Ids) -> np.ndarray:
        return V.index_array(site_ids, len(self.site_names), "site", "site_ids", host_ids=self._host_ids)

    def _torch_index(self, which: str) -> torch.Tensor:
        cache = self._index_cache
        if which not in cache:
            src = {"dof_qpos": self._info.dof_qpos_index, "dof_qvel": self._info.dof_qvel_index}[which]
            cache[which] = torch.as_tensor(src, dtype=torch.long, device=self._device)
        return cache[which]

    def _resolve(self, kind: str, name: str) -> int:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{kind} name must be a string, got {type(name).__name__}")
        table = self._ids[kind]
        if name not in table:
            raise UnknownNameError(kind, name, table)
        return table[name]

    def _resolve_many(self, kind: str, names: Names) -> np.ndarray:
        if isinstance(names, str):
            names = [names]
        elif names is None or not isinstance(names, (list, tuple)) and not hasattr(names, "__iter__"):
            raise ArgumentTypeError(f"{kind} names: expected a name or a sequence of names, got {type(names).__name__}")
        return np.array([self._resolve(kind, n) for n in names], dtype=np.int64)

    def _dof_columns(self, names: Names) -> np.ndarray:
        joints = self._resolve_many("joint", names)
        cols = []
        for j in joints:
            if int(j) not in self._dof_column:
                kind = JOINT_TYPE_NAMES[int(self._info.joint_type[j])]
                raise IndexRangeError(
                    f"joint {self._info.joint_names[j]!r} is a {kind} joint; only hinge and slide joints"
                    " have dof columns (get_joint_qpos_indices/get_joint_qvel_indices cover every joint)"
                )
            cols.append(self._dof_column[int(j)])
        return np.array(cols, dtype=np.int64)

    def _joint_columns(self, names: Names, velocity: bool) -> np.ndarray:
        info = self._info
        cols = []
        for j in self._resolve_many("joint", names):
            t = int(info.joint_type[j])
            if velocity:
                width = 6 if t == JOINT_FREE else 3 if t == JOINT_BALL else 1
                start = int(info.joint_dofadr[j])
            else:
                width = 7 if t == JOINT_FREE else 4 if t == JOINT_BALL else 1
                start = int(info.joint_qposadr[j])
            cols.extend(range(start, start + width))
        return np.array(cols, dtype=np.int64)

    def _normalised_quaternions(self, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``qpos`` with unit free/ball quaternions, and the ``(n,)`` mask of rows holding a zero one.

        Scaled by the largest component first, so no finite quaternion overflows.
        """
        n = qpos.shape[0]
        if not self._quat_cols.numel() or not n:
            return qpos, torch.zeros(n, dtype=torch.bool, device=qpos.device)
        cols = self._quat_cols
        quats = qpos[:, cols]                                              # (n, nquat, 4)
        scale = quats.abs().amax(dim=-1, keepdim=True)
        unit = quats / torch.where(scale > 0, scale, 1.0)
        norms = torch.linalg.vector_norm(unit, dim=-1, keepdim=True)
        zero = (scale[..., 0] < MIN_QUAT_NORM).any(dim=1) | ~torch.isfinite(scale[..., 0]).all(dim=1)
        qpos = qpos.clone()
        qpos[:, cols] = torch.where(norms > 0, unit / torch.where(norms > 0, norms, 1.0), unit)
        return qpos, zero


# ----------------------------------------------------------------------
# closed backends
# ----------------------------------------------------------------------
#: public members a closed backend still answers: its identity and the model description
_OPEN_AFTER_CLOSE = frozenset({"close", "closed"})
_CLOSED_CLASSES: dict[type, type] = {}


def _closed_method(name: str) -> Callable[..., Any]:
    def method(self: SimBackend, *args: Any, **kwargs: Any) -> Any:
        raise BackendClosedError(f"{name}: backend {self.name!r} is closed")

    method.__name__ = name
    return method


def _closed_class(cls: type) -> type:
    """The class a backend of ``cls`` becomes on close: every public method raises ``BackendClosedError``.

    Properties (names, sizes, ``num_envs``, ``device``, ``capabilities``) keep
    answering: they describe the model, not the engine's state.
    """
    closed = _CLOSED_CLASSES.get(cls)
    if closed is None:
        namespace: dict[str, Any] = {"__doc__": cls.__doc__, "__module__": cls.__module__}
        for attr in dir(cls):
            if attr.startswith("_") or attr in _OPEN_AFTER_CLOSE:
                continue
            member = inspect.getattr_static(cls, attr)
            if inspect.isfunction(member):
                namespace[attr] = _closed_method(attr)
        closed = _CLOSED_CLASSES[cls] = type(cls.__name__, (cls,), namespace)
    return closed
