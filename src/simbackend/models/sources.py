"""Model sources: what a source may be, its label, and the model file a path-like source names (with its format)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Union

from simbackend.errors import ModelLoadError, closest_names_hint
from simbackend.models.builtin import builtin_model_path, builtin_models
from simbackend.models.mujoco_extra import import_mujoco

if TYPE_CHECKING:
    import mujoco

ModelSource = Union[str, os.PathLike, "mujoco.MjSpec", "mujoco.MjModel"]

#: root element of each model file format MuJoCo reads
_FORMATS = {"mujoco": "MJCF", "robot": "URDF"}
_SUFFIXES = (".xml", ".mjcf", ".urdf")
#: an XML prolog (declaration, comments, DOCTYPE, processing instructions) and the root's start tag
_ROOT_TAG = re.compile(r"(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>)*<([A-Za-z_][\w:.-]*)", re.DOTALL)


def describe_source(source: ModelSource) -> str:
    """A short human-readable label of a model source (for logs and tables)."""
    mujoco = import_mujoco()

    if isinstance(source, mujoco.MjSpec):
        return f"MjSpec({source.modelname or 'unnamed'})"
    if isinstance(source, mujoco.MjModel):
        return "MjModel"
    return str(source)


def source_path(source: str | os.PathLike) -> Path:
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


def file_format(path: Path) -> str:
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
