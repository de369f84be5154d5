"""Exported policies (ONNX with the metadata of :mod:`.export`) evaluated on any engine: ``eval --policy``.

:func:`load_policy` reads an ONNX policy and its metadata (inside the file, or a JSON beside it) and checks
the metadata's own consistency; :meth:`ExportedPolicy.bind` checks it against a task built on a robot and
gives the callable the evaluation runs. A policy from another framework (mjlab, Isaac Lab) is evaluated
the same way once its metadata is written (docs/deploy.md lists the fields); where its joint order, default
pose, action scale or observation scales differ from the task's, the binding converts between them:

* the policy's input is assembled from the task's observation terms in the metadata's order, each in the
  policy's joint order, ``joint_pos`` relative to the policy's default pose, ``last_action`` in the policy's
  own scale, each times its ``scale``;
* the policy's action (clipped to its ``action.clip``) gives joint targets ``offset + scale * action``, which
  become the task's normalised action ``(target - default) / task scale`` (the task is built with a larger
  ``action_scale`` where the policy reaches further than the task's default would).

What cannot be converted is refused in one line naming the field: another task kind, joint names or
counts, control period, actuation kind or gains, an observation term the task does not make or makes in
another size, a network whose input or output size is not the metadata's.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend import checks
from simbackend._extras import require_extra
from simbackend.errors import InvalidArgumentError, SimBackendError, closest_names_hint

from .export import FORMAT, METADATA_KEY

__all__ = ["ExportedPolicy", "load_policy"]

#: relative tolerance of the gains' check (the metadata's are decimal text of float32 values)
GAIN_RTOL = 1e-4
#: the largest action scale (rad) a foreign policy may make the task take
MAX_TASK_SCALE = 10.0


def _fail(field: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"policy metadata {field}: {message}")


def _floats(meta: Mapping, key: str, n: int) -> np.ndarray:
    """A list of ``n`` numbers at dotted ``key`` of ``meta`` (``None`` for an unknown value: NaN)."""
    node: Any = meta
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise _fail(key, "missing")
        node = node[part]
    if not isinstance(node, (list, tuple)) or len(node) != n:
        got = len(node) if isinstance(node, (list, tuple)) else type(node).__name__
        raise _fail(key, f"expected {n} numbers (one per joint), got {got}")
    try:
        return np.array([math.nan if v is None else float(v) for v in node], dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(key, f"expected numbers, got {node!r}") from None


def _section(meta: Mapping, key: str) -> Mapping:
    node = meta.get(key)
    if not isinstance(node, Mapping):
        raise _fail(key, "missing (expected an object)")
    return node


def _first_difference(mine: np.ndarray, theirs: np.ndarray, atol: float) -> int | None:
    """The first index where ``mine`` and ``theirs`` differ beyond relative :data:`GAIN_RTOL` and ``atol`` (``inf``
    equals ``inf``), or ``None``."""
    bad = np.flatnonzero(~np.isclose(mine, theirs, rtol=GAIN_RTOL, atol=atol))
    return int(bad[0]) if bad.size else None


def _optional_section(meta: Mapping, key: str) -> Mapping:
    """``meta[key]``: an object, or ``{}`` where it is left out (``null`` too)."""
    node = meta.get(key)
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise _fail(key, f"expected an object, got {checks.short_repr(node)}")
    return node


def _real(value: Any, key: str, **bounds: Any) -> float:
    """A finite number at metadata field ``key`` (:func:`simbackend.checks.real`'s bounds)."""
    return float(checks.real(value, f"policy metadata {key}", **bounds))


#: the velocity task's config fields an exported policy's ``episode`` and ``commands`` give (``eval --policy``
#: builds the task with them, as examples/deploy/run_policy.py judges and commands by them)
HONOURED = {
    "episode.length": "episode_length",
    "episode.max_tilt": "max_tilt",
    "episode.success_error": "success_error",
    "episode.contact_threshold": "contact_threshold",
    "commands.resample_time": "resample_time",
}


class ExportedPolicy:
    """An ONNX policy with its metadata (:func:`load_policy`); it evaluates like a checkpoint
    (:func:`~simbackend.training.evaluate`): ``task``, ``task_config``, ``sim`` (the training engine),
    ``iteration``, ``env_steps``, ``path``.

    Attributes:
        metadata: the metadata (docs/deploy.md).
        session: the onnxruntime session (CPU, one thread).
    """

    def __init__(self, path: Path, metadata: dict, session: Any, task: str, task_config: dict):
        self.path = path
        self.metadata = metadata
        self.session = session
        self.task = task
        self._task_config = task_config
        prov = _optional_section(metadata, "provenance")
        self.sim = str(prov.get("trained_on") or "unknown")
        self.iteration = checks.integer(prov.get("iteration") or 0, "policy metadata provenance.iteration", minimum=0)
        self.env_steps = checks.integer(prov.get("env_steps") or 0, "policy metadata provenance.env_steps", minimum=0)
        self.delegated: tuple[str, ...] = ()
        self.names = list(metadata["joints"]["names"]) if metadata.get("kind") == "velocity" else []
        self.input_name = metadata["network"]["input"]

    @property
    def task_config(self) -> dict:
        return dict(self._task_config)

    @property
    def eval_episodes(self) -> int:
        """Episodes per seed when the evaluation is not told (the training default's)."""
        return 32

    def run(self, obs: np.ndarray) -> np.ndarray:
        """The network on ``(n, input_size)`` float32 observations: ``(n, output_size)`` actions."""
        return self.session.run(None, {self.input_name: np.ascontiguousarray(obs, dtype=np.float32)})[0]

    def bind(self, task: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        """Check the metadata against ``task`` (refusals name the field) and give ``policy(flat obs) -> task
        action``; raises :class:`ActionScaleNeeded` where the task must be built with a larger ``action_scale``."""
        return _Binding(self, task)


class ActionScaleNeeded(Exception):
    """The task's action scale cannot reach the policy's targets: build it with ``action_scale`` ``scale``."""

    def __init__(self, scale: float):
        super().__init__(scale)
        self.scale = scale


class _Binding:
    """An exported policy bound to a task: input assembly and action conversion (the module docstring)."""

    def __init__(self, policy: ExportedPolicy, task: Any):
        meta = policy.metadata
        self.policy = policy
        io = task.policy_io()
        if meta.get("kind") != io["kind"]:
            raise _fail("kind", f"{meta.get('kind')!r}, task {task.name!r} is {io['kind']!r}")
        period = _real(_section(meta, "control").get("period"), "control.period", minimum=0.0, above=True)
        if not math.isclose(period, task.control_dt, rel_tol=1e-9, abs_tol=1e-12):
            raise _fail(
                "control.period",
                f"the policy runs every {period:g} s; task {task.name!r} every {task.control_dt:g} s (physics"
                f" step {task.backend.physics_dt:g} s x decimation {task.config.decimation})",
            )
        if io["kind"] != "velocity":  # another task: its own layout exactly, nothing to convert
            self._same_layout(meta, io)
            self.identity = True
            return
        self.identity = self._joints(meta, io) & self._actuation(meta, io) & self._terms(meta, io, task)
        self._robot_fields(meta, io, task)
        self._actions(meta, io, task)
        self._perm_dev, self._inverse_dev = self.perm.to(task.device), self.inverse.to(task.device)

    def _same_layout(self, meta: Mapping, io: Mapping) -> None:
        theirs = [(t["name"], t["size"]) for t in io["observations"]]
        for i, term in enumerate(meta.get("observations") or []):
            mine = (term.get("name"), term.get("size"))
            if (
                i >= len(theirs)
                or mine != theirs[i]
                or _real(term.get("scale", 1.0), f"observations[{i}].scale") != 1.0
            ):
                raise _fail(f"observations[{i}]", f"{mine}; the task's terms (name, size) are {theirs}, unscaled")
        size = checks.integer(_section(meta, "action").get("size"), "policy metadata action.size", minimum=1)
        if size != io["action"]["size"]:
            raise _fail("action.size", f"{size}; the task takes {io['action']['size']}")

    # -- checks -------------------------------------------------------------------------------------
    def _joints(self, meta: Mapping, io: Mapping) -> bool:
        mine, theirs = list(self.policy.names), list(io["joints"]["names"])
        if len(mine) != len(theirs):
            raise _fail("joints.names", f"{len(mine)} joints; the robot's policy joints are {len(theirs)}: {theirs}")
        missing = [n for n in mine if n not in theirs]
        if missing:
            raise _fail(
                "joints.names",
                f"the robot has no policy joint {missing[0]!r}{closest_names_hint(missing[0], theirs)}",
            )
        #: ``perm[i]``: the task's column of the policy's joint ``i``
        self.perm = torch.tensor([theirs.index(n) for n in mine], dtype=torch.int64)
        self.inverse = torch.argsort(self.perm)
        return mine == theirs

    def _actuation(self, meta: Mapping, io: Mapping) -> bool:
        act, theirs = _section(meta, "actuation"), io["actuation"]
        if act.get("kind") != theirs["kind"]:
            raise _fail("actuation.kind", f"{act.get('kind')!r}; the robot's joints are driven by {theirs['kind']!r}")
        k = len(self.policy.names)
        perm = self.perm.numpy()
        for key in ("kp", "kd"):
            given = _floats(meta, f"actuation.{key}", k)
            robot = np.asarray(theirs[key], dtype=np.float64)[perm]
            i = _first_difference(given, robot, 1e-9)
            if i is not None:
                raise _fail(
                    f"actuation.{key}",
                    f"joint {self.policy.names[i]!r} has {given[i]:g}, the robot's is {robot[i]:g}"
                    " (a robot description with the policy's gains evaluates it)",
                )
        return True

    def _robot_fields(self, meta: Mapping, io: Mapping, task: Any) -> None:
        """The fields the task takes from the robot, not from the file: where given, they must be the robot's
        (``base.default_qpos``: the start; ``actuation.effort_limit``; ``episode.min_base_height`` and
        ``episode.termination_bodies``: the fall rules)."""
        base, episode = _optional_section(meta, "base"), _optional_section(meta, "episode")
        if base.get("default_qpos") is not None:
            theirs = np.asarray(io["base"]["default_qpos"], dtype=np.float64)
            mine = _floats(meta, "base.default_qpos", theirs.size)
            i = _first_difference(mine, theirs, 1e-6)
            if i is not None:
                raise _fail(
                    "base.default_qpos",
                    f"value {i} is {mine[i]:g}, the task starts at {theirs[i]:g} (the robot's default pose; a robot"
                    " description with the policy's evaluates it)",
                )
        act = _optional_section(meta, "actuation")
        if act.get("effort_limit") is not None:
            k = len(self.policy.names)
            theirs = np.asarray([math.inf if v is None else v for v in io["actuation"]["effort_limit"]])[
                self.perm.numpy()
            ]
            mine = _floats(meta, "actuation.effort_limit", k)
            mine = np.where(np.isnan(mine), math.inf, mine)
            i = _first_difference(mine, theirs, 1e-9)
            if i is not None:
                raise _fail(
                    "actuation.effort_limit",
                    f"joint {self.policy.names[i]!r} has {mine[i]:g}, the robot's is {theirs[i]:g}"
                    " (a robot description with the policy's limits evaluates it)",
                )
        if episode.get("min_base_height") is not None:
            mine_z = _real(episode["min_base_height"], "episode.min_base_height")
            if not math.isclose(mine_z, io["episode"]["min_base_height"], rel_tol=GAIN_RTOL, abs_tol=1e-6):
                raise _fail(
                    "episode.min_base_height",
                    f"{mine_z:g} m; the task's fall height is {io['episode']['min_base_height']:g} m (its min_height"
                    " times the robot's default base height)",
                )
        if episode.get("termination_bodies") is not None:
            given = episode["termination_bodies"]
            theirs_b = list(task.robot.description.termination_bodies)  # the robot's, on any engine
            if not isinstance(given, list) or sorted(map(str, given)) != sorted(theirs_b):
                raise _fail(
                    "episode.termination_bodies",
                    f"{checks.short_repr(given)}; the robot's are {theirs_b} (a robot description with the policy's"
                    " evaluates it)",
                )

    def _terms(self, meta: Mapping, io: Mapping, task: Any) -> bool:
        terms = meta.get("observations")
        if not isinstance(terms, list) or not terms:
            raise _fail("observations", "expected a list of terms")
        dims = {t["name"]: t for t in io["observations"]}
        self.terms = []
        identity = True
        for i, term in enumerate(terms):
            name = term.get("name") if isinstance(term, Mapping) else None
            if name not in dims:
                raise _fail(
                    f"observations[{i}].name",
                    f"task {task.name!r} makes no term {name!r}{closest_names_hint(str(name), dims)}; it makes {list(dims)}",
                )
            size = term["size"]  # a positive integer (_check_network)
            if size != dims[name]["size"]:
                raise _fail(f"observations[{i}].size", f"{size} for {name!r}; the task's is {dims[name]['size']}")
            if name == "height_scan" and "points" in term:
                try:
                    mine = np.asarray(term["points"], dtype=np.float64)
                except (TypeError, ValueError):
                    mine = np.zeros(0)
                theirs = np.asarray(dims[name]["points"])
                if mine.shape != theirs.shape or not np.allclose(mine, theirs, atol=1e-6):
                    raise _fail(
                        f"observations[{i}].points", "the scan's grid is not the task's (scan_size, scan_resolution)"
                    )
            scale = _real(term.get("scale", 1.0), f"observations[{i}].scale")
            start = dims[name]["start"]
            self.terms.append((name, start, size, scale))
            identity &= scale == 1.0
        identity &= [t[0] for t in self.terms] == [t["name"] for t in io["observations"]]
        return identity

    def _actions(self, meta: Mapping, io: Mapping, task: Any) -> None:
        k = len(self.policy.names)
        perm = self.perm.numpy()
        action = _section(meta, "action")
        clip = action.get("clip")
        bad_clip = _fail(
            "action.clip", f"expected [low, high], two finite numbers with low < high, or null, got {clip!r}"
        )
        if clip is not None and (not isinstance(clip, (list, tuple)) or len(clip) != 2):
            raise bad_clip
        try:
            self.clip = None if clip is None else (_real(clip[0], "action.clip"), _real(clip[1], "action.clip"))
        except SimBackendError:
            raise bad_clip from None
        if self.clip is not None and not self.clip[0] < self.clip[1]:
            raise bad_clip
        scale = _floats(meta, "action.scale", k)
        offset = _floats(meta, "action.offset", k)
        #: what ``joint_pos`` is relative to: ``joints.default`` (the policy's default pose), else its offset
        joint_ref = _floats(meta, "joints.default", k) if "default" in meta["joints"] else offset
        if not np.isfinite(joint_ref).all():
            raise _fail("joints.default", f"expected finite numbers, got {joint_ref.tolist()}")
        if not (np.isfinite(scale).all() and (scale > 0).all()):
            raise _fail("action.scale", f"expected positive numbers, got {scale.tolist()}")
        if not np.isfinite(offset).all():
            raise _fail("action.offset", f"expected finite numbers, got {offset.tolist()}")
        task_scale = np.asarray(io["action"]["scale"], dtype=np.float64)[perm]
        task_default = np.asarray(io["action"]["offset"], dtype=np.float64)[perm]
        same = (
            np.allclose(scale, task_scale, rtol=1e-6, atol=0)
            and np.allclose(offset, task_default, atol=1e-6)
            and np.allclose(joint_ref, task_default, atol=1e-6)
        )
        self.identity = bool(self.identity and same and self.clip == (-1.0, 1.0))
        if self.identity:
            return
        lo, hi = np.asarray(io["joints"]["low"], dtype=float)[perm], np.asarray(io["joints"]["high"], dtype=float)[perm]
        if self.clip is not None:  # the targets the policy can ask for
            t_lo, t_hi = offset + scale * self.clip[0], offset + scale * self.clip[1]
        else:  # unclipped: any target within the joint's range
            t_lo, t_hi = np.where(np.isfinite(lo), lo, offset - scale), np.where(np.isfinite(hi), hi, offset + scale)
        reach = np.maximum(task_default - t_lo, t_hi - task_default)
        if (reach > task_scale * (1 + 1e-6)).any():
            needed = float(np.max(reach))
            if needed > MAX_TASK_SCALE or not hasattr(task.config, "action_scale"):
                raise _fail(
                    "action.scale", f"the policy's targets reach {needed:.3g} rad from the robot's default pose"
                )
            raise ActionScaleNeeded(needed)
        dev = task.device
        self._scale = torch.as_tensor(scale, dtype=torch.float32, device=dev)
        self._offset = torch.as_tensor(offset, dtype=torch.float32, device=dev)
        self._joint_ref = torch.as_tensor(joint_ref, dtype=torch.float32, device=dev)
        self._task_scale = torch.as_tensor(task_scale, dtype=torch.float32, device=dev)
        self._task_default = torch.as_tensor(task_default, dtype=torch.float32, device=dev)

    # -- the policy on the task's observations -------------------------------------------------------
    def _input(self, flat: torch.Tensor) -> torch.Tensor:
        perm = self._perm_dev
        parts = []
        for name, start, size, scale in self.terms:
            v = flat[:, start : start + size]
            if name in ("joint_pos", "joint_vel", "last_action"):
                v = v[:, perm]
            if name == "joint_pos":  # relative to the policy's default pose (joints.default)
                v = v + self._task_default - self._joint_ref
            elif name == "last_action":  # the task's action as the policy's
                v = (self._task_default + self._task_scale * v - self._offset) / self._scale
            parts.append(v * scale if scale != 1.0 else v)
        return torch.cat(parts, dim=1)

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        x = flat if self.identity else self._input(flat)
        out = torch.from_numpy(self.policy.run(x.detach().cpu().numpy())).to(flat.device)
        if self.identity:
            return out
        if self.clip is not None:
            out = out.clamp(*self.clip)
        target = self._offset + self._scale * out
        return ((target - self._task_default) / self._task_scale)[:, self._inverse_dev]


def _check_network(meta: Mapping, session: Any) -> None:
    net = _section(meta, "network")
    inputs, outputs = session.get_inputs(), session.get_outputs()
    names = [i.name for i in inputs]
    if net.get("input") not in names or len(inputs) != 1:
        raise _fail("network.input", f"{net.get('input')!r}; the ONNX graph takes {names} (one input expected)")
    for key, node in (("input", inputs[0]), ("output", outputs[0])):
        if node.type != "tensor(float)":  # what the evaluation feeds and reads: float32
            raise _fail(
                f"network.{key}", f"the ONNX graph's {node.name!r} is {node.type}; expected tensor(float) (float32)"
            )
        size = node.shape[-1] if node.shape else None
        if len(node.shape or ()) != 2 or not isinstance(size, int) or size != net.get(f"{key}_size"):
            raise _fail(
                f"network.{key}_size",
                f"{net.get(f'{key}_size')!r}; the ONNX graph's {node.name!r} has shape {node.shape}, expected"
                " (batch, size)",
            )
    terms = meta.get("observations")
    if not isinstance(terms, list) or not all(isinstance(t, Mapping) for t in terms):
        raise _fail("observations", "expected a list of terms")
    start = 0
    for i, t in enumerate(terms):
        if not isinstance(t.get("size"), int) or t["size"] < 1:
            raise _fail(f"observations[{i}].size", f"expected a positive integer, got {t.get('size')!r}")
        if t.get("start", start) != start:
            raise _fail(f"observations[{i}].start", f"{t.get('start')!r}; the terms before it end at {start}")
        start += t["size"]
    if start != net["input_size"]:
        raise _fail("observations", f"the terms give {start} values; the network takes {net['input_size']}")
    if meta.get("kind") != "velocity":
        if _section(meta, "action").get("size") != net["output_size"]:
            raise _fail(
                "action.size", f"{meta['action'].get('size')!r}; the network gives {net['output_size']} actions"
            )
        return
    joints = _section(meta, "joints").get("names")
    if not isinstance(joints, list) or not all(isinstance(n, str) for n in joints) or len(set(joints)) != len(joints):
        raise _fail("joints.names", "expected a list of distinct joint names")
    if len(joints) != net["output_size"]:
        raise _fail("joints.names", f"{len(joints)} joints; the network gives {net['output_size']} actions")


def load_policy(path: Any, *, task: str | None = None, robot: str | None = None) -> ExportedPolicy:
    """Read an exported ONNX policy and its metadata (the JSON beside it, ``policy.json`` for ``policy.onnx``,
    wins over the copy inside the file).

    Args:
        path: the ``.onnx`` file.
        task: the task to evaluate it on (default: the metadata's ``task.name``, else ``"velocity"`` for a
            ``kind: velocity`` policy).
        robot: the robot of a velocity policy (default: the metadata's ``task.config.robot``, else
            ``robot.name``).

    Raises:
        InvalidArgumentError: no such file, not an ONNX model, metadata missing or inconsistent (one line
            naming the field).
    """
    require_extra("onnxruntime", purpose="running an exported policy")
    import onnxruntime as ort

    if not isinstance(path, (str, os.PathLike)) or not Path(path).is_file():
        raise InvalidArgumentError(f"policy: no such file {path!r}")
    p = Path(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise InvalidArgumentError(
            f"policy: {str(p)!r} is not an ONNX model onnxruntime runs ({type(e).__name__})"
        ) from e
    beside = p.with_suffix(".json")
    text = beside.read_text() if beside.is_file() else session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    if text is None:
        raise InvalidArgumentError(
            f"policy: {str(p)!r} has no metadata (no {beside.name} beside it, no {METADATA_KEY!r} entry inside);"
            " docs/deploy.md lists the fields"
        )
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(f"policy: its metadata is not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _fail("format", f"expected {FORMAT!r}, got {meta.get('format') if isinstance(meta, dict) else meta!r}")
    _check_network(meta, session)
    name, config = _task_config(meta, task, robot)
    return ExportedPolicy(p, meta, session, name, config)


def _task_config(meta: Mapping, task: str | None, robot: str | None) -> tuple[str, dict]:
    """The task an exported policy is evaluated on and its config: ``task.config``, the robot, and the fields of
    the file the task takes (:data:`HONOURED`, ``episode.min_base_height``, ``commands.ranges``); each checked,
    a bad one named."""
    from simbackend.tasks import get_task_class

    given = _optional_section(meta, "task")
    described = _optional_section(meta, "robot")
    name = task or given.get("name") or ("velocity" if meta.get("kind") == "velocity" else None)
    if name is None:
        raise _fail("task.name", "missing; give the task to evaluate on (--task)")
    try:
        cls = get_task_class(name)
    except SimBackendError as e:
        if task is not None:
            raise
        raise _fail("task.name", str(e).removeprefix("task: ")) from None
    raw = given.get("config")
    if raw is not None and not isinstance(raw, Mapping):
        raise _fail("task.config", f"expected an object, got {checks.short_repr(raw)}")
    config = dict(raw or {}) if given.get("name", name) == name else {}
    robot = robot or config.get("robot") or described.get("name")
    if robot is not None:
        config["robot"] = robot
    decimation = _section(meta, "control").get("decimation")
    if "decimation" not in config and isinstance(decimation, int) and decimation > 0:
        config["decimation"] = decimation
    if meta.get("kind") == "velocity":
        honoured = _honoured(meta)
        min_height = config.get("min_height", getattr(cls.config_class, "min_height", None))
        if isinstance(min_height, float) and math.isclose(
            honoured.get("min_height", math.nan), min_height, rel_tol=1e-6
        ):
            del honoured["min_height"]  # the same fall height, given as float32 text
        config.update(honoured)
    config_class: Any = cls.config_class
    try:
        config_class.from_dict(config)
    except SimBackendError as e:
        raise _fail("task.config", str(e).removeprefix("config: ").removeprefix("config.")) from None
    return name, config


def _honoured(meta: Mapping) -> dict:
    """A velocity policy's ``episode`` and ``commands`` fields as the task's config (where given)."""
    out: dict[str, Any] = {}
    for key, field in HONOURED.items():
        section, part = key.split(".")
        value = _optional_section(meta, section).get(part)
        if value is None:
            continue
        if field == "episode_length":
            out[field] = checks.integer(value, f"policy metadata {key}", minimum=1)
        else:
            out[field] = _real(value, key, minimum=0.0, above=field != "contact_threshold")
    ranges = _optional_section(meta, "commands").get("ranges")
    if ranges is not None:
        try:
            pairs = [(_real(lo, "commands.ranges"), _real(hi, "commands.ranges")) for lo, hi in ranges]
        except (SimBackendError, TypeError, ValueError):
            pairs = []
        if len(pairs) != 3 or any(lo > hi for lo, hi in pairs):
            raise _fail("commands.ranges", f"expected three [low, high] pairs, got {checks.short_repr(ranges)}")
        out["command_range"] = pairs
    height = _optional_section(meta, "episode").get("min_base_height")
    default = _optional_section(meta, "base").get("default_qpos")
    if height is not None and isinstance(default, list) and len(default) >= 3:
        z = _real(default[2], "base.default_qpos", minimum=0.0, above=True)
        out["min_height"] = _real(height, "episode.min_base_height", minimum=0.0) / z
    return out
