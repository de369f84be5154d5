"""Engine-neutral description of a compiled model.

Every backend builds from the compiled MuJoCo model, and every backend derives
its names, orders and layouts from the same :class:`ModelInfo`, so that ids and
column orders agree between engines by construction.

Joint types use MuJoCo's numbering: 0 free, 1 ball, 2 slide, 3 hinge.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

JOINT_FREE, JOINT_BALL, JOINT_SLIDE, JOINT_HINGE = 0, 1, 2, 3
JOINT_TYPE_NAMES = {JOINT_FREE: "free", JOINT_BALL: "ball", JOINT_SLIDE: "slide", JOINT_HINGE: "hinge"}

#: Actuator kinds the contract names (MuJoCo's shortcut elements).
ACTUATOR_KINDS = ("motor", "position", "velocity", "other")


@dataclass(frozen=True, eq=False)
class ModelInfo:
    """The structure of one compiled model, as plain numpy arrays and tuples.

    Read-only: its arrays are not writeable (copy one to change it).

    Sizes: ``nbody`` bodies (world body first), ``njnt`` joints, ``nsite``
    sites, ``ngeom`` geoms, ``nu`` actuators, ``nsensor`` sensors, ``nq``/``nv`` generalized
    coordinates/velocities in MuJoCo's layout.
    """

    body_names: tuple[str, ...]
    joint_names: tuple[str, ...]
    site_names: tuple[str, ...]
    actuator_names: tuple[str, ...]
    sensor_names: tuple[str, ...]
    keyframe_names: tuple[str, ...]
    nq: int
    nv: int
    timestep: float
    gravity: np.ndarray  # (3,) m/s^2, world frame: the gravity applied (zero where the model disables it)
    body_parent: np.ndarray  # (nbody,) parent body id, world is its own parent
    body_root: np.ndarray  # (nbody,) root body of each body's kinematic tree
    body_mass: np.ndarray  # (nbody,)
    body_com: np.ndarray  # (nbody, 3) centre of mass in the body frame (MuJoCo's body_ipos)
    body_inertia: np.ndarray  # (nbody, 3) principal moments about the centre of mass
    body_iquat: np.ndarray  # (nbody, 4) orientation of the principal axes in the body frame, wxyz
    joint_type: np.ndarray  # (njnt,)
    joint_body: np.ndarray  # (njnt,)
    joint_qposadr: np.ndarray  # (njnt,)
    joint_dofadr: np.ndarray  # (njnt,)
    joint_range: np.ndarray  # (njnt, 2), [-inf, inf] where unlimited
    site_body: np.ndarray  # (nsite,)
    geom_names: tuple[str, ...]
    geom_body: np.ndarray  # (ngeom,) owning body
    geom_type: tuple[str, ...]  # (ngeom,) lower-case MuJoCo geom type (plane, box, sphere, ...)
    geom_size: np.ndarray  # (ngeom, 3) MuJoCo's size parameters
    geom_contype: np.ndarray  # (ngeom,) contact type bit mask
    geom_conaffinity: np.ndarray  # (ngeom,) contact affinity bit mask
    geom_friction: np.ndarray  # (ngeom, 3) sliding, torsional, rolling
    #: (ngeom, 2) contact compliance, MuJoCo's ``geom_solref``: (timeconst s, dampratio) in the standard form
    #: (timeconst > 0), (-stiffness, -damping) in the direct form. A contact mixes its two geoms' values,
    #: weighted by ``geom_solmix`` (both standard; the element-wise minimum where either is direct), unless
    #: one geom has the higher ``priority`` (its value alone) or a ``<pair>`` sets the contact's own
    geom_compliance: np.ndarray
    #: (ngeom, 3) contact impedance, MuJoCo's ``geom_solimp[:, :3]``: (dmin, dmax, width m); the impedance
    #: rises from dmin at the surface to dmax at ``width`` penetration (solimp's midpoint and power shape it).
    #: A contact mixes its two geoms' values weighted by ``geom_solmix`` (always: no direct form), unless one
    #: geom has the higher ``priority`` (its value alone) or a ``<pair>`` sets the contact's own
    geom_impedance: np.ndarray
    dof_damping: np.ndarray  # (nv,) per qvel column
    dof_armature: np.ndarray  # (nv,)
    dof_frictionloss: np.ndarray  # (nv,)
    actuator_kind: tuple[str, ...]  # (nu,) one of ACTUATOR_KINDS
    actuator_joint: np.ndarray  # (nu,) joint id, -1 if not a joint transmission
    actuator_ctrl_range: np.ndarray  # (nu, 2), [-inf, inf] where unlimited
    actuator_kp: np.ndarray  # (nu,)
    actuator_kv: np.ndarray  # (nu,)
    #: (nu,) joint-space force per unit of actuator force (MuJoCo's ``gear[0]``); a motor's
    #: joint torque is ``actuator_gear * actuator_gain * ctrl``
    actuator_gear: np.ndarray
    #: (nu,) actuator force per unit ctrl (MuJoCo's ``gainprm[0]``; ``kp`` for position servos)
    actuator_gain: np.ndarray
    sensor_type: tuple[str, ...]  # (nsensor,) lower-case MuJoCo type name
    sensor_dim: np.ndarray  # (nsensor,)
    sensor_adr: np.ndarray  # (nsensor,)
    qpos0: np.ndarray  # (nq,)
    key_qpos: np.ndarray  # (nkey, nq)
    base_body: int  # root body of the first kinematic tree (0 if none)
    #: the compiled ``mujoco.MjModel`` this description was derived from (every backend builds from
    #: it; the playback renderer draws it), or ``None``; not part of the fingerprint
    compiled: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # the description is shared by every getter and every layout table: nobody may write into it
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v.flags.writeable = False

    @functools.cached_property
    def fingerprint(self) -> str:
        """A 16-hex-digit digest of every field but :attr:`compiled`: equal for the same compiled
        model (and timestep) on every backend, different when a name, a size, a layout or a
        physical parameter differs. Snapshots and recordings carry it to refuse another model."""
        h = hashlib.blake2b(digest_size=8)
        for f in fields(self):
            if f.name == "compiled":
                continue
            v = getattr(self, f.name)
            h.update(f.name.encode())
            if isinstance(v, np.ndarray):
                h.update(str(v.dtype).encode() + str(v.shape).encode())
                h.update(np.ascontiguousarray(v).tobytes())
            else:
                h.update(repr(v).encode())
        return h.hexdigest()

    # ---- derived layouts -------------------------------------------------
    @property
    def nbody(self) -> int:
        return len(self.body_names)

    @property
    def ngeom(self) -> int:
        return len(self.geom_names)

    @property
    def nu(self) -> int:
        return len(self.actuator_names)

    @functools.cached_property
    def actuator_strength(self) -> np.ndarray:
        """``(nu,)`` ones: the model's actuator strength (the ``actuator_strength`` term's factor)."""
        ones = np.ones(self.nu)
        ones.flags.writeable = False
        return ones

    @property
    def dof_joints(self) -> np.ndarray:
        """Ids of the joints with one scalar coordinate (hinge, slide), in joint order."""
        t = self.joint_type
        return np.flatnonzero((t == JOINT_HINGE) | (t == JOINT_SLIDE)).astype(np.int64)

    @property
    def num_dof(self) -> int:
        return int(self.dof_joints.size)

    @property
    def dof_qpos_index(self) -> np.ndarray:
        """(num_dof,) column of each dof in qpos."""
        return self.joint_qposadr[self.dof_joints].astype(np.int64)

    @property
    def dof_qvel_index(self) -> np.ndarray:
        """(num_dof,) column of each dof in qvel."""
        return self.joint_dofadr[self.dof_joints].astype(np.int64)

    @property
    def has_floating_base(self) -> bool:
        """Whether the base body's tree starts with a free joint on the base body."""
        return self.base_free_joint >= 0

    @property
    def base_free_joint(self) -> int:
        """Id of the free joint of the base body, or -1."""
        if self.base_body <= 0:
            return -1
        for j in np.flatnonzero(self.joint_body == self.base_body):
            if self.joint_type[j] == JOINT_FREE:
                return int(j)
        return -1

    @property
    def quat_qpos_index(self) -> np.ndarray:
        """(nquat,) first qpos column of every free/ball joint quaternion (wxyz)."""
        starts = []
        for j, t in enumerate(self.joint_type):
            if t == JOINT_FREE:
                starts.append(int(self.joint_qposadr[j]) + 3)
            elif t == JOINT_BALL:
                starts.append(int(self.joint_qposadr[j]))
        return np.asarray(starts, dtype=np.int64)

    @property
    def quat_joint(self) -> np.ndarray:
        """(nquat,) joint id owning each quaternion of :attr:`quat_qpos_index`."""
        t = self.joint_type
        return np.flatnonzero((t == JOINT_FREE) | (t == JOINT_BALL)).astype(np.int64)
