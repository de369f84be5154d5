"""URDF files as real robot descriptions ship them: ``package://`` meshes, every link kept.

MuJoCo's compiler reads URDF, but with defaults that lose what a robot
description names and cannot follow the ROS conventions its meshes use:

* ``fusestatic``: MuJoCo fuses every link fixed to its parent into the parent,
  so ``base_link``, ``tool0`` or a sensor frame disappear from the body names.
  Here links are kept (``fuse_static=False``) unless the caller asks.
* ``package://PKG/path`` mesh URIs (ROS) are not resolved by MuJoCo. Here PKG
  is searched for (:func:`resolve_uri`), ``file://`` URIs are made paths, and
  relative paths are taken relative to the URDF file.
* ``strippath``: MuJoCo keeps only a mesh's file name, so meshes in
  subdirectories are not found. Here the resolved absolute paths are kept.

The other URDF defaults stay MuJoCo's: visual-only geometry is discarded
(``discardvisual``), and inertias are used as written (no
``balanceinertia``: a physically impossible inertia is reported, not
silently changed).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from simbackend.errors import ModelLoadError

PathLike = Union[str, os.PathLike]


def package_dirs_option(package_dirs: Union[None, PathLike, Sequence[PathLike]]) -> tuple[Path, ...]:
    """Validate the ``package_dirs`` option: a path or a sequence of paths (each must be a directory)."""
    if package_dirs is None:
        return ()
    items = [package_dirs] if isinstance(package_dirs, (str, os.PathLike)) else package_dirs
    if not isinstance(items, (list, tuple)):
        raise ModelLoadError(f"package_dirs: expected a path or a list of paths, got {type(package_dirs).__name__}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise ModelLoadError(f"package_dirs[{i}]: expected a path, got {type(item).__name__}")
        path = Path(item).expanduser()
        if not path.is_dir():
            raise ModelLoadError(f"package_dirs[{i}]: {str(item)!r} is not a directory")
        out.append(path.resolve())
    return tuple(out)


def _package_name(directory: Path) -> Optional[str]:
    """The ``<name>`` in ``directory/package.xml``, if there is one."""
    manifest = directory / "package.xml"
    if not manifest.is_file():
        return None
    try:
        name = ET.parse(manifest).getroot().findtext("name")
    except ET.ParseError:
        return None
    return name.strip() if name else None


def _find_package(name: str, roots: Iterable[Path]) -> Optional[Path]:
    """A directory that is package ``name``: named ``name``, or whose package.xml says so."""
    for root in roots:
        if root.name == name or _package_name(root) == name:
            return root
        candidate = root / name
        if candidate.is_dir():
            return candidate
        if root.is_dir():
            for child in sorted(root.iterdir()):
                if child.is_dir() and _package_name(child) == name:
                    return child
    return None


def search_roots(urdf: Path, package_dirs: Sequence[Path]) -> list[Path]:
    """Where ``package://`` packages are looked for, in order: the given ``package_dirs``,
    the URDF file's ancestor directories (nearest first), then ``ROS_PACKAGE_PATH``."""
    roots = list(package_dirs)
    roots += list(urdf.resolve().parents)
    roots += [Path(p) for p in os.environ.get("ROS_PACKAGE_PATH", "").split(os.pathsep) if p]
    return roots


def resolve_uri(uri: str, urdf: Path, package_dirs: Sequence[Path]) -> Path:
    """An absolute path for a mesh ``filename`` of ``urdf``.

    ``package://PKG/rest`` resolves against package PKG (:func:`search_roots`),
    ``file:///abs`` to ``/abs``, and a relative path against the URDF's folder.

    Raises:
        ModelLoadError: one line naming the URI, the file and where it searched.
    """
    if uri.startswith("package://"):
        rest = uri[len("package://"):]
        name, _, sub = rest.partition("/")
        roots = search_roots(urdf, package_dirs)
        package = _find_package(name, roots)
        if package is None:
            shown = ", ".join(str(r) for r in roots[:6]) + (", ..." if len(roots) > 6 else "")
            raise ModelLoadError(
                f"{urdf}: cannot resolve {uri!r}: no package {name!r} in package_dirs, the file's ancestors or"
                f" ROS_PACKAGE_PATH (searched {shown}); pass package_dirs=[...] naming its parent folder"
            )
        path = package / sub
    elif uri.startswith("file://"):
        path = Path(uri[len("file://"):])
    else:
        path = Path(uri)
        if not path.is_absolute():
            path = urdf.parent / path
    if not path.is_file():
        raise ModelLoadError(f"{urdf}: mesh {uri!r} resolves to {path}, which does not exist")
    return path.resolve()


def load_urdf_spec(path: Path, package_dirs: Sequence[Path], fuse_static: bool) -> "mujoco.MjSpec":  # noqa: F821
    """Parse ``path`` into a ``mujoco.MjSpec`` with mesh URIs resolved and links kept (see module doc)."""
    import mujoco

    try:
        tree = ET.parse(path)
    except ET.ParseError as e:
        raise ModelLoadError(f"{path}: not valid XML ({e})") from e
    root = tree.getroot()
    if root.tag != "robot":
        raise ModelLoadError(f"{path}: a URDF's root element is <robot>, got <{root.tag}>")
    for mesh in root.iter("mesh"):
        uri = mesh.get("filename")
        if uri:
            mesh.set("filename", str(resolve_uri(uri, path, package_dirs)))
    ext = root.find("mujoco")
    if ext is None:
        ext = ET.SubElement(root, "mujoco")
    compiler = ext.find("compiler")
    if compiler is None:
        compiler = ET.SubElement(ext, "compiler")
    compiler.set("strippath", "false")
    compiler.set("fusestatic", "true" if fuse_static else "false")
    text = ET.tostring(root, encoding="unicode")
    try:
        return mujoco.MjSpec.from_string(text)
    except Exception as e:
        raise ModelLoadError(f"MuJoCo could not compile {path}: {' '.join(str(e).split())}") from e
