"""Model sources and the model compiler every backend shares.

A model source is a path to an MJCF (``.xml``) or URDF (``.urdf``) file, a
``mujoco.MjSpec`` (copied, never modified), a compiled ``mujoco.MjModel``
(used as is), or the name of a built-in model (:func:`builtin_models`).
:func:`compile_model` turns it into a ``mujoco.MjModel``; backends build
from that model and the :class:`~simbackend.model_info.ModelInfo`
:func:`model_info` derives from it. MuJoCo's compiler reads the files, so this
package may import ``mujoco``; the rest of the engine-neutral core may not.
It imports ``mujoco`` only when a function needs it (the core imports this
package), and a missing MuJoCo raises one
:class:`~simbackend.errors.MissingExtraError` naming the ``mujoco`` extra.

Modules
-------
:mod:`~simbackend.models.builtin`
    the built-in models shipped in ``assets/``, by name
:mod:`~simbackend.models.sources`
    what a model source may be, its label, and the file a path names
:mod:`~simbackend.models.compiler`
    :func:`compile_model`: a source, with the model options, compiled
:mod:`~simbackend.models.info`
    :func:`model_info`: the engine-neutral description of a compiled model
:mod:`~simbackend.models.frames`
    :func:`sensor_frames`: where each sensor reads
:mod:`~simbackend.models.binary`
    :func:`model_to_bytes` and :func:`model_from_bytes` (MJB, for recordings)
:mod:`~simbackend.models.export`
    :func:`export_mjcf`: the compiled model written back as one MJCF file
:mod:`~simbackend.models.actuators`, :mod:`~simbackend.models.urdf`, :mod:`~simbackend.models.packages`
    the ``actuators`` option, URDF import, ``package://`` resolution
:mod:`~simbackend.models.analytic`
    hand-written kinematics of the built-in models (ground truth for tests)
:mod:`~simbackend.models.mujoco_extra`
    ``mujoco``, imported through its extra

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

# ``import X as X``: re-exported, but left out of __all__ as before
from simbackend.models.actuators import ActuatorSpec
from simbackend.models.binary import model_from_bytes, model_to_bytes
from simbackend.models.builtin import ASSETS as ASSETS
from simbackend.models.builtin import builtin_model_path, builtin_models
from simbackend.models.compiler import compile_model
from simbackend.models.export import export_mjcf
from simbackend.models.frames import UNREADABLE as UNREADABLE
from simbackend.models.frames import sensor_frames
from simbackend.models.info import model_info
from simbackend.models.sources import ModelSource as ModelSource
from simbackend.models.sources import describe_source

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
