"""From the compiled MuJoCo model to a PhysX build plan.

:func:`build_plan` reads a compiled ``mujoco.MjModel`` and produces a
:class:`Plan`: plain numpy data describing the PhysX articulations, links,
joints, inertials, collision shapes and joint drives that reproduce the model.
It imports no ``sapien``, so the whole conversion (and every rejection) is
tested on any machine; :mod:`.scene` turns a plan into SAPIEN objects.

Mapping (MuJoCo -> PhysX):

* Every kinematic tree (a child of the world body and its descendants) is one
  articulation. A tree whose root has a free joint gets a floating root; a
  tree welded to the world, or whose root has hinge/slide joints, a fixed root
  (for the latter a massless anchor link at the root body's zero-configuration
  pose carries the joint chain). World-body geoms become one static actor.
* A body with no joint is a link on a fixed joint; a body with k hinge/slide
  joints is a chain of k links, the first k-1 massless intermediates, in
  MuJoCo's joint order (the order MuJoCo composes them in).
* Joint coordinates: PhysX's zero is MuJoCo's ``qpos0`` (``ref``), so a
  PhysX joint value is ``qpos - qpos0`` and limits are ``range - qpos0``.
  Unlimited hinges are ``revolute_unwrapped`` (no wrap to [-pi, pi]).
* Inertials: mass, centre of mass and principal inertia with its frame,
  exactly as compiled; masses below :data:`MIN_MASS` (massless MuJoCo bodies,
  intermediate links) are raised to it, and principal inertias below
  :data:`MIN_INERTIA` to that, since PhysX links need mass and inertia. The
  bodies so raised are declared as data (:attr:`Plan.known_differences`: the
  engine's ``capabilities.known_differences``, and lines of its ``notes``).
* Passive joint terms and actuators become one PhysX drive per joint: a drive
  applies ``K (target - q) + D (vel_target - qdot)``, and every MuJoCo term that
  is linear in ``q``/``qdot`` (joint stiffness and damping, position and
  velocity actuators with their gear) adds to ``K``, ``D`` and the targets.
  Motors become joint forces ``gear * clamp(gain * ctrl, forcerange)``.
  PhysX integrates a drive's stiffness implicitly (the spring acts on the
  position at the end of the step, ``q + h qdot'``: an extra damping ``K h``)
  where MuJoCo's Euler-type integrators apply it explicitly (at ``q``); the
  drive is given ``D - K h`` (:meth:`Plan.drive_damping`), so a servo's step
  response is MuJoCo's, not a more damped one.
* Collision filtering: ``contype``/``conaffinity`` are PhysX collision groups
  g0/g1 (the same "type & affinity" rule); body pairs MuJoCo filters as
  parent/child (through welds and multi-joint chains) that PhysX would not
  filter, and the model's contact excludes, get a shared "ignore" bit in g2,
  with one id in g3 for the trees (and the static world) such pairs join.
  Explicit contact pairs get a g0 bit on one shape and the same g1 bit on the
  other, a bit no geom uses.

Anything the backend cannot represent raises :class:`ModelLoadError` naming
the element. What is approximated (soft contacts, friction combination,
solver differences) is listed in :attr:`Plan.notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from simbackend.capabilities import KnownDifference
from simbackend.errors import ModelLoadError
from simbackend.math import quat_apply, quat_mul, quat_to_matrix
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE, JOINT_SLIDE, ModelInfo

#: mass (kg) given to PhysX links whose MuJoCo body has (nearly) none: intermediate
#: links of multi-joint bodies, anchors of fixed roots, massless MuJoCo bodies
MIN_MASS = 1e-6
#: smallest principal inertia (kg m^2) of a PhysX link
MIN_INERTIA = 1e-9
#: damping (N m s/rad) of the drive that models MuJoCo's dry joint friction (frictionloss)
FRICTIONLOSS_DAMPING = 1e6

IDENTITY = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
#: rotation taking PhysX's x axis (plane normal, capsule/cylinder axis) to MuJoCo's z axis
X_TO_Z = np.array([np.cos(-np.pi / 4), 0.0, np.sin(-np.pi / 4), 0.0])

_GEOM = mujoco.mjtGeom
#: the SAPIEN release whose bindings decide what can be built (read without importing sapien)
try:
    from importlib.metadata import version as _version

    _SAPIEN_VERSION = _version("sapien")
except Exception:  # noqa: BLE001 - metadata missing: the message just names no version
    _SAPIEN_VERSION = "3.0"
_PRIMITIVE = {
    int(_GEOM.mjGEOM_PLANE): "plane",
    int(_GEOM.mjGEOM_SPHERE): "sphere",
    int(_GEOM.mjGEOM_CAPSULE): "capsule",
    int(_GEOM.mjGEOM_ELLIPSOID): "ellipsoid",
    int(_GEOM.mjGEOM_CYLINDER): "cylinder",
    int(_GEOM.mjGEOM_BOX): "box",
    int(_GEOM.mjGEOM_MESH): "mesh",
}


@dataclass
class Shape:
    """One collision shape on a link or on the static world actor.

    ``kind``: plane, box, sphere, capsule, cylinder, convex or mesh. ``pose``:
    ``(7,)`` pos + wxyz quat in the owner's frame, already turned so PhysX's
    x axis is the shape axis. ``size``: box half sizes (3,), sphere radius (1,),
    capsule/cylinder ``(radius, half_length)``. ``vertices``: ``(k, 3)`` for
    convex hulls (meshes, ellipsoids) and triangle meshes (height fields, and the
    hulls of the world's meshes).
    """

    geom: int
    kind: str
    pose: np.ndarray
    size: np.ndarray
    friction: float
    groups: list[int]
    vertices: np.ndarray | None = None
    #: ``(T, 3)`` vertex indices of a triangle mesh (``kind == "mesh"``: a height field's surface, or the
    #: hull of a world mesh geom)
    triangles: np.ndarray | None = None
    #: ``(nrow, ncol)`` of a height field's mesh: its vertices are that grid, row-major, and its
    #: triangles split each cell as :func:`hfield_mesh` does (ray casting walks the grid's cells)
    grid: tuple[int, int] | None = None


@dataclass
class Link:
    """One PhysX articulation link.

    ``body``: MuJoCo body id, -1 for an intermediate or anchor link. ``joint``:
    MuJoCo joint id of the incoming joint, -1 for fixed joints and the root.
    ``jtype``: ``undefined`` (floating root), ``fixed``, ``revolute``,
    ``revolute_unwrapped`` or ``prismatic``. Poses are ``(7,)`` pos + wxyz.
    """

    name: str
    parent: int
    body: int
    joint: int
    jtype: str
    pose_in_parent: np.ndarray
    pose_in_child: np.ndarray
    limit: np.ndarray
    mass: float
    com: np.ndarray
    inertia: np.ndarray
    armature: float = 0.0
    shapes: list[Shape] = field(default_factory=list)


@dataclass
class Articulation:
    """One kinematic tree: ``links[0]`` is the root, parents precede children."""

    name: str
    root_body: int
    fixed_root: bool
    root_pose: np.ndarray  # (7,) world pose of the root link at qpos0
    links: list[Link] = field(default_factory=list)


@dataclass
class Plan:
    """Everything the scene builder needs, with the maps back to MuJoCo's ids.

    Drive coefficients are per MuJoCo joint (``njnt``), for hinge/slide joints:
    the drive force is ``K (pt - q) + D (vt - qdot)`` with ``K = stiffness``,
    ``D = damping`` and, per step, ``K pt = pos_bias + ctrl @ pos_gain`` and
    ``D vt = ctrl @ vel_gain`` (ctrl clamped to its range first); motors add
    ``clamp(ctrl * motor_gain, motor_force_range) @ motor_gear`` to the joint force.
    """

    info: ModelInfo
    articulations: list[Articulation]
    static_shapes: list[Shape]
    timestep: float
    gravity: np.ndarray
    joint_offset: np.ndarray  # (njnt,) qpos0 of hinge/slide joints, else 0
    body_link: np.ndarray  # (nbody, 2) (articulation, link), (-1, -1) for the world
    joint_link: np.ndarray  # (njnt, 2) (articulation, link) whose incoming joint it is
    stiffness: np.ndarray  # (njnt,)
    damping: np.ndarray  # (njnt,)
    force_limit: np.ndarray  # (njnt,) drive force limit, inf if none
    pos_bias: np.ndarray  # (njnt,)
    pos_gain: np.ndarray  # (nu, njnt)
    vel_gain: np.ndarray  # (nu, njnt)
    motor_gain: np.ndarray  # (nu,)
    motor_gear: np.ndarray  # (nu, njnt)
    motor_force_range: np.ndarray  # (nu, 2)
    ctrl_range: np.ndarray  # (nu, 2)
    extent: float = 1.0  # MuJoCo's model extent (m): sizes the GPU sub-scene spacing
    #: the step (s) over which MuJoCo applies joint stiffness explicitly where PhysX's drive applies it
    #: implicitly (the model's timestep; 0 under RK4, which PhysX's one-step implicit drive cannot follow)
    explicit_stiffness_dt: float = 0.0
    #: (nbody,) MuJoCo's gravity compensation: each substep a body gets ``-gravcomp * mass * gravity``
    #: at its centre of mass (the CPU engine applies it; the GPU path refuses models that have it)
    gravcomp: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: joints whose frictionloss MuJoCo's solver gives, as a force each substep (their PhysX
    #: drive is taken by an actuator, stiffness or damping; see :mod:`.mujoco_forces`); other
    #: frictionloss is a saturating drive
    forced_friction: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: names of the active equalities, forces from MuJoCo's solver each substep
    equalities: list[str] = field(default_factory=list)
    #: actuators whose force MuJoCo computes each substep (:func:`mujoco_actuators`)
    mujoco_actuators: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: what else MuJoCo gives as forces each substep, one line each: tendon springs, dampers,
    #: friction and limits, fluid forces
    mujoco_passive: list[str] = field(default_factory=list)
    #: values of the compiled model PhysX cannot hold (massless bodies): the engine's
    #: ``capabilities.known_differences`` (:func:`known_differences`); each is also a line of ``notes``
    known_differences: list[KnownDifference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def per_substep(self) -> list[str]:
        """What the engine applies as forces before every substep, each naming its first element."""
        info, out = self.info, []
        if np.any(self.gravcomp[1:] != 0):
            out.append(f"body {info.body_names[int(np.flatnonzero(self.gravcomp)[0])]!r}: gravity compensation")
        if self.forced_friction.size:
            out.append(
                f"joint {info.joint_names[int(self.forced_friction[0])]!r}: frictionloss on a joint whose"
                " drive is taken"
            )
        if self.equalities:
            out.append(f"equality {self.equalities[0]!r}: an equality constraint")
        if self.mujoco_actuators.size:
            out.append(
                f"actuator {info.actuator_names[int(self.mujoco_actuators[0])]!r}: an actuator whose force"
                " MuJoCo computes"
            )
        out.extend(self.mujoco_passive)
        return out

    @property
    def delegated(self) -> list[str]:
        """Every element whose physics MuJoCo computes each substep (:mod:`.mujoco_forces`), one line
        each: the engine's ``capabilities.delegated``, and what ``sapien={"delegate": False}`` refuses."""
        info = self.info
        out = [
            f"joint {info.joint_names[int(j)]!r}: frictionloss (its PhysX drive is taken), MuJoCo's constraint force"
            for j in self.forced_friction
        ]
        out += [f"equality {name!r}: MuJoCo's constraint force" for name in self.equalities]
        out += [f"actuator {info.actuator_names[int(a)]!r}: MuJoCo's actuator force" for a in self.mujoco_actuators]
        out += [f"{line}: MuJoCo's forces" for line in self.mujoco_passive]
        return out

    def drive_damping(self, stiffness: np.ndarray, damping: np.ndarray) -> np.ndarray:
        """The damping to give PhysX's drive for MuJoCo's ``stiffness`` ``K`` and ``damping`` ``D``
        (per joint, or per env and joint): ``max(D - K h, 0)``.

        PhysX's implicit drive applies ``K (pt - q - h qdot') + D' (vt - qdot')`` over a step ``h``:
        its stiffness damps by ``K h`` besides ``D'``; MuJoCo's Euler, implicit and implicitfast
        integrators apply ``K (pt - q)`` at the step's start, damping ``D qdot'`` implicitly. With
        ``D' = D - K h`` the two are the same force. Where ``D < K h`` PhysX cannot be as lightly damped
        (:attr:`Plan.notes` names the joints). Velocity targets divide by this damping."""
        return np.maximum(np.asarray(damping) - np.asarray(stiffness) * self.explicit_stiffness_dt, 0.0)

    @property
    def drive_joints(self) -> np.ndarray:
        """Ids of joints whose PhysX drive is active (K > 0 or D > 0)."""
        return np.flatnonzero((self.stiffness > 0) | (self.damping > 0)).astype(np.int64)


# ----------------------------------------------------------------------------
# small pose helpers (numpy, wxyz)
# ----------------------------------------------------------------------------


def _pose(pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(pos, np.float64), np.asarray(quat, np.float64)])


def compose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pose ``a * b`` of two ``(7,)`` poses."""
    return _pose(a[:3] + quat_apply(a[3:], b[:3]), quat_mul(a[3:], b[3:]))


def quat_x_to(axis: np.ndarray) -> np.ndarray:
    """Unit quaternion (wxyz) of the shortest rotation taking +x to ``axis``."""
    a = np.asarray(axis, np.float64)
    a = a / np.linalg.norm(a)
    d = a[0]
    if d < -1.0 + 1e-12:
        return np.array([0.0, 0.0, 0.0, 1.0])  # pi about z
    c = np.cross([1.0, 0.0, 0.0], a)
    q = np.array([1.0 + d, c[0], c[1], c[2]])
    return q / np.linalg.norm(q)


def _ellipsoid_vertices(radii: np.ndarray, n_lat: int = 8, n_lon: int = 16) -> np.ndarray:
    th = np.linspace(0.0, np.pi, n_lat + 1)[1:-1]
    ph = np.linspace(0.0, 2 * np.pi, n_lon, endpoint=False)
    t, p = np.meshgrid(th, ph, indexing="ij")
    pts = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], -1).reshape(-1, 3)
    pts = np.vstack([pts, [[0, 0, 1.0], [0, 0, -1.0]]])
    return pts * np.asarray(radii)[None]


# ----------------------------------------------------------------------------
# the conversion
# ----------------------------------------------------------------------------


def _reject_unsupported(m: mujoco.MjModel, info: ModelInfo) -> None:
    def name(obj: mujoco.mjtObj, i: int, kind: str) -> str:
        return mujoco.mj_id2name(m, obj, i) or f"{kind}{i}"

    problems: list[str] = []
    for t in range(m.ntendon):
        why = _tendon_problem(m, t, info)
        if why:
            problems.append(f"tendon {name(mujoco.mjtObj.mjOBJ_TENDON, t, 'tendon')!r}: {why}")
    for e in _equalities(m):
        why = _equality_problem(m, e)
        if why:
            problems.append(f"equality {name(mujoco.mjtObj.mjOBJ_EQUALITY, e, 'equality')!r}: {why}")
    if getattr(m, "nflex", 0):
        problems.append("flex: deformable (flex) elements are not supported")
    for j in range(m.njnt):
        if getattr(m, "jnt_actgravcomp", np.zeros(m.njnt))[j]:
            problems.append(
                f"joint {info.joint_names[j]!r}: gravity compensation routed through actuators"
                " (actuatorgravcomp) is not supported; body gravcomp as a passive force is"
            )
        if m.jnt_type[j] == JOINT_BALL:
            problems.append(
                f"joint {info.joint_names[j]!r}: ball joints are not supported (SAPIEN {_SAPIEN_VERSION} does"
                " not expose PhysX's spherical articulation joint: 'spherical joint is not supported yet';"
                " three hinges in a chain would add a gimbal singularity a ball joint does not have)"
            )
    for g in range(m.ngeom):
        t = int(m.geom_type[g])
        if t == int(_GEOM.mjGEOM_HFIELD) and (m.geom_contype[g] or m.geom_conaffinity[g]) and m.geom_bodyid[g] != 0:
            gname = name(mujoco.mjtObj.mjOBJ_GEOM, g, "geom")
            problems.append(
                f"geom {gname!r}: a height field on a moving body is not supported (PhysX collides"
                " triangle meshes only on static actors); height fields in the world body are"
            )
        elif t not in _PRIMITIVE and t != int(_GEOM.mjGEOM_HFIELD) and (m.geom_contype[g] or m.geom_conaffinity[g]):
            gname = name(mujoco.mjtObj.mjOBJ_GEOM, g, "geom")
            kind = mujoco.mjtGeom(t).name[len("mjGEOM_") :].lower()
            problems.append(f"geom {gname!r}: collision geom type {kind!r} is not supported (SDFs)")
    by_mujoco = set(mujoco_actuators(m, info).tolist())
    for a in range(m.nu):
        aname = info.actuator_names[a]
        trn = int(m.actuator_trntype[a])
        if int(m.actuator_dyntype[a]) != int(mujoco.mjtDyn.mjDYN_NONE):
            dyn = mujoco.mjtDyn(int(m.actuator_dyntype[a])).name[len("mjDYN_") :].lower()
            problems.append(
                f"actuator {aname!r}: activation dynamics (dyntype {dyn!r}) keep a state that neither"
                " PhysX nor the contract's qpos/qvel carries"
            )
        elif trn == int(mujoco.mjtTrn.mjTRN_BODY):
            problems.append(
                f"actuator {aname!r}: a body (adhesion) transmission acts through contacts, which are PhysX's"
            )
        elif a in by_mujoco:
            continue  # MuJoCo computes its force each substep (.mujoco_forces)
        elif any(m.actuator_gear[a, 1:] != 0) and trn != int(mujoco.mjtTrn.mjTRN_TENDON):
            problems.append(f"actuator {aname!r}: gear with more than one component is not supported")
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise ModelLoadError(f"the sapien backend cannot build this model: {problems[0]}{more}")


def _equalities(m: mujoco.MjModel) -> list[int]:
    """The equality constraints that act: none when the model disables them, and not those
    inactive at start (MuJoCo's ``eq_active0``; the contract has no call that activates one)."""
    if m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_EQUALITY):
        return []
    return [e for e in range(m.neq) if m.eq_active0[e]]


def _equality_problem(m: mujoco.MjModel, e: int) -> str:
    """Why equality ``e`` cannot be built, or ``""``: joint, connect, weld and tendon equalities can."""
    kind = int(m.eq_type[e])
    if kind in _BY_FORCES:
        return ""
    return f"{mujoco.mjtEq(kind).name[len('mjEQ_') :].lower()} equalities have no PhysX counterpart"


#: equality types whose forces MuJoCo's solver gives each substep (:mod:`.mujoco_forces`)
_BY_FORCES = tuple(
    int(t)
    for t in (mujoco.mjtEq.mjEQ_JOINT, mujoco.mjtEq.mjEQ_CONNECT, mujoco.mjtEq.mjEQ_WELD, mujoco.mjtEq.mjEQ_TENDON)
)


def fixed_tendon_joints(m: mujoco.MjModel, t: int) -> list[tuple[int, float]]:
    """``(joint id, coefficient)`` of fixed tendon ``t``: its length is ``sum(coef * q)``."""
    adr, num = int(m.tendon_adr[t]), int(m.tendon_num[t])
    return [(int(m.wrap_objid[w]), float(m.wrap_prm[w])) for w in range(adr, adr + num)]


def _tendon_problem(m: mujoco.MjModel, t: int, info: ModelInfo) -> str:
    """Why tendon ``t`` cannot be built, or ``""``. Fixed and spatial tendons load: MuJoCo
    computes their lengths, and the forces of their springs, dampers, friction and limits
    (:mod:`.mujoco_forces`); only tendon armature, which adds inertia along the tendon, does not."""
    adr, num = int(m.tendon_adr[t]), int(m.tendon_num[t])
    if getattr(m, "tendon_armature", np.zeros(m.ntendon))[t] != 0:
        return "tendon armature (inertia along the tendon) has no PhysX counterpart"
    for w in range(adr, adr + num):
        j = int(m.wrap_objid[w])
        if int(m.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_JOINT) and m.jnt_type[j] not in (JOINT_HINGE, JOINT_SLIDE):
            return f"it couples joint {info.joint_names[j]!r}, which is not a hinge or slide joint"
    return ""


def is_fixed_tendon(m: mujoco.MjModel, t: int) -> bool:
    """Whether tendon ``t`` is a fixed tendon (joints only: its length is linear in them)."""
    adr, num = int(m.tendon_adr[t]), int(m.tendon_num[t])
    return all(int(m.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_JOINT) for w in range(adr, adr + num))


def mujoco_actuators(m: mujoco.MjModel, info: ModelInfo) -> np.ndarray:
    """Actuators whose force MuJoCo computes each substep (:mod:`.mujoco_forces`): all but motors,
    position and velocity servos on hinge/slide joints (PhysX drives and joint forces) and motors
    on fixed tendons (their force reaches the joints through the coefficients): general
    actuators of other gain/bias laws, actuators on tendons, sites, slider-cranks, free joints."""
    out = []
    for a in range(m.nu):
        trn, kind = int(m.actuator_trntype[a]), info.actuator_kind[a]
        if (
            kind != "other"
            and info.actuator_joint[a] >= 0
            and m.jnt_type[info.actuator_joint[a]] in (JOINT_HINGE, JOINT_SLIDE)
        ):
            continue
        if (
            kind == "motor"
            and trn == int(mujoco.mjtTrn.mjTRN_TENDON)
            and is_fixed_tendon(m, int(m.actuator_trnid[a, 0]))
        ):
            continue
        out.append(a)
    return np.array(out, np.int64)


def hfield_mesh(m: mujoco.MjModel, h: int) -> tuple[np.ndarray, np.ndarray]:
    """The top surface of height field ``h`` as MuJoCo collides it: ``(nrow * ncol, 3)`` vertices in
    the geom frame and ``(2 (nrow-1) (ncol-1), 3)`` counter-clockwise triangles (seen from +z).

    Vertex ``(r, c)`` is at ``x = -sx + 2 sx c / (ncol-1)``, ``y = -sy + 2 sy r / (nrow-1)``,
    ``z = data[r, c] * sz`` (``size = (sx, sy, sz, base)``); each cell is split along its
    ``(r, c)``-``(r+1, c+1)`` diagonal, as MuJoCo splits it.
    """
    nrow, ncol = int(m.hfield_nrow[h]), int(m.hfield_ncol[h])
    sx, sy, sz = (float(v) for v in m.hfield_size[h][:3])
    adr = int(m.hfield_adr[h])
    data = np.array(m.hfield_data[adr : adr + nrow * ncol], np.float64).reshape(nrow, ncol)
    y, x = np.meshgrid(np.linspace(-sy, sy, nrow), np.linspace(-sx, sx, ncol), indexing="ij")
    verts = np.stack([x, y, data * sz], axis=-1).reshape(-1, 3)
    r, c = np.meshgrid(np.arange(nrow - 1), np.arange(ncol - 1), indexing="ij")
    a = (r * ncol + c).reshape(-1)
    b, cc, d = a + 1, a + ncol + 1, a + ncol
    tris = np.concatenate([np.stack([a, b, cc], 1), np.stack([a, cc, d], 1)]).astype(np.int64)
    return verts, tris


def hull_mesh(m: mujoco.MjModel, mesh: int) -> tuple[np.ndarray, np.ndarray]:
    """The convex hull MuJoCo collides mesh ``mesh`` as: ``(k, 3)`` vertices in the mesh frame and its
    ``(T, 3)`` triangles (MuJoCo's own hull, ``mesh_graph``: ``numvert, numface, vert_edgeadr,
    vert_globalid, edge_localid, face_globalid``), indexing the mesh's vertices."""
    adr, num = int(m.mesh_vertadr[mesh]), int(m.mesh_vertnum[mesh])
    verts = np.array(m.mesh_vert[adr : adr + num], dtype=np.float64)
    g = int(m.mesh_graphadr[mesh])
    nvert, nface = int(m.mesh_graph[g]), int(m.mesh_graph[g + 1])
    start = g + 2 + 3 * nvert + 3 * nface
    tris = np.array(m.mesh_graph[start : start + 3 * nface], np.int64).reshape(nface, 3)
    return verts, tris


def _shapes_of_body(m: mujoco.MjModel, b: int) -> list[Shape]:
    """Collision shapes of body ``b``'s geoms, posed in the body frame."""
    shapes = []
    paired = set(np.asarray(m.pair_geom1).tolist()) | set(np.asarray(m.pair_geom2).tolist())
    for g in range(m.body_geomadr[b], m.body_geomadr[b] + m.body_geomnum[b]):
        if not (m.geom_contype[g] or m.geom_conaffinity[g]) and g not in paired:
            continue  # never collides in MuJoCo: nothing to build
        t = int(m.geom_type[g])
        if t == int(_GEOM.mjGEOM_HFIELD):
            verts, tris = hfield_mesh(m, int(m.geom_dataid[g]))
            friction = 0.0 if m.geom_condim[g] == 1 else float(m.geom_friction[g, 0])
            groups = [int(m.geom_contype[g]), int(m.geom_conaffinity[g]), 0, 0]
            h = int(m.geom_dataid[g])
            grid = (int(m.hfield_nrow[h]), int(m.hfield_ncol[h]))
            pose = _pose(m.geom_pos[g], m.geom_quat[g])
            shapes.append(Shape(g, "mesh", pose, np.zeros(0), friction, groups, verts, tris, grid))
            continue
        kind = _PRIMITIVE[t]
        pose = _pose(m.geom_pos[g], m.geom_quat[g])
        size = np.array(m.geom_size[g], dtype=np.float64)
        verts = None
        if kind in ("plane", "capsule", "cylinder"):
            pose = compose(pose, _pose(np.zeros(3), X_TO_Z))
            size = size[:2] if kind != "plane" else size[:0]
        elif kind == "sphere":
            size = size[:1]
        elif kind == "ellipsoid":
            kind, verts = "convex", _ellipsoid_vertices(size)
        elif kind == "mesh":
            mid = int(m.geom_dataid[g])
            adr, num = int(m.mesh_vertadr[mid]), int(m.mesh_vertnum[mid])
            kind, verts = "convex", np.array(m.mesh_vert[adr : adr + num], dtype=np.float64)
            if b == 0 and int(m.mesh_graphadr[mid]) >= 0:
                # the world's: a triangle mesh of the same hull (a static actor may hold one). PhysX's
                # box-on-convex contacts let a box rock and creep on a 3 m slope prism at 1-4 cm/s (friction
                # 1, slope 0.4) where on the hull's triangles, as on a height field's, it rests
                friction = 0.0 if m.geom_condim[g] == 1 else float(m.geom_friction[g, 0])
                groups = [int(m.geom_contype[g]), int(m.geom_conaffinity[g]), 0, 0]
                hv, tris = hull_mesh(m, mid)
                shapes.append(Shape(g, "mesh", pose, np.zeros(0), friction, groups, hv, tris))
                continue
        friction = 0.0 if m.geom_condim[g] == 1 else float(m.geom_friction[g, 0])
        groups = [int(m.geom_contype[g]), int(m.geom_conaffinity[g]), 0, 0]
        shapes.append(Shape(g, kind, pose, size, friction, groups, verts))
    return shapes


def _inertial(m: mujoco.MjModel, b: int) -> tuple[float, np.ndarray, np.ndarray]:
    mass = float(m.body_mass[b])
    inertia = np.maximum(np.array(m.body_inertia[b], dtype=np.float64), MIN_INERTIA)
    return max(mass, MIN_MASS), _pose(m.body_ipos[b], m.body_iquat[b]), inertia


def _massless(name: str, parent: int, jtype: str, pip: np.ndarray, pic: np.ndarray) -> Link:
    return Link(
        name,
        parent,
        -1,
        -1,
        jtype,
        pip,
        pic,
        np.array([-np.inf, np.inf]),
        MIN_MASS,
        IDENTITY.copy(),
        np.full(3, MIN_INERTIA),
    )


def _joint_frame(m: mujoco.MjModel, j: int) -> np.ndarray:
    return _pose(m.jnt_pos[j], quat_x_to(m.jnt_axis[j]))


def _joint_kind(m: mujoco.MjModel, j: int) -> str:
    if m.jnt_type[j] == JOINT_SLIDE:
        return "prismatic"
    return "revolute" if m.jnt_limited[j] else "revolute_unwrapped"


def build_plan(m: mujoco.MjModel, info: ModelInfo) -> Plan:
    """Convert a compiled model into a :class:`Plan`; raises :class:`ModelLoadError` on what PhysX cannot represent."""
    _reject_unsupported(m, info)
    nbody, njnt = m.nbody, m.njnt
    body_link = np.full((nbody, 2), -1, np.int64)
    joint_link = np.full((njnt, 2), -1, np.int64)
    joint_offset = np.zeros(njnt)
    for j in range(njnt):
        if m.jnt_type[j] in (JOINT_HINGE, JOINT_SLIDE):
            joint_offset[j] = m.qpos0[m.jnt_qposadr[j]]

    arts: list[Articulation] = []
    roots = [b for b in range(1, nbody) if m.body_parentid[b] == 0]
    for root in roots:
        a = len(arts)
        joints = list(range(m.body_jntadr[root], m.body_jntadr[root] + m.body_jntnum[root]))
        root_pose = _pose(m.body_pos[root], m.body_quat[root])
        free = any(m.jnt_type[j] == JOINT_FREE for j in joints)
        art = Articulation(info.body_names[root], root, not free, root_pose)
        arts.append(art)
        # bodies of the tree in model order (parents precede children in MuJoCo's numbering)
        tree = [b for b in range(root, nbody) if m.body_rootid[b] == root]
        for b in tree:
            joints = list(range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b]))
            mass, com, inertia = _inertial(m, b)
            shapes = _shapes_of_body(m, b)
            bname = info.body_names[b]
            if b == root and (free or not joints):
                link = Link(
                    bname,
                    -1,
                    b,
                    -1,
                    "undefined" if free else "fixed",
                    IDENTITY.copy(),
                    IDENTITY.copy(),
                    np.array([-np.inf, np.inf]),
                    mass,
                    com,
                    inertia,
                    shapes=shapes,
                )
                if free:
                    joint_link[joints[0]] = (a, 0)
                body_link[b] = (a, 0)
                art.links.append(link)
                continue
            if b == root:  # hinge/slide joints on a tree root: a fixed anchor carries the chain
                art.links.append(_massless(f"{bname}/anchor", -1, "fixed", IDENTITY.copy(), IDENTITY.copy()))
                parent_link, offset = 0, IDENTITY.copy()
            else:
                parent_link = int(body_link[m.body_parentid[b], 1])
                offset = _pose(m.body_pos[b], m.body_quat[b])
            if not joints:
                link = Link(
                    bname,
                    parent_link,
                    b,
                    -1,
                    "fixed",
                    offset,
                    IDENTITY.copy(),
                    np.array([-np.inf, np.inf]),
                    mass,
                    com,
                    inertia,
                    shapes=shapes,
                )
                body_link[b] = (a, len(art.links))
                art.links.append(link)
                continue
            for k, j in enumerate(joints):
                frame = _joint_frame(m, j)
                pip = compose(offset, frame) if k == 0 else frame
                last = k == len(joints) - 1
                limit = np.array([-np.inf, np.inf])
                if m.jnt_limited[j]:
                    limit = np.array(m.jnt_range[j], dtype=np.float64) - joint_offset[j]
                if last:
                    link = Link(
                        bname,
                        parent_link,
                        b,
                        j,
                        _joint_kind(m, j),
                        pip,
                        frame,
                        limit,
                        mass,
                        com,
                        inertia,
                        shapes=shapes,
                    )
                    body_link[b] = (a, len(art.links))
                else:
                    link = _massless(f"{bname}/{info.joint_names[j]}", parent_link, _joint_kind(m, j), pip, frame)
                    link.joint, link.limit = j, limit
                link.armature = float(m.dof_armature[m.jnt_dofadr[j]])
                joint_link[j] = (a, len(art.links))
                art.links.append(link)
                parent_link = len(art.links) - 1
        if art.fixed_root and art.links[0].body < 0:
            art.root_pose = root_pose

    static = _shapes_of_body(m, 0)
    plan = Plan(
        info=info,
        articulations=arts,
        static_shapes=static,
        timestep=float(m.opt.timestep),
        gravity=np.array(info.gravity, np.float64),  # zero where the model disables gravity
        joint_offset=joint_offset,
        body_link=body_link,
        joint_link=joint_link,
        extent=float(m.stat.extent),
        explicit_stiffness_dt=0.0
        if int(m.opt.integrator) == int(mujoco.mjtIntegrator.mjINT_RK4)
        else float(m.opt.timestep),
        gravcomp=np.array(m.body_gravcomp, np.float64),
        **_drives(m, info, joint_offset),
    )

    def eq_name(e: int) -> str:
        return mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_EQUALITY, e) or f"equality{e}"

    plan.equalities = [eq_name(e) for e in _equalities(m)]
    plan.mujoco_actuators = mujoco_actuators(m, info)
    plan.mujoco_passive = _mujoco_passive(m)
    _filter_pairs(m, plan)
    _explicit_pairs(m, plan)
    plan.known_differences = known_differences(m, plan)
    plan.notes.extend(_approximations(m, plan))
    return plan


def known_differences(m: mujoco.MjModel, plan: Plan) -> list[KnownDifference]:
    """The bodies whose mass or principal inertia PhysX holds raised to :data:`MIN_MASS` /
    :data:`MIN_INERTIA` (massless MuJoCo bodies: a frame holding only sites, an explicit
    ``<inertial mass="0">``), with the values their links hold: what ``model_fields`` reads back."""
    info = plan.info
    bodies = [b for b in range(1, m.nbody) if plan.body_link[b, 0] >= 0]  # bodies that are PhysX links
    mass = np.asarray(m.body_mass, np.float64)
    principal = np.asarray(m.body_inertia, np.float64).reshape(-1, 3)
    light = [b for b in bodies if mass[b] < MIN_MASS]
    flat = [b for b in bodies if np.any(principal[b] < MIN_INERTIA)]
    out = []
    if light:
        out.append(
            KnownDifference(
                "body_mass",
                tuple(light),
                tuple(info.body_names[b] for b in light),
                tuple(MIN_MASS for _ in light),
                f"massless in MuJoCo (below {MIN_MASS:g} kg: {', '.join(f'{mass[b]:.3g}' for b in light)} kg),"
                f" {MIN_MASS:g} kg in PhysX, whose links need a positive mass",
            )
        )
    if flat:
        tensors = []
        for b in flat:
            r = quat_to_matrix(np.asarray(m.body_iquat[b], np.float64))
            t = r @ np.diag(np.maximum(principal[b], MIN_INERTIA)) @ r.T
            tensors.append(tuple(tuple(float(x) for x in row) for row in 0.5 * (t + t.T)))
        out.append(
            KnownDifference(
                "body_inertia",
                tuple(flat),
                tuple(info.body_names[b] for b in flat),
                tuple(tensors),
                f"principal inertia below {MIN_INERTIA:g} kg m^2 in MuJoCo, raised to {MIN_INERTIA:g} in PhysX,"
                " whose links need a positive inertia",
            )
        )
    return out


def _mujoco_passive(m: mujoco.MjModel) -> list[str]:
    """One line per tendon with springs, dampers, friction or limits, and one for fluid forces."""
    out = []
    for t in range(m.ntendon):
        what = [
            w
            for w, on in (
                ("stiffness", m.tendon_stiffness[t] != 0),
                ("damping", m.tendon_damping[t] != 0),
                ("frictionloss", m.tendon_frictionloss[t] != 0),
                ("a range", m.tendon_limited[t]),
            )
            if on
        ]
        if what:
            tname = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_TENDON, t) or f"tendon{t}"
            out.append(f"tendon {tname!r}: {', '.join(what)}")
    if m.opt.density > 0 or m.opt.viscosity > 0 or np.any(np.asarray(m.geom_fluid)[:, 0] > 0):
        out.append(f"fluid forces (density {m.opt.density:g}, viscosity {m.opt.viscosity:g})")
    return out


def _drives(m: mujoco.MjModel, info: ModelInfo, q0: np.ndarray) -> dict:
    njnt, nu = m.njnt, m.nu
    stiffness = np.zeros(njnt)
    damping = np.zeros(njnt)
    pos_bias = np.zeros(njnt)
    force_limit = np.full(njnt, np.inf)
    pos_gain = np.zeros((nu, njnt))
    vel_gain = np.zeros((nu, njnt))
    motor_gear = np.zeros((nu, njnt))
    motor_gain = np.zeros(nu)
    motor_range = np.tile([-np.inf, np.inf], (nu, 1)).astype(np.float64)
    for j in range(njnt):
        if m.jnt_type[j] not in (JOINT_HINGE, JOINT_SLIDE):
            continue
        dof = m.jnt_dofadr[j]
        ks = float(m.jnt_stiffness[j])
        stiffness[j] = ks
        pos_bias[j] = ks * (float(m.qpos_spring[m.jnt_qposadr[j]]) - q0[j])
        damping[j] = float(m.dof_damping[dof])
    driven = np.zeros(njnt, bool)
    limited_by: dict[int, list[float]] = {}
    by_mujoco = set(mujoco_actuators(m, info).tolist())
    for a in range(nu):
        j = int(info.actuator_joint[a])
        g = float(m.actuator_gear[a, 0])
        kind = info.actuator_kind[a]
        if a in by_mujoco:
            continue  # MuJoCo computes its force each substep (.mujoco_forces)
        if kind == "motor":
            if int(m.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_TENDON):
                for tj, coef in fixed_tendon_joints(m, int(m.actuator_trnid[a, 0])):
                    motor_gear[a, tj] += g * coef  # a tendon force f moves joint tj by coef * f
            else:
                motor_gear[a, j] = g
            motor_gain[a] = float(m.actuator_gainprm[a, 0])
            if m.actuator_forcelimited[a]:
                motor_range[a] = m.actuator_forcerange[a]
            continue
        driven[j] = True
        kp, kv = float(info.actuator_kp[a]), float(info.actuator_kv[a])
        if kind == "position":
            stiffness[j] += g * g * kp
            pos_gain[a, j] = g * kp
            pos_bias[j] -= g * g * kp * q0[j]
            damping[j] += g * g * kv
        else:  # velocity
            damping[j] += g * g * kv
            vel_gain[a, j] = g * kv
        if m.actuator_forcelimited[a]:
            lo, hi = m.actuator_forcerange[a]
            limited_by.setdefault(j, []).append(abs(g) * max(abs(lo), abs(hi)))
    for j, limits in limited_by.items():
        force_limit[j] = sum(limits)
    # the joint's own cap on its actuators' total force (actuatorfrcrange: what MuJoCo's URDF reader makes of
    # <limit effort>): the drive's force limit, and each motor's force range (through its gear)
    for j in np.flatnonzero(np.asarray(m.jnt_actfrclimited, bool)):
        lo, hi = (float(v) for v in m.jnt_actfrcrange[j])
        if driven[j]:
            force_limit[j] = min(force_limit[j], max(abs(lo), abs(hi)))
        for a in range(nu):
            if a in by_mujoco or info.actuator_kind[a] != "motor" or int(info.actuator_joint[a]) != j:
                continue
            g = float(m.actuator_gear[a, 0])
            if g != 0:
                cap = sorted((lo / g, hi / g))
                motor_range[a] = (max(motor_range[a, 0], cap[0]), min(motor_range[a, 1], cap[1]))
    rubbing: list[int] = []
    no_friction = bool(m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_FRICTIONLOSS))
    for j in range(njnt):
        fl = float(m.dof_frictionloss[m.jnt_dofadr[j]]) if m.jnt_type[j] in (JOINT_HINGE, JOINT_SLIDE) else 0.0
        if fl <= 0 or no_friction:
            continue
        if driven[j] or stiffness[j] > 0 or damping[j] > 0:
            rubbing.append(j)  # the drive is taken: MuJoCo's solver gives the force (.mujoco_forces)
            continue
        # dry friction: a velocity drive to rest whose force saturates at frictionloss
        damping[j] = FRICTIONLOSS_DAMPING
        force_limit[j] = fl
    ctrl_range = np.array(info.actuator_ctrl_range, dtype=np.float64).reshape(nu, 2)
    return dict(
        stiffness=stiffness,
        damping=damping,
        force_limit=force_limit,
        pos_bias=pos_bias,
        pos_gain=pos_gain,
        vel_gain=vel_gain,
        motor_gain=motor_gain,
        motor_gear=motor_gear,
        motor_force_range=motor_range,
        ctrl_range=ctrl_range,
        forced_friction=np.array(sorted(rubbing), np.int64),
    )


def _filter_pairs(m: mujoco.MjModel, plan: Plan) -> None:
    """Make PhysX ignore the body pairs MuJoCo never collides but PhysX would: parent and child
    through welds, and the model's contact excludes (``<exclude body1 body2>``).

    PhysX ignores two shapes when they share a bit of collision group 2 and have the same id in
    group 3. Each such pair gets its own bit; the trees (and the static world) a pair joins share
    one id and one 32-bit budget.
    """
    weld = np.asarray(m.body_weldid)
    parent = np.asarray(m.body_parentid)
    info = plan.info

    def weld_parent(w: int) -> int:
        return int(weld[parent[w]])

    def unit(b: int) -> int:  # the articulation a body's shapes live on, -1 for the static world
        return int(plan.body_link[b, 0])

    def shapes(b: int) -> list[Shape]:
        if unit(b) >= 0:
            return plan.articulations[unit(b)].links[int(plan.body_link[b, 1])].shapes
        return [sh for sh in plan.static_shapes if int(m.geom_bodyid[sh.geom]) == b]

    def joined(b1: int, b2: int) -> bool:  # PhysX filters directly joined links itself
        if unit(b1) < 0 or unit(b1) != unit(b2):
            return False
        links = plan.articulations[unit(b1)].links
        l1, l2 = int(plan.body_link[b1, 1]), int(plan.body_link[b2, 1])
        return links[l1].parent == l2 or links[l2].parent == l1

    pairs: list[tuple[int, int, str]] = []
    filterparent = not (m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_FILTERPARENT))
    for art in plan.articulations:
        bodies = [lk.body for lk in art.links if lk.body > 0 and lk.shapes]
        for x in range(len(bodies)):
            for y in range(x + 1, len(bodies)):
                b1, b2 = bodies[x], bodies[y]
                w1, w2 = int(weld[b1]), int(weld[b2])
                if w1 == w2 or (
                    filterparent and ((weld_parent(w1) == w2 and w2 != 0) or (weld_parent(w2) == w1 and w1 != 0))
                ):
                    pairs.append((b1, b2, f"tree {art.name!r}"))
    for k in range(m.nexclude):
        sig = int(m.exclude_signature[k])
        b1, b2 = sig >> 16, sig & 0xFFFF
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_EXCLUDE, k) or f"exclude{k}"
        if (unit(b1) < 0 and unit(b2) < 0) or not shapes(b1) or not shapes(b2):
            continue  # static against static, or a body without collision shapes: nothing to filter
        pairs.append((b1, b2, f"contact exclude {name!r} ({info.body_names[b1]} - {info.body_names[b2]})"))
    pairs = [(b1, b2, why) for b1, b2, why in pairs if not joined(b1, b2)]

    # trees joined by a pair share one id (group 3) and one bit budget (group 2)
    root = {u: u for u in range(-1, len(plan.articulations))}

    def find(u: int) -> int:
        while root[u] != u:
            u = root[u]
        return u

    for b1, b2, _ in pairs:
        root[find(unit(b1))] = find(unit(b2))
    nbits: dict[int, int] = {}
    bits: dict[int, int] = {}
    for b1, b2, why in pairs:
        group = find(unit(b1))
        k = nbits.get(group, 0)
        if k == 32:
            raise ModelLoadError(
                f"the sapien backend cannot build this model: more than 32 body pairs to keep"
                f" apart in one group of trees (PhysX's 32 ignore bits), at {why}{_fuse_hint(m)}"
            )
        nbits[group] = k + 1
        bits[b1] = bits.get(b1, 0) | (1 << k)
        bits[b2] = bits.get(b2, 0) | (1 << k)
    for b, mask in bits.items():
        for sh in shapes(b):
            sh.groups[2] = mask
    ids = {}
    for u in range(-1, len(plan.articulations)):
        g = find(u)
        ids.setdefault(g, (g + 1) & 0xFFFF)  # the static world alone keeps id 0
        group_id = ids[g]
        if u >= 0:
            for lk in plan.articulations[u].links:
                for sh in lk.shapes:
                    sh.groups[3] = group_id
        elif group_id:
            for sh in plan.static_shapes:
                sh.groups[3] = group_id


def _fuse_hint(m: mujoco.MjModel) -> str:
    """The fix for too many pairs where bodies are welded to a moving parent (a URDF's fixed links, kept
    unless fused): each welded body makes pairs with its parent's neighbours; fusing it into its parent
    removes them. ``""`` where no body is welded to a parent other than the world."""
    weld = np.asarray(m.body_weldid)
    welded = [b for b in range(1, m.nbody) if int(weld[b]) not in (b, 0)]
    if not welded:
        return ""
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}" for b in welded]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (
        f"; {len(welded)} bodies are welded to a moving parent ({shown}: a URDF's fixed links count):"
        " fusing them into their parents removes their pairs (a robot description's"
        " robot.model_options.fuse_static: true; make_backend's fuse_static=True)"
    )


def _explicit_pairs(m: mujoco.MjModel, plan: Plan) -> None:
    """``<pair geom1 geom2>``: the two geoms collide whatever their contype/conaffinity. Each pair
    gets a contact-type bit (g0) on one shape and the same affinity bit (g1) on the other, a bit
    no geom of the model uses, so no other shape matches it."""
    if not m.npair:
        return
    info = plan.info
    by_geom = {sh.geom: sh for sh in plan.static_shapes}
    for art in plan.articulations:
        for lk in art.links:
            by_geom.update({sh.geom: sh for sh in lk.shapes})
    used = 0
    for g in range(m.ngeom):
        used |= int(m.geom_contype[g]) | int(m.geom_conaffinity[g])
    free = [1 << k for k in range(32) if not (used >> k) & 1]
    for p in range(m.npair):
        label = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_PAIR, p) or f"pair{p}"
        g1, g2 = int(m.pair_geom1[p]), int(m.pair_geom2[p])
        s1, s2 = by_geom[g1], by_geom[g2]
        b1, b2 = int(m.geom_bodyid[g1]), int(m.geom_bodyid[g2])
        a1, a2 = int(plan.body_link[b1, 0]), int(plan.body_link[b2, 0])
        if a1 < 0 and a2 < 0:
            continue  # two world geoms never move: nothing to collide
        if a1 == a2 >= 0:
            links = plan.articulations[a1].links
            l1, l2 = int(plan.body_link[b1, 1]), int(plan.body_link[b2, 1])
            if links[l1].parent == l2 or links[l2].parent == l1 or l1 == l2:
                raise ModelLoadError(
                    f"the sapien backend cannot build this model: contact pair {label!r}: PhysX never"
                    " collides a link with itself or with the link it is jointed to"
                )
        if (s1.groups[2] & s2.groups[2]) and s1.groups[3] == s2.groups[3]:
            raise ModelLoadError(
                f"the sapien backend cannot build this model: contact pair {label!r} joins bodies"
                f" {info.body_names[b1]!r} and {info.body_names[b2]!r}, which PhysX must otherwise"
                " keep apart (MuJoCo's parent/child filter or an exclude)"
            )
        if not free:
            raise ModelLoadError(
                f"the sapien backend cannot build this model: contact pair {label!r}: no collision"
                " group bit is left (the model's contype/conaffinity and its pairs use all 32)"
            )
        bit = free.pop(0)
        s1.groups[0] |= bit
        s2.groups[1] |= bit
        friction = float(m.pair_friction[p, 0])
        if abs(friction - 0.5 * (s1.friction + s2.friction)) > 1e-12:
            plan.notes.append(
                f"contact pair {label!r}: PhysX averages the two geoms' friction"
                f" ({0.5 * (s1.friction + s2.friction):g}), not the pair's {friction:g}"
            )


def _approximations(m: mujoco.MjModel, plan: Plan) -> list[str]:
    notes = []
    has_contacts = bool(plan.static_shapes) or any(lk.shapes for art in plan.articulations for lk in art.links)
    if has_contacts:
        notes.append("contacts: MuJoCo's soft contacts (solref/solimp) become PhysX rigid contacts (rest offset 0)")
        notes.append(
            "geom_compliance, geom_impedance not declared: SAPIEN 3.0.3's PhysxMaterial reaches no contact damping nor"
            " PhysX's compliant-contact flags; a negative restitution is an undamped force spring"
            " (mass-dependent), not the term's mass-normalized spring-damper"
        )
        notes.append(
            "friction: sliding friction only (torsional/rolling dropped); PhysX averages two materials'"
            " friction where MuJoCo takes the maximum"
        )
        if np.any(np.asarray(m.geom_margin) > 0):
            notes.append("geom margin > 0: PhysX contact offset stays at its default")
    if any(
        s.kind == "convex" and s.vertices is not None and s.vertices.shape[0] == 8 * 16 + 2
        for art in plan.articulations
        for lk in art.links
        for s in lk.shapes
    ):
        notes.append("ellipsoids: convex hulls of 130 surface points")
    notes.extend(d.text for d in plan.known_differences)  # every body named (parity: status KNOWN)
    if any(lk.body < 0 and lk.parent >= 0 for art in plan.articulations for lk in art.links):
        notes.append(f"bodies with several joints: chains of {MIN_MASS:g} kg intermediate links")
    stiff = np.flatnonzero((plan.stiffness > 0) & (plan.damping < plan.stiffness * plan.explicit_stiffness_dt))
    if stiff.size:
        names = [plan.info.joint_names[j] for j in stiff]
        notes.append(
            f"joints {names[:4]}: damping below stiffness x timestep; PhysX's implicit drive damps them by"
            f" stiffness x timestep ({plan.explicit_stiffness_dt:g} s), more than MuJoCo does"
        )
    if np.any(np.isfinite(plan.force_limit) & (plan.stiffness + plan.damping > 0)):
        notes.append("actuator force ranges clamp the whole joint drive (passive stiffness/damping included)")
    if plan.forced_friction.size:
        rubbing = [plan.info.joint_names[j] for j in plan.forced_friction]
        notes.append(
            f"frictionloss of joints {rubbing[:4]} (their PhysX drive is taken): MuJoCo's solver gives the"
            " force each substep, for the unconstrained acceleration of the previous substep (CPU only)"
        )
    if plan.equalities:
        notes.append(
            f"equalities {plan.equalities[:4]}: MuJoCo's solver gives their forces each substep, for the"
            " unconstrained acceleration of the previous substep (CPU only)"
        )
    if plan.mujoco_actuators.size:
        names = [plan.info.actuator_names[a] for a in plan.mujoco_actuators]
        notes.append(f"actuators {names[:4]}: MuJoCo computes their force each substep (CPU only)")
    if plan.mujoco_passive:
        notes.append(f"MuJoCo computes each substep (CPU only): {'; '.join(plan.mujoco_passive[:4])}")
    mocap = [plan.info.body_names[b] for b in range(1, m.nbody) if m.body_mocapid[b] >= 0]
    if mocap:
        notes.append(
            f"mocap bodies {mocap[:4]}: fixed at their model pose, as in MuJoCo while nothing moves them"
            " (the contract has no call that does)"
        )
    if any(sh.kind == "mesh" for sh in plan.static_shapes):
        notes.append(
            "height fields: PhysX collides their top surface (a triangle mesh of MuJoCo's grid and"
            " diagonals), not the solid below it that MuJoCo has"
        )
    if int(m.opt.integrator) != int(mujoco.mjtIntegrator.mjINT_EULER):
        notes.append(
            f"integrator {mujoco.mjtIntegrator(int(m.opt.integrator)).name}: PhysX integrates with its own"
            " solver (named in backend.notes)"
        )
    return notes
