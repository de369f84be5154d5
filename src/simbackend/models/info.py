"""The engine-neutral :class:`~simbackend.model_info.ModelInfo` of a compiled model: names, tree, joints,
actuators and sensors, read from ``mujoco.MjModel``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simbackend.errors import ModelLoadError
from simbackend.model_info import ModelInfo
from simbackend.models.mujoco_extra import import_mujoco

if TYPE_CHECKING:
    import mujoco


def model_info(m: mujoco.MjModel) -> ModelInfo:
    """Derive the engine-neutral :class:`ModelInfo` from a compiled model.

    Unnamed elements are named ``<kind><id>`` (``body7``, ``joint0``) and the
    world body ``world``, so that every id has a name on every backend.
    """
    mujoco = import_mujoco()
    gravity_off = int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)

    def names(obj: mujoco.mjtObj, n: int) -> tuple[str, ...]:
        out = []
        for i in range(n):
            nm = mujoco.mj_id2name(m, obj, i)
            out.append(nm if nm else f"{obj.name[6:].lower()}{i}")
        return tuple(out)

    body_names = names(mujoco.mjtObj.mjOBJ_BODY, m.nbody)
    if not mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, 0):
        body_names = ("world",) + body_names[1:]

    jnt_range = np.array(m.jnt_range, dtype=np.float64).reshape(m.njnt, 2)
    unlimited = ~np.asarray(m.jnt_limited, dtype=bool)
    jnt_range[unlimited] = (-np.inf, np.inf)

    # MuJoCo 4 lets one actuator take several controls (``pid``: ``actuator_ctrlnum``); the contract's
    # ctrl has one column per actuator
    nact = int(getattr(m, "nactuator", m.nu))
    ctrlnum = np.asarray(getattr(m, "actuator_ctrlnum", np.ones(nact)), dtype=np.int64)
    if nact != m.nu or (ctrlnum != 1).any():
        a = int(np.flatnonzero(ctrlnum != 1)[0]) if (ctrlnum != 1).any() else 0
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a) or f"actuator{a}"
        raise ModelLoadError(
            f"actuator {name!r} takes {int(ctrlnum[a])} controls; the contract has one ctrl column per actuator,"
            " so actuators with several controls (e.g. pid) are not supported"
        )
    ctrl_range = np.array(m.actuator_ctrlrange, dtype=np.float64).reshape(m.nu, 2)
    ctrl_range[~np.asarray(m.actuator_ctrllimited, dtype=bool)] = (-np.inf, np.inf)

    kinds, kp, kv, act_joint = [], np.zeros(m.nu), np.zeros(m.nu), np.full(m.nu, -1, np.int64)
    FIXED = int(mujoco.mjtGain.mjGAIN_FIXED)
    AFFINE = int(mujoco.mjtBias.mjBIAS_AFFINE)
    NONE_BIAS = int(mujoco.mjtBias.mjBIAS_NONE)
    NONE_DYN = int(mujoco.mjtDyn.mjDYN_NONE)
    for a in range(m.nu):
        g, b = m.actuator_gainprm[a], m.actuator_biasprm[a]
        gt, bt, dt = int(m.actuator_gaintype[a]), int(m.actuator_biastype[a]), int(m.actuator_dyntype[a])
        kind = "other"
        if gt == FIXED and dt == NONE_DYN:
            if bt == NONE_BIAS:
                kind = "motor"
            elif bt == AFFINE and b[0] == 0 and b[1] == -g[0] and g[0] > 0:
                kind, kp[a], kv[a] = "position", g[0], -b[2]
            elif bt == AFFINE and b[0] == 0 and b[1] == 0 and b[2] == -g[0] and g[0] > 0:
                kind, kv[a] = "velocity", g[0]
        kinds.append(kind)
        if int(m.actuator_trntype[a]) in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)):
            act_joint[a] = int(m.actuator_trnid[a, 0])

    sensor_type = tuple(mujoco.mjtSensor(int(t)).name[len("mjSENS_") :].lower() for t in m.sensor_type)

    roots = [b for b in range(1, m.nbody) if m.body_parentid[b] == 0]
    base = roots[0] if roots else 0

    return ModelInfo(
        body_names=body_names,
        joint_names=names(mujoco.mjtObj.mjOBJ_JOINT, m.njnt),
        site_names=names(mujoco.mjtObj.mjOBJ_SITE, m.nsite),
        actuator_names=names(mujoco.mjtObj.mjOBJ_ACTUATOR, m.nu),
        sensor_names=names(mujoco.mjtObj.mjOBJ_SENSOR, m.nsensor),
        keyframe_names=names(mujoco.mjtObj.mjOBJ_KEY, m.nkey),
        nq=int(m.nq),
        nv=int(m.nv),
        timestep=float(m.opt.timestep),
        # the gravity applied: none where the model disables it (<flag gravity="disable"/>)
        gravity=np.zeros(3) if m.opt.disableflags & gravity_off else np.array(m.opt.gravity, dtype=np.float64),
        body_parent=np.array(m.body_parentid, dtype=np.int64),
        body_root=np.array(m.body_rootid, dtype=np.int64),
        body_mass=np.array(m.body_mass, dtype=np.float64),
        body_com=np.array(m.body_ipos, dtype=np.float64).reshape(m.nbody, 3),
        body_inertia=np.array(m.body_inertia, dtype=np.float64).reshape(m.nbody, 3),
        body_iquat=np.array(m.body_iquat, dtype=np.float64).reshape(m.nbody, 4),
        joint_type=np.array(m.jnt_type, dtype=np.int64),
        joint_body=np.array(m.jnt_bodyid, dtype=np.int64),
        joint_qposadr=np.array(m.jnt_qposadr, dtype=np.int64),
        joint_dofadr=np.array(m.jnt_dofadr, dtype=np.int64),
        joint_range=jnt_range,
        site_body=np.array(m.site_bodyid, dtype=np.int64),
        geom_names=names(mujoco.mjtObj.mjOBJ_GEOM, m.ngeom),
        geom_body=np.array(m.geom_bodyid, dtype=np.int64),
        geom_type=tuple(mujoco.mjtGeom(int(t)).name[len("mjGEOM_") :].lower() for t in m.geom_type),
        geom_size=np.array(m.geom_size, dtype=np.float64).reshape(m.ngeom, 3),
        geom_contype=np.array(m.geom_contype, dtype=np.int64),
        geom_conaffinity=np.array(m.geom_conaffinity, dtype=np.int64),
        geom_friction=np.array(m.geom_friction, dtype=np.float64).reshape(m.ngeom, 3),
        geom_compliance=np.array(m.geom_solref, dtype=np.float64).reshape(m.ngeom, 2),
        geom_impedance=np.array(m.geom_solimp, dtype=np.float64).reshape(m.ngeom, 5)[:, :3].copy(),
        dof_damping=np.array(m.dof_damping, dtype=np.float64),
        dof_armature=np.array(m.dof_armature, dtype=np.float64),
        dof_frictionloss=np.array(m.dof_frictionloss, dtype=np.float64),
        actuator_kind=tuple(kinds),
        actuator_joint=act_joint,
        actuator_ctrl_range=ctrl_range,
        actuator_kp=kp,
        actuator_kv=kv,
        actuator_gear=np.array(m.actuator_gear[:, 0], dtype=np.float64),
        actuator_gain=np.array(m.actuator_gainprm[:, 0], dtype=np.float64),
        sensor_type=sensor_type,
        sensor_dim=np.array(m.sensor_dim, dtype=np.int64),
        sensor_adr=np.array(m.sensor_adr, dtype=np.int64),
        qpos0=np.array(m.qpos0, dtype=np.float64),
        key_qpos=np.array(m.key_qpos, dtype=np.float64).reshape(m.nkey, m.nq),
        base_body=int(base),
        compiled=m,
    )
