"""Model sources and the model compiler every backend shares.

A model source is a path to an MJCF (``.xml``) or URDF (``.urdf``) file, a
``mujoco.MjSpec`` (copied, never modified), a compiled ``mujoco.MjModel``
(used as is), or the name of a built-in model (:func:`builtin_models`).
:func:`compile_model` turns it into a ``mujoco.MjModel``; backends build
from that model and the :class:`~simbackend.model_info.ModelInfo`
:func:`model_info` derives from it. MuJoCo's compiler reads the files, so this
package may import ``mujoco``; the rest of the engine-neutral core may not.

Model options
-------------
Every backend passes its construction options ``package_dirs``,
``actuators`` and ``fuse_static`` (:mod:`simbackend.options`) to
:func:`compile_model`, which validates them. They apply to files, built-in
names and ``MjSpec`` sources; a compiled ``MjModel`` takes none.

``package_dirs`` (a path or a list of paths; default none)
    Where the ``package://PKG/...`` mesh URIs of a URDF resolve, searched
    before the URDF's own folder and its ancestors, ``ROS_PACKAGE_PATH`` and
    ``AMENT_PREFIX_PATH``. Each entry is a package folder, or a folder holding
    packages (a workspace's ``src``); a package is a folder whose
    ``package.xml`` names it, or a folder of that name
    (:mod:`simbackend.models.packages`). A URDF inside its package needs no
    option. Ignored by MJCF sources, whose meshes MuJoCo resolves.

``actuators`` (a list of :class:`ActuatorSpec` or dicts; default none)
    Actuators added before compiling, so ``step`` can drive a robot that has
    none, e.g. ``[{"joints": ".*", "kind": "position", "kp": 100, "kv": 5}]``:
    position servos (``kp``, ``kv``; ctrl range the joint's, if limited), velocity
    servos (``kv``) and motors, selected by a joint-name regular expression
    or a list of names (:mod:`simbackend.models.actuators`).

``fuse_static`` (``True``, ``False`` or ``None``; default ``None``)
    Whether MuJoCo may fuse a body welded to its parent (no joint) into the
    parent, so that it disappears from the body names. ``None`` keeps the
    file's own setting; a URDF without one is not fused, so that every link
    keeps its name and id (:mod:`simbackend.models.urdf`, which also lists the
    other URDF import settings); MJCF's default is not to fuse.

Errors are one line: :class:`~simbackend.errors.ArgumentTypeError` and
:class:`~simbackend.errors.InvalidArgumentError` name the option and field
(``actuators[1].kp: ...``); :class:`~simbackend.errors.ModelLoadError` names
the file and the problem (a missing file, a folder, an empty or non-XML file,
an unresolvable mesh, or MuJoCo's own message, with its element and line).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, ModelLoadError, closest_names_hint
from simbackend.model_info import ModelInfo
from simbackend.models.actuators import ActuatorSpec, actuator_specs, add_actuators
from simbackend.models.packages import package_dirs_option
from simbackend.models.urdf import prepare_urdf_spec, urdf_error_hint

if TYPE_CHECKING:
    import mujoco

ASSETS = Path(__file__).resolve().parent / "assets"

ModelSource = Union[str, os.PathLike, "mujoco.MjSpec", "mujoco.MjModel"]

#: root element of each model file format MuJoCo reads
_FORMATS = {"mujoco": "MJCF", "robot": "URDF"}
_SUFFIXES = (".xml", ".mjcf", ".urdf")
#: an XML prolog (declaration, comments, DOCTYPE, processing instructions) and the root's start tag
_ROOT_TAG = re.compile(r"(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>)*<([A-Za-z_][\w:.-]*)", re.DOTALL)


def builtin_models() -> tuple[str, ...]:
    """Names of the models shipped with the package, sorted."""
    return tuple(sorted(p.stem for p in ASSETS.glob("*.xml")))


def builtin_model_path(name: str) -> Path:
    """Path of built-in model ``name``; raises :class:`ModelLoadError` for unknown names."""
    path = ASSETS / f"{name}.xml"
    if not path.is_file():
        raise ModelLoadError(f"no built-in model named {name!r}{closest_names_hint(name, builtin_models())}")
    return path


def describe_source(source: ModelSource) -> str:
    """A short human-readable label of a model source (for logs and tables)."""
    import mujoco

    if isinstance(source, mujoco.MjSpec):
        return f"MjSpec({source.modelname or 'unnamed'})"
    if isinstance(source, mujoco.MjModel):
        return "MjModel"
    return str(source)


def compile_model(
    source: ModelSource, *, package_dirs: Any = None, actuators: Any = None, fuse_static: bool | None = None
) -> mujoco.MjModel:
    """Compile a model source into a ``mujoco.MjModel`` (see the module docstring for the options).

    Args:
        source: a path to an MJCF or URDF file, a ``mujoco.MjSpec`` (not
            modified), a compiled ``mujoco.MjModel`` (returned as is), or a
            built-in model name. A file's format is its root element
            (``<mujoco>`` or ``<robot>``), whatever its extension.
        package_dirs: a path or a list of paths where a URDF's
            ``package://PKG/...`` URIs resolve first.
        actuators: a list of :class:`ActuatorSpec` or dicts: actuators to add.
        fuse_static: fuse bodies welded to their parent (``True``), keep them
            (``False``), or follow the file (``None``: URDF links are kept).

    Returns:
        The compiled model. A caller that needs its own copy must copy it.

    Raises:
        ArgumentTypeError, InvalidArgumentError: a bad option, naming it.
        ModelLoadError: a source that cannot be read or compiled, in one line
            naming the file and the problem.
    """
    import mujoco

    if isinstance(source, mujoco.MjModel):
        _no_model_options(package_dirs, actuators, fuse_static)
        return source
    spec, label, urdf = _prepared_spec(source, package_dirs, actuators, fuse_static)
    return _compiled(spec, label, urdf)


def _no_model_options(package_dirs: Any, actuators: Any, fuse_static: Any) -> None:
    """Validate the model options given with a compiled ``MjModel``, which takes none."""
    dirs, specs = package_dirs_option(package_dirs), actuator_specs(actuators)
    _check_fuse_static(fuse_static)
    given = [k for k, v in (("package_dirs", dirs), ("actuators", specs)) if v]
    given += ["fuse_static"] if fuse_static is not None else []
    if given:
        raise InvalidArgumentError(
            f"{', '.join(given)}: a compiled mujoco.MjModel takes no model options;"
            " pass the MJCF/URDF path or a mujoco.MjSpec instead"
        )


def _check_fuse_static(fuse_static: Any) -> None:
    if fuse_static is not None and not isinstance(fuse_static, (bool, np.bool_)):
        raise ArgumentTypeError(
            f"fuse_static: expected True, False or None, got {type(fuse_static).__name__} {fuse_static!r}"
        )


def _prepared_spec(
    source: Any, package_dirs: Any, actuators: Any, fuse_static: bool | None
) -> tuple[mujoco.MjSpec, str, bool]:
    """The spec of a file, built-in name or ``MjSpec`` source with the model options applied, its label
    for messages, and whether it came from a URDF."""
    import mujoco

    dirs = package_dirs_option(package_dirs)
    specs = actuator_specs(actuators)
    _check_fuse_static(fuse_static)
    urdf = False
    if isinstance(source, mujoco.MjSpec):
        spec, label = source.copy(), "the MjSpec"
    elif isinstance(source, (str, os.PathLike)):
        path = _source_path(source)
        label, urdf = str(path), _file_format(path) == "URDF"
        try:
            spec = mujoco.MjSpec.from_file(str(path))
        except Exception as e:  # mujoco raises ValueError with the parser's (multi-line) message
            raise ModelLoadError(f"MuJoCo could not compile {label}: {_one_line(e)}") from e
        if urdf:
            prepare_urdf_spec(spec, path, dirs, fuse_static)
    else:
        raise ModelLoadError(
            "model source must be a path to an MJCF/URDF file, a mujoco.MjSpec, a"
            f" mujoco.MjModel or a built-in model name ({', '.join(builtin_models())});"
            f" got {type(source).__name__}"
        )
    if fuse_static is not None and not urdf:
        spec.compiler.fusestatic = bool(fuse_static)
    add_actuators(spec, specs)
    return spec, label, urdf


def _compiled(spec: mujoco.MjSpec, label: str, urdf: bool) -> mujoco.MjModel:
    try:
        return spec.compile()
    except Exception as e:  # mujoco raises ValueError with the compiler's (multi-line) message
        msg = _one_line(e)
        raise ModelLoadError(f"MuJoCo could not compile {label}: {msg}{urdf_error_hint(msg) if urdf else ''}") from e


def export_mjcf(
    source: ModelSource,
    folder: str | os.PathLike,
    *,
    package_dirs: Any = None,
    actuators: Any = None,
    fuse_static: bool | None = None,
) -> tuple[mujoco.MjModel, Path]:
    """Compile a model source as :func:`compile_model` does, and write the same model as one MJCF file.

    For engines with their own MJCF compiler (a plugin backend loads the file
    and maps its elements to the :class:`ModelInfo` of the returned model by
    name). The file is written so that another compiler needs none of MuJoCo's
    compile-time inference:

    * every element :func:`model_info` names is named as it names it
      (unnamed ones ``body7``, ``joint0``, ...), so names match one to one;
    * static bodies are fused as the compiled model fused them;
    * every body's inertial is explicit (what MuJoCo inferred from its geoms);
    * meshes, height fields and textures are absolute paths, and assets
      held in memory (a URDF's ASCII STL meshes converted to binary) are
      written next to the file.

    Args:
        source: a path, a built-in name or a ``mujoco.MjSpec``; a compiled
            ``MjModel`` only if this process wrote the same model (bit for
            bit) before, otherwise ``ModelLoadError``.
        folder: an existing folder the file (``model.xml``) and its in-memory
            assets are written to.

    Returns:
        ``(model, path)``: the compiled model (the one :func:`compile_model`
        gives) and the MJCF file. The file compiles, in MuJoCo, to a model
        with the same names, tree, joints and layout (checked before returning).
    """
    import mujoco

    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidArgumentError(f"folder: {str(folder)!r} is not an existing folder")
    if isinstance(source, mujoco.MjModel):
        return source, _written_again(source, folder, package_dirs, actuators, fuse_static)
    spec, label, urdf = _prepared_spec(source, package_dirs, actuators, fuse_static)
    m = _compiled(spec, label, urdf)
    out = spec.copy()
    try:
        if out.compiler.fusestatic:
            out.fuse_static()
            out.compiler.fusestatic = False
    except Exception as e:
        raise ModelLoadError(f"{label}: cannot write the compiled model as MJCF: {_one_line(e)}") from e
    bodies = list(out.bodies)
    if len(bodies) == m.nbody:  # else reported below, with the other element counts
        for k, body in enumerate(bodies[1:], 1):  # the inertials MuJoCo inferred or scaled, made explicit
            body.mass = float(m.body_mass[k])
            body.ipos = m.body_ipos[k].copy()
            body.iquat = m.body_iquat[k].copy()
            body.inertia = m.body_inertia[k].copy()
            body.fullinertia = np.full(6, np.nan)
            body.explicitinertial = True
    try:
        out.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
        out.compiler.settotalmass = -1.0
    except Exception as e:
        raise ModelLoadError(f"{label}: cannot write the compiled model as MJCF: {_one_line(e)}") from e
    info = model_info(m)
    groups = (
        ("body", out.bodies, info.body_names),
        ("joint", out.joints, info.joint_names),
        ("site", out.sites, info.site_names),
        ("geom", out.geoms, info.geom_names),
        ("actuator", out.actuators, info.actuator_names),
        ("sensor", out.sensors, info.sensor_names),
    )
    for kind, elements, names in groups:
        elements = list(elements)
        if len(elements) != len(names):
            raise ModelLoadError(
                f"{label}: the spec holds {len(elements)} {kind}s where the compiled model has"
                f" {len(names)}; it cannot be written back as MJCF"
            )
        for k, (element, name) in enumerate(zip(elements, names)):
            if not element.name and not (kind == "body" and k == 0):
                element.name = name
    memory = _absolute_assets(out, folder)
    try:
        text = _full_precision(out.to_xml(), m, info)
        again = mujoco.MjSpec.from_string(text, assets=dict(out.assets) or None)
        check = model_info(again.compile())
    except Exception as e:
        raise ModelLoadError(f"{label}: the model written as MJCF does not compile again: {_one_line(e)}") from e
    for f in (
        "body_names",
        "joint_names",
        "site_names",
        "geom_names",
        "actuator_names",
        "sensor_names",
        "body_parent",
        "joint_type",
        "joint_body",
        "joint_qposadr",
        "joint_dofadr",
    ):
        if not np.array_equal(np.asarray(getattr(check, f)), np.asarray(getattr(info, f))):
            raise ModelLoadError(f"{label}: the model written as MJCF differs from the compiled one in {f}")
    for f in ("body_mass", "body_com", "body_inertia", "joint_range", "actuator_ctrl_range", "gravity"):
        if not np.allclose(getattr(check, f), getattr(info, f), rtol=1e-12, atol=0, equal_nan=True):
            raise ModelLoadError(f"{label}: the model written as MJCF differs from the compiled one in {f}")
    path = folder / "model.xml"
    path.write_text(text)
    _WRITTEN[_model_digest(m)] = (text, str(folder), memory)
    return m, path


def _model_digest(m: mujoco.MjModel) -> str:
    """A digest of the whole compiled model (its MJB bytes): every parameter, not only ModelInfo's."""
    import hashlib

    return hashlib.blake2b(model_to_bytes(m), digest_size=16).hexdigest()


#: digest of a model written by export_mjcf in this process -> (MJCF text, its folder, in-memory assets)
_WRITTEN: dict[str, tuple[str, str, dict[str, bytes]]] = {}


def _written_again(
    m: mujoco.MjModel,
    folder: Path,
    package_dirs: Any,
    actuators: Any,
    fuse_static: Any,
) -> Path:
    """The MJCF of a compiled model that :func:`export_mjcf` wrote before in this process (the same
    model, bit for bit: a recording's model, say), written again into ``folder``."""
    _no_model_options(package_dirs, actuators, fuse_static)
    hit = _WRITTEN.get(_model_digest(m))
    if hit is None:
        raise ModelLoadError(
            "a compiled mujoco.MjModel cannot be written back as MJCF unless this process"
            " wrote the same model before; pass the MJCF/URDF path, the built-in name or a"
            " mujoco.MjSpec"
        )
    text, old, memory = hit
    for name, data in memory.items():
        (folder / name).write_bytes(data)
        text = text.replace(str(Path(old) / name), str(folder / name))
    path = folder / "model.xml"
    path.write_text(text)
    return path


def _numbers(values: Any) -> str:
    return " ".join(repr(float(v)) for v in np.asarray(values, np.float64).reshape(-1))


def _full_precision(text: str, m: mujoco.MjModel, info: ModelInfo) -> str:
    """``text`` (MuJoCo's XML writer keeps about 7 significant digits) with the values the
    compiled model holds written exactly: inertials, joint ranges, actuator ranges, gears and
    gains, timestep and gravity. Elements are found by name (every one is named by now)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)
    ids = {
        kind: {n: i for i, n in enumerate(names)}
        for kind, names in (("body", info.body_names), ("joint", info.joint_names), ("actuator", info.actuator_names))
    }
    for option in root.iter("option"):
        option.set("timestep", repr(float(m.opt.timestep)))
        option.set("gravity", _numbers(m.opt.gravity))
    for body in root.iter("body"):
        b = ids["body"].get(body.get("name", ""))
        inertial = body.find("inertial")
        if b is None or inertial is None:
            continue
        for attr in ("fullinertia", "diaginertia"):
            inertial.attrib.pop(attr, None)
        inertial.set("mass", repr(float(m.body_mass[b])))
        inertial.set("pos", _numbers(m.body_ipos[b]))
        inertial.set("quat", _numbers(m.body_iquat[b]))
        inertial.set("diaginertia", _numbers(m.body_inertia[b]))
    for tag in ("joint", "freejoint"):
        for joint in root.iter(tag):
            j = ids["joint"].get(joint.get("name", ""))
            if j is not None and m.jnt_limited[j]:
                joint.set("range", _numbers(m.jnt_range[j]))
    section = root.find("actuator")
    for act in section if section is not None else []:
        a = ids["actuator"].get(act.get("name", ""))
        if a is None:
            continue
        if m.actuator_ctrllimited[a]:
            act.set("ctrlrange", _numbers(m.actuator_ctrlrange[a]))
        if m.actuator_forcelimited[a]:
            act.set("forcerange", _numbers(m.actuator_forcerange[a]))
        if "gear" in act.attrib:
            act.set("gear", _numbers(m.actuator_gear[a]))
        if act.tag == "general":
            for attr, values in (("gainprm", m.actuator_gainprm[a]), ("biasprm", m.actuator_biasprm[a])):
                if attr in act.attrib:
                    act.set(attr, _numbers(values))
    return ET.tostring(root, encoding="unicode")


def _absolute_assets(spec: mujoco.MjSpec, folder: Path) -> dict[str, bytes]:
    """Point every file asset of ``spec`` at an absolute path; write in-memory assets into ``folder``
    and return them (file name in ``folder`` -> bytes)."""
    base = Path(spec.modelfiledir or ".")
    memory = dict(spec.assets)
    written: dict[str, bytes] = {}
    for kind, items, subdir in (
        ("mesh", spec.meshes, spec.meshdir),
        ("hfield", spec.hfields, spec.meshdir),
        ("texture", spec.textures, spec.texturedir),
    ):
        for k, item in enumerate(items):
            file = getattr(item, "file", "")
            if not file:
                continue
            if file in memory:
                target = folder / f"{kind}{k}_{Path(file).name}"
                written[target.name] = bytes(memory[file])
                target.write_bytes(written[target.name])
                item.file = str(target)
                continue
            p = Path(file)
            if not p.is_absolute():
                p = base / (subdir or "") / p
            item.file = str(p.resolve())
    spec.meshdir = ""
    spec.texturedir = ""
    return written


def _one_line(e: BaseException) -> str:
    """MuJoCo's multi-line message (``"XML Error: ...\\nElement 'x', line 3\\n"``) on one line."""
    return " ".join(str(e).split())


def _source_path(source: str | os.PathLike) -> Path:
    """The readable, non-empty file a path-like source names (a built-in name gives its asset)."""
    text = os.fspath(source)
    path = Path(text).expanduser()
    if not path.is_file() and text in builtin_models():
        return builtin_model_path(text)
    if path.is_dir():
        try:
            inside = sorted(p.name for p in path.iterdir() if p.suffix.lower() in _SUFFIXES)[:5]
        except OSError:
            inside = []
        listed = f" (it holds {', '.join(inside)})" if inside else " (it holds no .xml or .urdf file)"
        raise ModelLoadError(f"model path {text!r} is a folder; give the MJCF or URDF file inside it{listed}")
    if not path.exists():
        if path.suffix or os.sep in text or (os.altsep and os.altsep in text):
            raise ModelLoadError(f"model file not found: {text}")
        raise ModelLoadError(
            f"{text!r} is neither a model file nor a built-in model name{closest_names_hint(text, builtin_models())}"
        )
    if not path.is_file():
        raise ModelLoadError(f"model path {text!r} is not a regular file")
    if path.stat().st_size == 0:
        raise ModelLoadError(f"model file {text!r} is empty")
    return path


def _file_format(path: Path) -> str:
    """``"MJCF"`` or ``"URDF"``, from the file's root element; raises :class:`ModelLoadError` for anything else.

    Only the prolog and the root's start tag are parsed here; MuJoCo's parser
    reports any later error, with its line.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror or e}") from None
    root = _ROOT_TAG.match(text)
    if root is None:
        suffix = path.suffix.lower()
        kind = "" if suffix in _SUFFIXES else f" (unknown file type {suffix or 'without extension'!r})"
        raise ModelLoadError(f"{path}: not an XML file{kind}; expected MJCF (.xml) or URDF (.urdf)")
    tag = root.group(1).rpartition(":")[2]
    if "<xacro:" in text:
        raise ModelLoadError(
            f"{path}: a xacro file (it has <xacro:...> elements); expand it to URDF first:"
            f" xacro {path.name} > robot.urdf"
        )
    if tag not in _FORMATS:
        raise ModelLoadError(f"{path}: root element <{tag}> is neither MJCF (<mujoco>) nor URDF (<robot>)")
    return _FORMATS[tag]


def model_info(m: mujoco.MjModel) -> ModelInfo:
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
        gravity=np.array(m.opt.gravity, dtype=np.float64),
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


#: body id :func:`sensor_frames` gives an object a frame sensor cannot read (a camera, say)
UNREADABLE = -2


def sensor_frames(m: Any) -> dict[int, tuple]:
    """Where each sensor of compiled model ``m`` reads: sensor id ->
    ``(obj body, obj local pose (7,), ref body or -1, ref local pose (7,), cutoff, objid)``.

    Local poses are pos + wxyz in the body frame; body :data:`UNREADABLE`
    marks an object type read from no body (cameras and others).
    """
    import mujoco

    obj = mujoco.mjtObj

    def frame(objtype: int, objid: int) -> tuple[int, np.ndarray]:
        if objtype == int(obj.mjOBJ_XBODY):
            return objid, np.array([0, 0, 0, 1.0, 0, 0, 0])
        if objtype == int(obj.mjOBJ_BODY):
            return objid, np.concatenate([m.body_ipos[objid], m.body_iquat[objid]])
        if objtype == int(obj.mjOBJ_SITE):
            return int(m.site_bodyid[objid]), np.concatenate([m.site_pos[objid], m.site_quat[objid]])
        if objtype == int(obj.mjOBJ_GEOM):
            return int(m.geom_bodyid[objid]), np.concatenate([m.geom_pos[objid], m.geom_quat[objid]])
        return UNREADABLE, np.zeros(7)

    out = {}
    for s in range(m.nsensor):
        ob, ol = frame(int(m.sensor_objtype[s]), int(m.sensor_objid[s]))
        rb, rl = (-1, np.zeros(7)) if m.sensor_refid[s] < 0 else frame(int(m.sensor_reftype[s]), int(m.sensor_refid[s]))
        out[s] = (ob, ol, rb, rl, float(m.sensor_cutoff[s]), int(m.sensor_objid[s]))
    return out


def model_to_bytes(m: mujoco.MjModel) -> bytes:
    """The compiled model as MuJoCo's binary format (MJB): meshes, textures and options included,
    so a recording can rebuild the model without the files it came from."""
    import mujoco

    buf = np.zeros(mujoco.mj_sizeModel(m), np.uint8)
    mujoco.mj_saveModel(m, None, buf)
    return buf.tobytes()


def model_from_bytes(data: bytes) -> mujoco.MjModel:
    """The compiled model of :func:`model_to_bytes`' output; a one-line ``ModelLoadError`` if it is not one."""
    import mujoco

    try:
        return mujoco.MjModel.from_binary_path("model.mjb", {"model.mjb": bytes(data)})
    except Exception as e:  # MuJoCo raises ValueError and others for a bad buffer
        raise ModelLoadError(
            f"the stored model is not a MuJoCo binary model (MJB): {' '.join(str(e).split())}"
        ) from None


__all__ = [
    "ActuatorSpec",
    "builtin_models",
    "builtin_model_path",
    "compile_model",
    "describe_source",
    "export_mjcf",
    "model_info",
    "model_from_bytes",
    "model_to_bytes",
    "sensor_frames",
]
