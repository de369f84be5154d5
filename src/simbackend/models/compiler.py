"""Compiling a model source, with the model options applied, into a ``mujoco.MjModel``.

The options (``package_dirs``, ``actuators``, ``fuse_static``) are
documented in :mod:`simbackend.models`; errors are one line naming the
option, or the file and the problem.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, ModelLoadError
from simbackend.models.actuators import actuator_specs, add_actuators
from simbackend.models.builtin import builtin_models
from simbackend.models.mujoco_extra import import_mujoco
from simbackend.models.packages import package_dirs_option
from simbackend.models.sources import ModelSource, file_format, source_path
from simbackend.models.urdf import prepare_urdf_spec, urdf_error_hint

if TYPE_CHECKING:
    import mujoco


def compile_model(
    source: ModelSource, *, package_dirs: Any = None, actuators: Any = None, fuse_static: bool | None = None
) -> mujoco.MjModel:
    """Compile a model source into a ``mujoco.MjModel`` (see :mod:`simbackend.models` for the options).

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
        MissingExtraError: MuJoCo is not installed (the ``mujoco`` extra).
    """
    mujoco = import_mujoco()

    if isinstance(source, mujoco.MjModel):
        no_model_options(package_dirs, actuators, fuse_static)
        return source
    spec, label, urdf = prepared_spec(source, package_dirs, actuators, fuse_static)
    return compiled(spec, label, urdf)


def no_model_options(package_dirs: Any, actuators: Any, fuse_static: Any) -> None:
    """Validate the model options given with a compiled ``MjModel``, which takes none."""
    dirs, specs = package_dirs_option(package_dirs), actuator_specs(actuators)
    check_fuse_static(fuse_static)
    given = [k for k, v in (("package_dirs", dirs), ("actuators", specs)) if v]
    given += ["fuse_static"] if fuse_static is not None else []
    if given:
        raise InvalidArgumentError(
            f"{', '.join(given)}: a compiled mujoco.MjModel takes no model options;"
            " pass the MJCF/URDF path or a mujoco.MjSpec instead"
        )


def check_fuse_static(fuse_static: Any) -> None:
    """Raise :class:`ArgumentTypeError` unless the ``fuse_static`` option is ``True``, ``False`` or ``None``."""
    if fuse_static is not None and not isinstance(fuse_static, (bool, np.bool_)):
        raise ArgumentTypeError(
            f"fuse_static: expected True, False or None, got {type(fuse_static).__name__} {fuse_static!r}"
        )


def prepared_spec(
    source: Any, package_dirs: Any, actuators: Any, fuse_static: bool | None
) -> tuple[mujoco.MjSpec, str, bool]:
    """The spec of a file, built-in name or ``MjSpec`` source with the model options applied, its label
    for messages, and whether it came from a URDF."""
    mujoco = import_mujoco()

    dirs = package_dirs_option(package_dirs)
    specs = actuator_specs(actuators)
    check_fuse_static(fuse_static)
    urdf = False
    if isinstance(source, mujoco.MjSpec):
        spec, label = source.copy(), "the MjSpec"
    elif isinstance(source, (str, os.PathLike)):
        path = source_path(source)
        label, urdf = str(path), file_format(path) == "URDF"
        try:
            spec = mujoco.MjSpec.from_file(str(path))
        except Exception as e:  # mujoco raises ValueError with the parser's (multi-line) message
            raise ModelLoadError(f"MuJoCo could not compile {label}: {one_line(e)}") from e
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


def compiled(spec: mujoco.MjSpec, label: str, urdf: bool) -> mujoco.MjModel:
    """``spec`` compiled; MuJoCo's error as a one-line :class:`ModelLoadError` naming ``label`` (with a hint
    for a URDF)."""
    try:
        return spec.compile()
    except Exception as e:  # mujoco raises ValueError with the compiler's (multi-line) message
        msg = one_line(e)
        raise ModelLoadError(f"MuJoCo could not compile {label}: {msg}{urdf_error_hint(msg) if urdf else ''}") from e


def one_line(e: BaseException) -> str:
    """MuJoCo's multi-line message (``"XML Error: ...\\nElement 'x', line 3\\n"``) on one line."""
    return " ".join(str(e).split())
