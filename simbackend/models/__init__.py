"""Model sources: MJCF/URDF paths, ``mujoco.MjSpec`` objects and built-in names.

This is the model compiler every backend shares. URDF files are read as
robot descriptions ship them (:mod:`simbackend.models.urdf`: every link kept,
``package://`` meshes resolved), and actuators can be added to a model that
has none (:mod:`simbackend.models.actuators`). MuJoCo's compiler reads the
assets (MJCF and URDF), so this module may import ``mujoco``; the rest of the
engine-neutral core may not. Backends receive the compiled ``mujoco.MjModel``
and the :class:`~simbackend.model_info.ModelInfo` derived from it.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from simbackend.errors import ModelLoadError, closest_names_hint
from simbackend.model_info import ModelInfo
from simbackend.models.actuators import ActuatorSpec, actuator_specs, add_actuators
from simbackend.models.urdf import load_urdf_spec, package_dirs_option

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


def compile_model(source: ModelSource, *, package_dirs: Any = None, actuators: Any = None,
                  fuse_static: Optional[bool] = None) -> "mujoco.MjModel":
    """Compile a model source into a ``mujoco.MjModel``.

    Args:
        source: a path to an MJCF (``.xml``) or URDF (``.urdf``) file, a
            ``mujoco.MjSpec`` (not modified), an already compiled
            ``mujoco.MjModel`` (used as is), or the name of a built-in model
            (:func:`builtin_models`).
        package_dirs: where a URDF's ``package://PKG/...`` URIs resolve: a
            path or paths, each a package folder or a folder holding packages
            (searched before the file's ancestors and ``ROS_PACKAGE_PATH``;
            see :mod:`simbackend.models.urdf`).
        actuators: actuators to add (:mod:`simbackend.models.actuators`), e.g.
            ``[{"joints": ".*", "kind": "position", "kp": 100, "kv": 10}]``.
        fuse_static: let MuJoCo fuse bodies welded to their parent into it.
            ``None`` (default): off for URDF, so every link keeps its name and
            id, and the file's own setting for MJCF (off unless it says so).

    Returns:
        The compiled model. A caller that needs its own copy must copy it.

    Raises:
        ModelLoadError: one line naming the file and the problem: a missing
            file, a folder, an unknown name, an unresolvable mesh, a bad option,
            or MuJoCo's compiler's message.
    """
    import mujoco

    dirs = package_dirs_option(package_dirs)
    specs = actuator_specs(actuators)
    if fuse_static is not None and not isinstance(fuse_static, bool):
        raise ModelLoadError(f"fuse_static: expected True, False or None, got {fuse_static!r}")
    if isinstance(source, mujoco.MjModel):
        given = [k for k, v in (("package_dirs", dirs), ("actuators", specs), ("fuse_static", fuse_static)) if v]
        if given:
            raise ModelLoadError(f"{', '.join(given)}: a compiled mujoco.MjModel cannot take model options;"
                                 " pass the MJCF/URDF path or a mujoco.MjSpec")
        return source
    if isinstance(source, mujoco.MjSpec):
        spec, label = source.copy(), "the MjSpec"
    elif isinstance(source, (str, os.PathLike)):
        path, label = _source_path(source), None
        label = str(path)
        if path.suffix.lower() == ".urdf" or _root_tag(path) == "robot":
            spec = load_urdf_spec(path, dirs, bool(fuse_static))
            fuse_static = None  # applied by the URDF loader
        else:
            try:
                spec = mujoco.MjSpec.from_file(str(path))
            except Exception as e:
                raise ModelLoadError(f"MuJoCo could not compile {path}: {_one_line(e)}") from e
    else:
        raise ModelLoadError(
            "model source must be a path to an MJCF/URDF file, a mujoco.MjSpec, a"
            f" mujoco.MjModel or a built-in model name ({', '.join(builtin_models())});"
            f" got {type(source).__name__}"
        )
    if fuse_static is not None:
        spec.compiler.fusestatic = fuse_static
    if specs:
        add_actuators(spec, specs)
    try:
        return spec.compile()
    except Exception as e:  # mujoco raises ValueError with the compiler's (multi-line) message
        raise ModelLoadError(f"MuJoCo could not compile {label}: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    """MuJoCo's multi-line messages ("XML Error: ...\nElement 'x', line 3") on one line."""
    return " ".join(str(e).split())


def _source_path(source: Union[str, os.PathLike]) -> Path:
    """The file a path-like source names (built-in names included), checked to be a readable file."""
    text = os.fspath(source)
    path = Path(text).expanduser()
    looks_like_path = path.suffix.lower() in (".xml", ".urdf", ".mjcf") or os.sep in text or path.exists()
    if not looks_like_path:
        return builtin_model_path(text)
    if path.is_dir():
        raise ModelLoadError(f"model path {text!r} is a folder; give the MJCF or URDF file inside it")
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {text}")
    if path.stat().st_size == 0:
        raise ModelLoadError(f"model file {text!r} is empty")
    return path


def _root_tag(path: Path) -> Optional[str]:
    """The root element's tag of an XML file, or None when it is not XML."""
    try:
        for _, elem in ET.iterparse(path, events=("start",)):
            return elem.tag
    except ET.ParseError:
        return None
    return None


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


__all__ = ["ActuatorSpec", "builtin_models", "builtin_model_path", "compile_model", "describe_source", "model_info"]
