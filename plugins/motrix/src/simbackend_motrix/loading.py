"""Loading a model into Motrix: MuJoCo's compile, the MJCF written back, Motrix's compile, checked.

Motrix's MJCF compiler skips what it does not support with a log line
("These fields are not support yet, will be ignored"), not an error. The
loader reads those lines (Motrix writes them to file descriptor 2) and sorts
each ignored ``element@attribute``:

* **notes**: what does not change the dynamics the contract describes
  (visual and compiler settings, sizes of MuJoCo's buffers) or what Motrix
  replaces by its own scheme (the integrator); :attr:`MotrixEngine.notes`
  lists them;
* **rejected**: everything else. The load fails with a ``ModelLoadError``
  naming the elements and their lines, instead of simulating another model.
"""

from __future__ import annotations

import os
import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np

from simbackend.errors import ModelLoadError

#: elements whose ignored attributes do not touch the simulated dynamics
_HARMLESS_ELEMENTS = frozenset(
    {
        "compiler",
        "size",
        "visual",
        "statistic",
        "texture",
        "material",
        "light",
        "camera",
        "skin",
        "custom",
        "numeric",
        "text",
        "tuple",
        "key",
    }
)
#: single attributes Motrix ignores that are notes, not errors, and why
_SOLVER_NOTE = "Motrix solves constraints with its own solver (MuJoCo's solver settings are ignored)"
_NOTED = {
    "option@integrator": "Motrix integrates with its own scheme (MuJoCo's integrator option is ignored)",
    "general@input": "the actuator input kind is implied by gain and bias in Motrix",
    **{
        f"option@{a}": "Motrix's contact friction is its own rigid Coulomb cone (MuJoCo's friction cone and"
        " impratio are ignored; Motrix stands and holds robots as MuJoCo's elliptic cone at impratio 10 does:"
        " docs/sim-to-sim.md)"
        for a in ("cone", "impratio")
    },
    **{
        f"option@{a}": _SOLVER_NOTE
        for a in ("solver", "iterations", "tolerance", "ls_iterations", "ls_tolerance", "jacobian")
    },
}
#: attributes that hold no physics on any element (user data)
_HARMLESS_ATTRIBUTES = frozenset({"user"})
#: single attributes that hold no physics: a mesh's content type (its file is written with its extension)
_HARMLESS = frozenset({"mesh@content_type"})
_IGNORED = re.compile(r"^\s*([A-Za-z_]+)(?:@([A-Za-z_]+))?\s+at line:\s*(\d+)", re.MULTILINE)


def load(source: Any, model_options: dict) -> tuple[Any, Any, list[str]]:
    """``(mujoco model, Motrix model, notes)`` for a model source; raises ``ModelLoadError``."""
    import motrixsim as mx

    from simbackend.models import export_mjcf

    with tempfile.TemporaryDirectory(prefix="simbackend-motrix-") as tmp:
        m, path = export_mjcf(source, tmp, **model_options)
        _strip_visual_attributes(path)
        _fold_joint_force_ranges(m, path, _label(source))
        log, mm = _captured_fd2(lambda: mx.load_model(str(path)))
        if isinstance(mm, (KeyboardInterrupt, SystemExit)):
            raise mm
        if isinstance(mm, BaseException):
            raise ModelLoadError(f"Motrix could not compile {_label(source)}: {' '.join(str(mm).split())}") from None
    notes, rejected = [], []
    for element, attribute, line in _IGNORED.findall(log):
        key = f"{element}@{attribute}" if attribute else element
        if key in _NOTED:
            note = _NOTED[key]
            if note not in notes:
                notes.append(note)
        elif element in _HARMLESS_ELEMENTS or attribute in _HARMLESS_ATTRIBUTES or key in _HARMLESS:
            continue
        else:
            rejected.append(
                f"<{element}{' ' + attribute if attribute else ''}> (line {line} of the MJCF written"
                " from the compiled model)"
            )
    if rejected:
        shown = ", ".join(dict.fromkeys(rejected))
        raise ModelLoadError(f"{_label(source)}: Motrix cannot represent {shown}; it would simulate another model")
    return m, mm, notes


#: what differs where a colliding height field loads (``native_hfield``, the default; False refuses it),
#: measured with motrixsim 0.10.1
#: (plugins/motrix/README.md, "Height fields"; the plugin's tests check both halves): Motrix loads
#: MuJoCo's surface exactly (rows from -y, columns along +x, MuJoCo's triangle diagonal, scale and
#: offset: its rays agree with mj_ray to 1e-6 m), but collides it otherwise: one to four contacts per
#: geom pair where MuJoCo makes 10 to 50, so that a box, cylinder or capsule at rest on a *flat* height
#: field sinks 2 to 25 mm (MuJoCo: 0.1 mm; Motrix on a plane: 0.4 mm), a lying capsule can stand up,
#: and a box over a stair's riser sinks up to 67 mm; a sphere on a flat one rests as on a plane
HFIELD_NOTE = (
    "height fields collide through Motrix's own height-field collision, not MuJoCo's: on a flat one boxes rest"
    " 5-6 mm deep and rock, on risers up to 67 mm; on rough ground boxes rest within 3 mm of MuJoCo's rest"
    " (plugins/motrix/README.md)"
)


def check_height_fields(m: Any, geom_names: tuple[str, ...], label: str, native: bool) -> list[str]:
    """Notes for the model's colliding height-field geoms (world or body; ``geom_names`` as ``ModelInfo``
    names them): :data:`HFIELD_NOTE` where ``native`` (the engine option ``native_hfield``, the default);
    otherwise they are refused in one line. Visual-only ones (``contype`` and ``conaffinity`` 0) collide
    with nothing in either engine and pass."""
    from simbackend.models.mujoco_extra import import_mujoco

    hfield = np.asarray(m.geom_type) == int(import_mujoco().mjtGeom.mjGEOM_HFIELD)
    collides = (np.asarray(m.geom_contype) != 0) | (np.asarray(m.geom_conaffinity) != 0)
    found = np.flatnonzero(hfield & collides)
    if not found.size:
        return []
    if native:
        return [HFIELD_NOTE]
    first = geom_names[int(found[0])]
    more = f" and {found.size - 1} more" if found.size > 1 else ""
    raise ModelLoadError(
        f"{label}: Motrix collides height fields unlike MuJoCo (geom {first!r}{more}: boxes, capsules and"
        " cylinders rest 2-25 mm deep in a flat one, stair edges are missed), and motrix={'native_hfield':"
        " False} refuses it"
    )


def _label(source: Any) -> str:
    from simbackend.models import describe_source

    return describe_source(source)


def _fold_joint_force_ranges(m: Any, path: Path, label: str) -> None:
    """Give each joint's ``actuatorfrcrange`` (a cap on its actuators' total force: what MuJoCo's URDF reader
    makes of ``<limit effort>``) to the one actuator on the joint, as its force range through its gear.

    Motrix reads the attribute without a log line but caps nothing (the conformance clause
    ``contract_tests/test_mapping.py`` measured a servo past it); with one actuator on the joint the cap
    is that actuator's force range, intersected with its own. A joint capped under two or more actuators
    is refused, naming it: Motrix has no cap on a sum."""
    from simbackend.models import model_info
    from simbackend.models.mujoco_extra import import_mujoco

    capped = np.flatnonzero(np.asarray(m.jnt_actfrclimited, bool))
    if not capped.size:
        return
    info = model_info(m)
    tree = ET.parse(path)
    root = tree.getroot()
    joints = {e.get("name"): e for e in root.iter("joint") if e.get("name")}
    actuators = {e.get("name"): e for section in root.findall("actuator") for e in section if e.get("name")}
    on_joint = int(import_mujoco().mjtTrn.mjTRN_JOINT)
    for j in capped:
        name = info.joint_names[j]
        acts = [a for a in range(m.nu) if int(m.actuator_trntype[a]) == on_joint and int(m.actuator_trnid[a, 0]) == j]
        if len(acts) > 1:
            raise ModelLoadError(
                f"{label}: joint {name!r} caps the total force of its {len(acts)} actuators (actuatorfrcrange);"
                " Motrix caps each actuator, not their sum"
            )
        lo, hi = (float(v) for v in m.jnt_actfrcrange[j])
        if acts and float(m.actuator_gear[acts[0], 0]) != 0:
            a = acts[0]
            g = float(m.actuator_gear[a, 0])
            cap = sorted((lo / g, hi / g))
            if m.actuator_forcelimited[a]:
                cap = [max(cap[0], float(m.actuator_forcerange[a, 0])), min(cap[1], float(m.actuator_forcerange[a, 1]))]
            element = actuators[info.actuator_names[a]]
            element.set("forcelimited", "true")
            element.set("forcerange", f"{cap[0]!r} {cap[1]!r}")
        for attribute in ("actuatorfrcrange", "actuatorfrclimited"):
            joints[name].attrib.pop(attribute, None)
    for element in root.iter("joint"):  # a default class's: every capped joint's cap is its actuator's now
        for attribute in ("actuatorfrcrange", "actuatorfrclimited"):
            element.attrib.pop(attribute, None)
    tree.write(path)


def _strip_visual_attributes(path: Path) -> None:
    """Drop MuJoCo 4's texture ``colorspace="auto"``, which Motrix's parser refuses (pictures only), and the
    ``<sensor>`` section: the engine serves sensors from its frames (``simbackend.sensors``), never from
    Motrix's, and Motrix refuses sensors that read the world body (a robot's up-vector sensor does)."""
    tree = ET.parse(path)
    changed = False
    for tex in tree.getroot().iter("texture"):
        if tex.get("colorspace") == "auto":
            del tex.attrib["colorspace"]
            changed = True
    root = tree.getroot()
    for section in root.findall("sensor"):
        root.remove(section)
        changed = True
    if changed:
        tree.write(path)


def _captured_fd2(fn: Any) -> tuple[str, Any]:
    """Run ``fn`` with file descriptor 2 captured: ``(what it wrote, its result or its exception)``."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 - Motrix raises RuntimeError, or pyo3's PanicException
            result = e
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        log = f.read().decode("utf-8", errors="replace")
    return re.sub(r"\x1b\[[0-9;]*m", "", log), result
