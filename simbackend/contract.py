"""The SimBackend contract.

One batched simulation of ``N = num_envs`` copies of one model. Conventions
(see DESIGN.md, "Conventions"):

* Outputs are ``torch.Tensor`` on ``backend.device``: real values ``float32``,
  ids ``int64``. Batch first: the leading dimension is N. Every getter returns a
  new tensor that the caller owns; the backend never writes into it later.
* Inputs accept torch tensors (any device), numpy arrays or sequences.
* World frame: Z up, gravity along -Z. Quaternions are wxyz and unit norm.
* ``qpos``/``qvel`` use MuJoCo's layout for the model: a free joint is
  ``pos(3) + quat(4)`` in qpos and ``linear velocity (world, 3) + angular
  velocity (body-local, 3)`` in qvel; a ball joint ``quat(4)`` / ``angular
  velocity (local, 3)``; hinge and slide joints one value each.
* DoFs (``get_dof_pos/vel``) are the hinge and slide joints in joint order:
  every joint with one scalar coordinate. Free joints (the floating base and
  any free object) and ball joints are reached through ``qpos``/``qvel``.
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

Errors (``simbackend.errors``): every public method validates all of its
arguments before it writes anything, so a call that raises leaves every env as
it was.

Writing a backend: subclass :class:`SimBackend`, call ``super().__init__`` with
the model's :class:`~simbackend.model_info.ModelInfo`, and implement the
abstract hooks (``get_qpos``, ``get_qvel``, ``_body_*``, ``_site_*``,
``_sensor_data``, ``_set_state``, ``_step``, ...). They receive validated
numpy inputs (float64 values, int64 ids). Register it under the entry-point
group ``simbackend.backends`` and run ``simbackend contract --sim NAME``.
"""

from __future__ import annotations

import abc
import time
from typing import Any, Callable, ClassVar, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.capabilities import Capabilities
from simbackend.errors import (
    ArgumentTypeError,
    IndexRangeError,
    InvalidArgumentError,
    InvalidQuaternionError,
    SimBackendError,
    UnknownNameError,
    UnsupportedFeatureError,
)
from simbackend.math import quat_apply_inverse, quat_conj, quat_mul
from simbackend.model_info import JOINT_TYPE_NAMES, ModelInfo

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


class SimBackend(abc.ABC):
    """A batch of ``num_envs`` simulations of one model behind one engine.

    Construction (``make_backend`` or the class): ``Backend(model, num_envs, *,
    device=None, seed=0, **options)``.
    """

    #: registered name of the backend (lower case)
    name: ClassVar[str] = "abstract"

    def __init__(self, info: ModelInfo, num_envs: int, *, device: Any, seed: int = 0):
        self._info = info
        self._num_envs = V.positive_int(num_envs, "num_envs")
        self._device = torch.device(device)
        self._seed = int(seed)
        self._pre_step: Optional[PreStepControl] = None
        self._closed = False
        # name -> id tables
        self._ids = {
            "body": {n: i for i, n in enumerate(info.body_names)},
            "joint": {n: i for i, n in enumerate(info.joint_names)},
            "site": {n: i for i, n in enumerate(info.site_names)},
            "actuator": {n: i for i, n in enumerate(info.actuator_names)},
            "sensor": {n: i for i, n in enumerate(info.sensor_names)},
            "keyframe": {n: i for i, n in enumerate(info.keyframe_names)},
        }
        self._dof_column = {int(j): c for c, j in enumerate(info.dof_joints)}
        self._index_cache: dict[str, torch.Tensor] = {}
        # pending body forces (apply_body_force until the next step): (N, nbody, 3) each, allocated on first use
        self._force: Optional[np.ndarray] = None
        self._torque: Optional[np.ndarray] = None
        self._force_bodies = np.zeros(0, np.int64)

    # ------------------------------------------------------------------
    # properties
    # ------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo:
        """The engine-neutral description of the compiled model."""
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
        return self._tensor(self._info.actuator_ctrl_range)

    def get_joint_range(self) -> torch.Tensor:
        """``(num_dof, 2)`` position limits ``[low, high]`` per dof; ``[-inf, inf]`` if unlimited."""
        return self._tensor(self._info.joint_range[self._info.dof_joints])

    def get_default_qpos(self) -> torch.Tensor:
        """``(nq,)`` the model's reference configuration (MuJoCo's ``qpos0``)."""
        return self._tensor(self._info.qpos0)

    def get_keyframe_qpos(self, name: str) -> torch.Tensor:
        """``(nq,)`` qpos of keyframe ``name``."""
        k = self._resolve("keyframe", name)
        return self._tensor(self._info.key_qpos[k])

    def get_actuator_gains(self) -> ActuatorGains:
        """Servo gains ``(kp (nu,), kv (nu,))``; see :class:`ActuatorGains`."""
        return ActuatorGains(self._tensor(self._info.actuator_kp), self._tensor(self._info.actuator_kv))

    def get_body_mass(self) -> torch.Tensor:
        """``(N, nbody)`` mass of every body in every env, kg (world body 0)."""
        return self._tensor(np.broadcast_to(self._info.body_mass, (self.num_envs, self._info.nbody)))

    def get_gravity(self) -> torch.Tensor:
        """``(N, 3)`` gravity vector of every env, world frame, m/s^2."""
        return self._tensor(np.broadcast_to(self._info.gravity, (self.num_envs, 3)))

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
        """``(n,)`` columns of ``get_qpos()`` of hinge/slide joints ``names``."""
        cols = self._dof_columns(names)
        return self._id_tensor(self._info.dof_qpos_index[cols])

    def get_joint_qvel_indices(self, names: Names) -> torch.Tensor:
        """``(n,)`` columns of ``get_qvel()`` (and of Jacobians) of hinge/slide joints ``names``."""
        cols = self._dof_columns(names)
        return self._id_tensor(self._info.dof_qvel_index[cols])

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
        return self._site_pos_w(V.index_array(site_ids, len(self.site_names), "site", "site_ids"))

    def get_site_quat_w(self, site_ids: Ids = None) -> torch.Tensor:
        """``(N, S, 4)`` site orientations, wxyz, world frame."""
        return self._site_quat_w(V.index_array(site_ids, len(self.site_names), "site", "site_ids"))

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
            site_id: one site id.
            dof_indices: ``(k,)`` columns of qvel to keep (``get_joint_qvel_indices``
                gives them for joints); ``None`` for all ``nv``.

        Returns:
            ``(jacp, jacr)``, each ``(N, 3, k)``: ``site_lin_vel_w = jacp @ qvel[cols]``
            and ``site_ang_vel_w = jacr @ qvel[cols]`` when only those columns move.
        """
        self._require("site_jacobians")
        sid = V.scalar_id(site_id, len(self.site_names), "site", "site_id")
        cols = V.index_array(dof_indices, self.nv, "qvel column", "dof_indices")
        return self._site_jacobian_w(sid, cols)

    # ------------------------------------------------------------------
    # mutation
    # ------------------------------------------------------------------
    def set_state(self, env_ids: Ids, qpos: Any, qvel: Any = None) -> None:
        """Write the state of some envs; getters reflect it at once, without a step.

        Args:
            env_ids: ``(n,)`` distinct env ids in any order, a boolean mask ``(N,)``,
                or ``None`` for all envs. Envs not named are untouched.
            qpos: ``(n, nq)`` positions, row i for ``env_ids[i]``. Free and ball
                joint quaternions are normalised; a zero quaternion is rejected.
            qvel: ``(n, nv)`` velocities, or ``None`` for zero.

        Controls, actuator activations, time and pending forces of the named envs
        are left as they are; their solver warm-start caches are cleared, so a
        replay from the same state reproduces the same trajectory.
        """
        self._check_open()
        ids = V.env_ids(env_ids, self.num_envs)
        n = ids.size
        qpos = V.real_array(qpos, "qpos", (n, self.nq), row_ids=ids)
        qvel = np.zeros((n, self.nv)) if qvel is None else V.real_array(qvel, "qvel", (n, self.nv), row_ids=ids)
        qpos = self._normalised_quaternions(ids, qpos)
        if n == 0:
            return
        order = np.argsort(ids, kind="stable")
        self._set_state(ids[order], qpos[order], qvel[order])

    def step(self, ctrl: Any = None, nsteps: int = 1) -> dict:
        """Advance every env by ``nsteps`` substeps with the same ``ctrl``.

        Args:
            ctrl: ``(N, nu)`` controls, MuJoCo's meaning per actuator, clamped to
                each ctrl range. ``None`` only if the model has no actuators.
            nsteps: number of substeps (decimation), >= 1.

        Returns:
            ``info`` with ``"diverged"``: ``(N,)`` bool tensor, true for envs whose
            physics diverged during the call (those keep their last finite state:
            the state from before the call, or, with a pre-step control function,
            from before the substep that diverged; the others advance normally),
            and ``"timing"``: seconds spent in ``"physics"`` and in ``"total"``.

        Forces from :meth:`apply_body_force` act during this call and are then cleared.
        With a pre-step control function set, it is called before every substep.
        """
        t0 = time.perf_counter()
        self._check_open()
        nsteps = V.positive_int(nsteps, "nsteps")
        ctrl = self._check_ctrl(ctrl, "ctrl")
        if self._pre_step is None:
            diverged = self._mask(self._step(ctrl, nsteps))
            physics = time.perf_counter() - t0
        else:
            diverged = torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)
            physics = 0.0
            given = self._tensor(ctrl)
            for _ in range(nsteps):
                out = self._pre_step(self, given.clone())
                sub = self._check_ctrl(out, "pre-step control output")
                ts = time.perf_counter()
                diverged |= self._mask(self._step(sub, 1))
                physics += time.perf_counter() - ts
        self._clear_body_forces()
        return {
            "diverged": diverged,
            "timing": {"physics": physics, "total": time.perf_counter() - t0},
        }

    def set_pre_step_control(self, fn: Optional[PreStepControl]) -> None:
        """Call ``fn(backend, ctrl)`` before every substep; ``None`` removes it.

        ``ctrl`` is the ``(N, nu)`` float32 tensor given to ``step``; ``fn`` returns
        the ctrl to apply in this substep, of the same shape (validated like
        ``step``'s). The backend's getters describe the current substep's state,
        so ``fn`` can turn a policy action into actuator commands (a PD law on
        motors, say) at the physics rate.

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
        self._check_open()
        self._require("body_forces")
        ids = V.index_array(body_ids, self._info.nbody, "body", "body_ids", allow_duplicates=False)
        if (ids == 0).any():
            raise IndexRangeError("body_ids: the world body (id 0) cannot take a force")
        shape = (self.num_envs, ids.size, 3)
        force = V.real_array(force, "force", shape)
        torque = np.zeros(shape) if torque is None else V.real_array(torque, "torque", shape)
        if ids.size:
            self._apply_body_force(ids, force, torque)

    def close(self) -> None:
        """Release the engine's resources; idempotent. The backend is unusable afterwards."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> "SimBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} num_envs={self.num_envs} device={self.device}>"

    # ------------------------------------------------------------------
    # the engine-specific core: implement these
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        """(N, B, 3) for validated body ids."""

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

    @abc.abstractmethod
    def _sensor_data(self, sensor_id: int) -> torch.Tensor:
        """(N, dim) for a sensor whose type the capabilities list."""

    @abc.abstractmethod
    def _set_state(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Write sorted, distinct env ids' validated, normalised float64 state; make getters current."""

    @abc.abstractmethod
    def _step(self, ctrl: np.ndarray, nsteps: int) -> np.ndarray:
        """Advance all envs by nsteps with validated float64 ctrl (N, nu); return diverged (N,) bool.

        The mask may be a numpy array or a bool tensor (a GPU backend keeps it on
        its device, so that ``step`` need not synchronise with the host).

        Pending body forces act in every substep; they are not cleared here.
        """

    def _apply_body_force(self, body_ids: np.ndarray, force: np.ndarray, torque: np.ndarray) -> None:
        """Add validated (N, B, 3) world forces/torques at body origins to the pending ones.

        The pending forces live in ``_force``/``_torque`` ``(N, nbody, 3)`` for the bodies
        in ``_force_bodies``; a backend's ``_step`` applies them (only backends that
        declare ``body_forces`` are called here).
        """
        if self._force is None:
            self._force = np.zeros((self.num_envs, self._info.nbody, 3))
            self._torque = np.zeros((self.num_envs, self._info.nbody, 3))
        self._force[:, body_ids] += force
        self._torque[:, body_ids] += torque
        self._force_bodies = np.union1d(self._force_bodies, body_ids)

    def _clear_body_forces(self) -> None:
        """Drop pending forces (called at the end of every step)."""
        if self._force_bodies.size:
            self._force[:, self._force_bodies] = 0.0
            self._torque[:, self._force_bodies] = 0.0
            self._force_bodies = np.zeros(0, np.int64)

    def _site_jacobian_w(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        raise UnsupportedFeatureError(self.name, "site_jacobians")

    def _close(self) -> None:
        """Release engine resources (called once)."""

    # ------------------------------------------------------------------
    # helpers for subclasses
    # ------------------------------------------------------------------
    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        """A new float32 tensor on the backend's device holding ``a``."""
        t = torch.from_numpy(np.array(a, dtype=np.float32))
        return t if self._device.type == "cpu" else t.to(self._device)

    def _mask(self, diverged: Any) -> torch.Tensor:
        """``(N,)`` bool tensor on the backend's device from a hook's numpy or torch mask."""
        return torch.as_tensor(diverged, dtype=torch.bool).to(self._device)

    def _id_tensor(self, a: np.ndarray) -> torch.Tensor:
        t = torch.as_tensor(np.asarray(a, dtype=np.int64))
        return t if self._device.type == "cpu" else t.to(self._device)

    def _require(self, capability: str) -> None:
        if not getattr(self.capabilities, capability):
            raise UnsupportedFeatureError(self.name, capability)

    def _check_open(self) -> None:
        if self._closed:
            raise SimBackendError(f"backend {self.name!r} is closed")

    def _check_ctrl(self, ctrl: Any, argument: str) -> np.ndarray:
        if ctrl is None:
            if self.num_actuators:
                raise InvalidArgumentError(f"{argument}: required, the model has {self.num_actuators} actuators")
            return np.zeros((self.num_envs, 0))
        return V.real_array(ctrl, argument, (self.num_envs, self.num_actuators))

    def _base_ids(self) -> np.ndarray:
        return np.array([self._info.base_body], dtype=np.int64)

    def _body_index(self, body_ids: Ids) -> np.ndarray:
        return V.index_array(body_ids, self._info.nbody, "body", "body_ids")

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
        return np.array([self._resolve(kind, n) for n in names], dtype=np.int64)

    def _dof_columns(self, names: Names) -> np.ndarray:
        joints = self._resolve_many("joint", names)
        cols = []
        for j in joints:
            if int(j) not in self._dof_column:
                kind = JOINT_TYPE_NAMES[int(self._info.joint_type[j])]
                raise IndexRangeError(
                    f"joint {self._info.joint_names[j]!r} is a {kind} joint; only hinge and slide joints"
                    " have dof columns (use get_qpos/get_qvel for free and ball joints)"
                )
            cols.append(self._dof_column[int(j)])
        return np.array(cols, dtype=np.int64)

    def _normalised_quaternions(self, ids: np.ndarray, qpos: np.ndarray) -> np.ndarray:
        starts = self._info.quat_qpos_index
        if not starts.size or not qpos.size:
            return qpos
        cols = starts[:, None] + np.arange(4)
        quats = qpos[:, cols]                      # (n, nquat, 4)
        norms = np.linalg.norm(quats, axis=-1)     # (n, nquat)
        bad = norms < MIN_QUAT_NORM
        if bad.any():
            rows, which = np.nonzero(bad)
            joints = sorted({self._info.joint_names[self._info.quat_joint[w]] for w in which})
            raise InvalidQuaternionError(
                f"qpos: zero quaternion for joint(s) {joints} in env ids {ids[np.unique(rows)][:8].tolist()};"
                " a rotation needs a non-zero quaternion (wxyz)"
            )
        qpos = qpos.copy()
        qpos[:, cols] = quats / norms[..., None]
        return qpos
