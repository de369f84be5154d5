"""URDF files as real robot descriptions ship them: every link kept, ``package://`` meshes found.

MuJoCo parses the URDF (:func:`prepare_urdf_spec` receives its
``mujoco.MjSpec``); this module changes the import defaults that lose or
invent what the description says, and resolves mesh files, which MuJoCo
cannot do for ROS URIs:

* **Static links are kept** (``fuse_static``, MuJoCo's ``fusestatic``).
  MuJoCo fuses every link welded to its parent by a ``fixed`` joint into the
  parent, so ``base_link``, ``tool0`` or a camera frame vanish from the body
  names. Here every link is a body with its URDF name and parent, unless
  ``fuse_static=True`` or the file's own ``<mujoco><compiler
  fusestatic="true"/></mujoco>`` asks for fusing.
* **No invented mass** (MuJoCo's ``inertiafromgeom``). The URDF spec gives a
  link without ``<inertial>`` zero mass; MuJoCo would compute one from its
  collision geometry at 1000 kg/m^3. Here such a link keeps zero mass (fine
  for a link welded to another; a moving one is reported, with the fix),
  unless the file's ``<mujoco><compiler inertiafromgeom=.../>`` says otherwise.
* **Inertias as written** (``balanceinertia`` stays off, MuJoCo's default):
  an inertia violating the triangle inequality is reported, naming the link,
  not silently changed.
* **Visual geometry discarded** (``discardvisual`` stays on, MuJoCo's
  default): visual meshes are often COLLADA (``.dae``), which MuJoCo cannot
  read, and add nothing to the physics. ``<mujoco><compiler
  discardvisual="false"/></mujoco>`` in the file keeps them (their meshes are
  then resolved like collision meshes).
* **Mesh files resolved** (:func:`resolve_uri`): ``package://PKG/path`` (PKG
  found as :mod:`simbackend.models.packages` describes), ``file:///abs/path``,
  absolute paths, and relative paths, taken relative to the URDF's folder (and
  the file's ``meshdir``, if it sets one). A missing file is an error naming
  the URI, the URDF and where it looked. MuJoCo reads binary STL, OBJ and MSH;
  ASCII STL files, common in older descriptions, are converted here.
"""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np

from simbackend.errors import ModelLoadError
from simbackend.models.packages import describe_search, find_package

if TYPE_CHECKING:
    import mujoco


def prepare_urdf_spec(
    spec: mujoco.MjSpec,
    path: Path,
    package_dirs: Sequence[Path],
    fuse_static: bool | None,
) -> None:
    """Apply this module's import settings to ``spec``, MuJoCo's parse of URDF file ``path`` (edited in place).

    Args:
        spec: the spec ``mujoco.MjSpec.from_file(path)`` returned.
        path: the URDF file.
        package_dirs: the validated ``package_dirs`` option.
        fuse_static: ``True``/``False`` to fuse links welded to their parent or
            not; ``None``: the file's own ``fusestatic`` setting, else ``False``.

    Raises:
        ModelLoadError: a mesh URI that cannot be resolved or read.
    """
    import mujoco

    written = _compiler_attributes(path)
    if fuse_static is None:
        fuse_static = written.get("fusestatic", "false") == "true"
    spec.compiler.fusestatic = bool(fuse_static)
    if "inertiafromgeom" not in written:
        spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
    base = path.parent / spec.compiler.meshdir
    packages: dict[str, Path | None] = {}
    converted = {}
    for mesh in spec.meshes:
        file = resolve_uri(mesh.file, path, package_dirs, base=base, packages=packages)
        mesh.file = str(file)
        binary = ascii_stl_as_binary(file)
        if binary is not None:
            converted[str(file)] = binary
    if converted:
        spec.assets = {**spec.assets, **converted}  # MuJoCo reads these bytes instead of the files


def resolve_uri(
    uri: str,
    urdf: Path,
    package_dirs: Sequence[Path],
    *,
    base: Path | None = None,
    packages: dict[str, Path | None] | None = None,
) -> Path:
    """The absolute path of mesh ``filename`` ``uri`` written in URDF file ``urdf``.

    Args:
        uri: ``package://PKG/rest``, ``file:///abs`` (percent-escapes decoded),
            an absolute path, or a path relative to ``base``.
        urdf: the URDF file (packages are searched from its folder up).
        package_dirs: the validated ``package_dirs`` option.
        base: the folder relative paths start from; default the URDF's folder.
        packages: a cache ``{PKG: folder or None}`` shared across the URIs of one file.

    Raises:
        ModelLoadError: one line naming the URI, the URDF file and where it
            looked (an unknown package, a missing file, an unsupported scheme).
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme == "file":
        path = Path(unquote(rest) if sep else uri)
        path = path if path.is_absolute() else (base or urdf.parent) / path
    elif scheme == "package":
        name, _, sub = rest.partition("/")
        cache = {} if packages is None else packages
        if name not in cache:
            cache[name] = find_package(name, urdf, package_dirs)
        if cache[name] is None:
            raise ModelLoadError(
                f"{urdf}: cannot resolve mesh {uri!r}: no package {name!r} (a folder whose package.xml names"
                f" it, or a folder so named) in: {describe_search(urdf, package_dirs)}."
                " Pass package_dirs=[the package folder, or the folder holding it]"
            )
        path = cache[name] / sub
    else:
        raise ModelLoadError(
            f"{urdf}: mesh {uri!r}: unsupported URI scheme {scheme + '://'!r} (package://, file:// or a path)"
        )
    if not path.is_file():
        raise ModelLoadError(f"{urdf}: mesh {uri!r} resolves to {path}, which does not exist{_case_hint(path)}")
    return path.resolve()


def urdf_error_hint(message: str) -> str:
    """A fix for the MuJoCo compiler errors URDF files typically hit (``""`` when none applies)."""
    if "mass and inertia of moving bodies" in message:
        return (
            "; a URDF link without <inertial> has no mass: give the moving link an <inertial>, or add"
            ' <mujoco><compiler inertiafromgeom="true"/></mujoco> to the URDF to compute one from its'
            " collision geometry"
        )
    if "A + B >= C" in message:
        return (
            '; fix the link\'s <inertia>, or add <mujoco><compiler balanceinertia="true"/></mujoco>'
            " to the URDF to let MuJoCo correct it"
        )
    return ""


def ascii_stl_as_binary(path: Path) -> bytes | None:
    """The binary STL equivalent of ASCII STL file ``path``; None for any other file.

    A file starting with ``solid`` whose size is not that of a binary STL with
    the triangle count in its header is ASCII (binary headers may start with
    ``solid`` too). The binary copy has zero normals (MuJoCo computes its own).

    Raises:
        ModelLoadError: an ASCII STL whose vertices do not form whole triangles.
    """
    if path.suffix.lower() != ".stl":
        return None
    with open(path, "rb") as f:
        head = f.read(84)
    size = path.stat().st_size
    if len(head) == 84 and size == 84 + 50 * struct.unpack("<I", head[80:84])[0]:
        return None
    if not head.lstrip().lower().startswith(b"solid"):
        return None
    verts = re.findall(r"\bvertex\s+(\S+)\s+(\S+)\s+(\S+)", path.read_text(errors="replace"), flags=re.IGNORECASE)
    try:
        tris = np.asarray(verts, dtype=np.float64).astype("<f4").reshape(-1, 3, 3)
    except ValueError:
        raise ModelLoadError(
            f"{path}: ASCII STL with {len(verts)} vertices (not whole triangles) or a vertex that is not three numbers"
        ) from None
    if not len(tris):
        raise ModelLoadError(f"{path}: ASCII STL without triangles")
    rec = np.zeros(len(tris), dtype=[("normal", "<f4", 3), ("verts", "<f4", (3, 3)), ("attr", "<u2")])
    rec["verts"] = tris
    return bytes(80) + struct.pack("<I", len(tris)) + rec.tobytes()


def _compiler_attributes(path: Path) -> dict[str, str]:
    """The attributes of the file's ``<robot><mujoco><compiler>`` element, lower-cased values."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):  # MuJoCo parsed it already; nothing written is readable here
        return {}
    compiler = root.find("mujoco/compiler")
    return {} if compiler is None else {k: v.strip().lower() for k, v in compiler.attrib.items()}


def _case_hint(path: Path) -> str:
    """``' (a file link.STL exists: names are case-sensitive)'`` when only the letter case differs."""
    try:
        same = [p.name for p in path.parent.iterdir() if p.name.lower() == path.name.lower()]
    except OSError:
        return ""
    return f" (there is {same[0]!r} in that folder: file names are case-sensitive)" if same else ""
