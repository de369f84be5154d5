"""Where a URDF's ``package://PKG/...`` URIs point: finding ROS package PKG on disk.

A *package* PKG is a folder whose ``package.xml`` says ``<name>PKG</name>``
(ROS 1 and 2), or, for descriptions shipped without manifests, a folder named
PKG. It is looked for, in this order (the first match wins):

1. ``package_dirs`` (the option): each entry is a package itself, or a folder
   holding packages, searched down to :data:`CRAWL_DEPTH` levels
   (``ws/src`` finds ``ws/src/repo/my_robot``);
2. the URDF file's folder and its ancestors, nearest first, each taken as a
   package or as a folder holding packages (one level): a description inside
   its package, or next to it in a workspace, needs no option;
3. ``ROS_PACKAGE_PATH`` (ROS 1; searched like ``package_dirs``), then each
   ``AMENT_PREFIX_PATH`` prefix's ``share`` folder (ROS 2 install spaces).

Like ``rospack``, a search does not descend into a package (its subfolders
are not packages), nor into hidden folders or folders marked
``CATKIN_IGNORE``, ``COLCON_IGNORE`` or ``AMENT_IGNORE``.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

PathLike = str | os.PathLike

#: how many folder levels below a ``package_dirs`` / ``ROS_PACKAGE_PATH`` entry are searched
CRAWL_DEPTH = 4
_IGNORE_MARKERS = ("CATKIN_IGNORE", "COLCON_IGNORE", "AMENT_IGNORE")


def package_dirs_option(package_dirs: None | PathLike | Sequence[PathLike]) -> tuple[Path, ...]:
    """Validate the ``package_dirs`` option: ``None``, a path, or a list/tuple of paths.

    Returns the absolute folders. Raises :class:`ArgumentTypeError` for a value
    that is not a path, :class:`InvalidArgumentError` for a path that is not a
    folder.
    """
    if package_dirs is None:
        return ()
    items = [package_dirs] if isinstance(package_dirs, (str, os.PathLike)) else package_dirs
    if not isinstance(items, (list, tuple)):
        raise ArgumentTypeError(f"package_dirs: expected a path or a list of paths, got {type(package_dirs).__name__}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise ArgumentTypeError(f"package_dirs[{i}]: expected a path, got {type(item).__name__} {item!r}")
        path = Path(item).expanduser()
        if not path.is_dir():
            raise InvalidArgumentError(f"package_dirs[{i}]: {os.fspath(item)!r} is not a folder")
        out.append(path.resolve())
    return tuple(out)


def env_roots() -> tuple[list[Path], list[Path]]:
    """``(ROS_PACKAGE_PATH entries, AMENT_PREFIX_PATH share folders)`` from the environment."""

    def split(var: str) -> list[Path]:
        return [Path(p) for p in os.environ.get(var, "").split(os.pathsep) if p]

    return split("ROS_PACKAGE_PATH"), [p / "share" for p in split("AMENT_PREFIX_PATH")]


def find_package(name: str, urdf: Path, package_dirs: Sequence[Path]) -> Path | None:
    """The folder of package ``name`` for a URI in ``urdf``, in the module's search order; None if absent."""
    ros, ament = env_roots()
    searches = [(d, CRAWL_DEPTH) for d in package_dirs]
    searches += [(d, 1) for d in _folders_up(urdf)]
    searches += [(d, CRAWL_DEPTH) for d in ros] + [(d, 1) for d in ament]
    for root, depth in searches:
        found = _search(root, name, depth)
        if found is not None:
            return found
    return None


def describe_search(urdf: Path, package_dirs: Sequence[Path]) -> str:
    """Where :func:`find_package` looked, for an error message (one line)."""
    ros, ament = env_roots()

    def listed(paths: Sequence[Path], none: str) -> str:
        return "[" + ", ".join(str(p) for p in paths) + "]" if paths else none

    return (
        f"package_dirs {listed(package_dirs, '(none given)')}; the URDF's folder {urdf.resolve().parent}"
        f" and its ancestors; ROS_PACKAGE_PATH {listed(ros, '(unset)')};"
        f" AMENT_PREFIX_PATH shares {listed(ament, '(unset)')}"
    )


def _folders_up(urdf: Path) -> list[Path]:
    """The URDF's folder, then its ancestors up to the filesystem root."""
    folder = urdf.resolve().parent
    return [folder, *folder.parents]


def _manifest_name(folder: Path) -> str | None:
    """The ``<name>`` in ``folder/package.xml``; None without a readable manifest."""
    try:
        name = ET.parse(folder / "package.xml").getroot().findtext("name")
    except (OSError, ET.ParseError):
        return None
    return name.strip() if name else None


def _search(root: Path, name: str, depth: int) -> Path | None:
    """Breadth-first search of ``root`` and up to ``depth`` levels below it for package ``name``.

    At each level a folder named ``name`` wins (found without reading any
    manifest), then a folder whose manifest names it.
    """
    level = [root]
    for remaining in range(depth, -1, -1):
        named = [folder for folder in level if folder.name == name]
        if named:
            return named[0]
        below: list[Path] = []
        for folder in level:
            manifest = _manifest_name(folder)
            if manifest == name:
                return folder
            if remaining == 0 or manifest is not None or any((folder / m).exists() for m in _IGNORE_MARKERS):
                continue  # a package's subfolders are not packages; ignored trees are skipped
            try:
                below += sorted(c for c in folder.iterdir() if not c.name.startswith(".") and c.is_dir())
            except OSError:  # unreadable or vanished folder: nothing to find there
                continue
        level = below
    return None
