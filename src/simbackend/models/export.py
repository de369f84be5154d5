"""Writing a compiled model back as one MJCF file, for engines with their own MJCF compiler."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simbackend.errors import InvalidArgumentError, ModelLoadError
from simbackend.model_info import ModelInfo
from simbackend.models.binary import model_to_bytes
from simbackend.models.compiler import compiled, no_model_options, one_line, prepared_spec
from simbackend.models.info import model_info
from simbackend.models.mujoco_extra import import_mujoco
from simbackend.models.sources import ModelSource

if TYPE_CHECKING:
    import mujoco


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
    mujoco = import_mujoco()

    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidArgumentError(f"folder: {str(folder)!r} is not an existing folder")
    if isinstance(source, mujoco.MjModel):
        return source, _written_again(source, folder, package_dirs, actuators, fuse_static)
    spec, label, urdf = prepared_spec(source, package_dirs, actuators, fuse_static)
    m = compiled(spec, label, urdf)
    out = spec.copy()
    try:
        if out.compiler.fusestatic:
            out.fuse_static()
            out.compiler.fusestatic = False
    except Exception as e:
        raise ModelLoadError(f"{label}: cannot write the compiled model as MJCF: {one_line(e)}") from e
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
        raise ModelLoadError(f"{label}: cannot write the compiled model as MJCF: {one_line(e)}") from e
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
        raise ModelLoadError(f"{label}: the model written as MJCF does not compile again: {one_line(e)}") from e
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
    no_model_options(package_dirs, actuators, fuse_static)
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


#: the compiler attributes that move asset files; a portable copy resolves them and drops them
_ASSET_DIRS = ("assetdir", "meshdir", "texturedir")


def portable_copy(model_file: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Copy an MJCF file and every file it references (meshes, height fields, textures, skins) into ``folder``,
    as ``folder/model.xml`` and ``folder/assets/``, the references rewritten relative to it: a scene that loads
    on another machine (an exported policy's, :mod:`simbackend.training.export`).

    Raises:
        ModelLoadError: a referenced file that does not exist, or a copy that does not compile to a model
            with the same bodies, joints, actuators and sensors.
    """
    import shutil
    import xml.etree.ElementTree as ET

    mujoco = import_mujoco()
    source, folder = Path(model_file), Path(folder)
    tree = ET.parse(source)
    root = tree.getroot()
    dirs: dict[str, str] = {}
    for compiler in root.iter("compiler"):
        for key in _ASSET_DIRS:
            if compiler.get(key) is not None:
                dirs[key] = compiler.attrib.pop(key)
    assets = folder / "assets"
    taken: dict[Path, str] = {}
    for element in root.iter():
        ref = element.get("file")
        if ref is None or element.tag == "include":
            continue
        sub = dirs.get("texturedir" if element.tag == "texture" else "meshdir", dirs.get("assetdir", ""))
        path = Path(ref) if os.path.isabs(ref) else source.parent / sub / ref
        if not path.is_file():
            raise ModelLoadError(f"{source}: its {element.tag} file {ref!r} does not exist ({path})")
        path = path.resolve()
        if path not in taken:
            name, k = path.name, 1
            while name in taken.values():
                name, k = f"{path.stem}_{k}{path.suffix}", k + 1
            taken[path] = name
            assets.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, assets / name)
        element.set("file", f"assets/{taken[path]}")
    out = folder / "model.xml"
    tree.write(out, encoding="unicode")
    try:
        before, after = mujoco.MjModel.from_xml_path(str(source)), mujoco.MjModel.from_xml_path(str(out))
    except Exception as e:
        raise ModelLoadError(f"{source}: its portable copy does not compile: {one_line(e)}") from e
    counts = ("nbody", "njnt", "nu", "nsensor", "ngeom", "nmesh", "nhfield")
    if any(getattr(before, c) != getattr(after, c) for c in counts):
        raise ModelLoadError(f"{source}: its portable copy compiles to another model")
    return out
