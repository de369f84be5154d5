"""Model sources: MJCF/URDF paths, ``mujoco.MjSpec`` objects and built-in names.

This is the model compiler every backend shares. MuJoCo's compiler reads the
assets (MJCF and URDF), so this module may import ``mujoco``; the rest of the
engine-neutral core may not. Backends receive the compiled ``mujoco.MjModel``
and the :class:`~simbackend.model_info.ModelInfo` derived from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np

from simbackend.errors import ModelLoadError, closest_names_hint
from simbackend.model_info import ModelInfo

ASSETS = Path(__file__).resolve().parent / "assets"

ModelSource = Union[str, os.PathLike, "mujoco.MjSpec", "mujoco.MjModel"]  # noqa: F821


def builtin_models() -> tuple[str, ...]:
    """Names of the models shipped with the package, sorted."""
    return tuple(sorted(p.stem for p in ASSETS.glob("*.xml")))


def builtin_model_path(name: str) -> Path:
    """Path of built-in model ``name``; raises :class:`ModelLoadError` for unknown names."""
    path = ASSETS / f"{name}.xml"
    if not path.is_file():
        raise ModelLoadError(
            f"no built-in model named {name!r}{closest_names_hint(name, builtin_models())}"
        )
    return path


def describe_source(source: ModelSource) -> str:
    """A short human-readable label of a model source (for logs and tables)."""
    import mujoco

    if isinstance(source, mujoco.MjSpec):
        return f"MjSpec({source.modelname or 'unnamed'})"
    if isinstance(source, mujoco.MjModel):
        return "MjModel"
    return str(source)


def compile_model(source: ModelSource) -> "mujoco.MjModel":
    """Compile a model source into a ``mujoco.MjModel``.

    Args:
        source: a path to an MJCF (``.xml``) or URDF (``.urdf``) file, a
            ``mujoco.MjSpec``, an already compiled ``mujoco.MjModel`` (used as
            is), or the name of a built-in model (:func:`builtin_models`).

    Returns:
        The compiled model. A caller that needs its own copy must copy it.

    Raises:
        ModelLoadError: the file is missing, the name unknown, or MuJoCo's
            compiler rejected the model (its message is included).
    """
    import mujoco

    if isinstance(source, mujoco.MjModel):
        return source
    if isinstance(source, mujoco.MjSpec):
        try:
            return source.compile()
        except Exception as e:  # mujoco raises ValueError with the compiler's message
            raise ModelLoadError(f"MuJoCo could not compile the MjSpec: {e}") from e
    if not isinstance(source, (str, os.PathLike)):
        raise ModelLoadError(
            "model source must be a path to an MJCF/URDF file, a mujoco.MjSpec, a"
            f" mujoco.MjModel or a built-in model name ({', '.join(builtin_models())});"
            f" got {type(source).__name__}"
        )
    text = os.fspath(source)
    path = Path(text)
    looks_like_path = path.suffix.lower() in (".xml", ".urdf", ".mjcf") or os.sep in text
    if not looks_like_path:
        path = builtin_model_path(text)
    elif not path.is_file():
        raise ModelLoadError(f"model file not found: {text}")
    try:
        return mujoco.MjModel.from_xml_path(str(path))
    except Exception as e:
        raise ModelLoadError(f"MuJoCo could not compile {path}: {e}") from e


def model_info(m: "mujoco.MjModel") -> ModelInfo:
    """Derive the engine-neutral :class:`ModelInfo` from a compiled model.

    Unnamed elements are named ``<kind><id>`` (``body7``, ``joint0``) and the
    world body ``world``, so that every id has a name on every backend.
    """
    import mujoco

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

    sensor_type = tuple(mujoco.mjtSensor(int(t)).name[len("mjSENS_"):].lower() for t in m.sensor_type)

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
        gravity=np.array(m.opt.gravity, dtype=np.float64),
        body_parent=np.array(m.body_parentid, dtype=np.int64),
        body_root=np.array(m.body_rootid, dtype=np.int64),
        body_mass=np.array(m.body_mass, dtype=np.float64),
        joint_type=np.array(m.jnt_type, dtype=np.int64),
        joint_body=np.array(m.jnt_bodyid, dtype=np.int64),
        joint_qposadr=np.array(m.jnt_qposadr, dtype=np.int64),
        joint_dofadr=np.array(m.jnt_dofadr, dtype=np.int64),
        joint_range=jnt_range,
        site_body=np.array(m.site_bodyid, dtype=np.int64),
        actuator_kind=tuple(kinds),
        actuator_joint=act_joint,
        actuator_ctrl_range=ctrl_range,
        actuator_kp=kp,
        actuator_kv=kv,
        sensor_type=sensor_type,
        sensor_dim=np.array(m.sensor_dim, dtype=np.int64),
        sensor_adr=np.array(m.sensor_adr, dtype=np.int64),
        qpos0=np.array(m.qpos0, dtype=np.float64),
        key_qpos=np.array(m.key_qpos, dtype=np.float64).reshape(m.nkey, m.nq),
        base_body=int(base),
    )
