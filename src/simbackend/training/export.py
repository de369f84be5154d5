"""A checkpoint's policy as a file a robot's controller runs: ONNX, with the policy's I/O contract inside.

:func:`export_policy` writes, for ``--out policy.onnx``:

* ``policy.onnx``: the actor's deterministic output (the Gaussian's mean) with its observation normaliser
  folded in, so it takes the raw observation vector; input ``obs`` ``(batch, observation size)`` float32,
  output ``actions`` ``(batch, action size)`` float32, opset :data:`OPSET` (onnxruntime on a CPU runs it;
  rsl-rl's own ONNX wrapper of its actor, exported with torch's exporter). The metadata is a JSON string
  under the key :data:`METADATA_KEY` of the model's ``metadata_props`` (onnxruntime reads it as
  ``session.get_modelmeta().custom_metadata_map``).
* ``policy.json``: the same metadata, readable.
* ``policy_scene/``: the robot's scene (MJCF and its assets) the policy was trained on, which the
  deployment loop (``examples/deploy/``) loads; its ``sha256`` is in the metadata.
* ``policy.pt`` with ``torchscript=True``: the same network as TorchScript (``torch.jit.load``).

The metadata (format :data:`FORMAT`, every field in docs/deploy.md) is the task's
:meth:`~simbackend.tasks.base.Task.policy_io` (joints, default pose, actuation, action scale and clip,
control period, each observation term with its slice, frame, units and scale, commands, episode limits,
quaternion convention) plus the robot, the task and its config, the network's input and output, and where
the policy came from (this project's version, the checkpoint's file name and ``sha256``, its iteration).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from simbackend._extras import require_extra
from simbackend.errors import InvalidArgumentError

from .checkpoint import Checkpoint, build_actor, load_checkpoint

__all__ = [
    "FORMAT",
    "METADATA_KEY",
    "OPSET",
    "START_KEYFRAME",
    "ExportResult",
    "export_policy",
    "policy_metadata",
    "scene_sha256",
    "sha256_file",
]

#: the metadata's format tag; a reader refuses another
FORMAT = "simbackend.policy/1"
#: the key of the metadata in the ONNX model's ``metadata_props``
METADATA_KEY = "simbackend.policy"
#: ONNX opset of the exported graph (onnxruntime >= 1.14 runs it)
OPSET = 18
#: the network's input and output names
INPUT, OUTPUT = "obs", "actions"
#: the exported scene's keyframe that holds the task's start (``base.default_qpos``)
START_KEYFRAME = "home"


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_policy` wrote: the ONNX file, the JSON metadata beside it, the scene folder
    (``None`` without ``scene``), the TorchScript file (``None`` without ``torchscript``), the metadata."""

    onnx: Path
    json: Path
    scene: Path | None
    torchscript: Path | None
    metadata: dict


def sha256_file(path: Any) -> str:
    """The hex ``sha256`` of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def scene_sha256(folder: Any) -> str:
    """``robot.scene_sha256``: the ``sha256`` of, for each file under the scene folder in the order of its
    relative path (``/``-separated, UTF-8, sorted bytewise), that path, one zero byte and the 32 bytes of the
    file's own ``sha256`` (docs/deploy.md; examples/deploy/run_policy.py computes it the same way)."""
    folder = Path(folder)
    rel = sorted((p.relative_to(folder).as_posix().encode(), p) for p in folder.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for name, f in rel:
        h.update(name + b"\0" + bytes.fromhex(sha256_file(f)))
    return h.hexdigest()


def _start_keyframe(model_xml: Path, qpos: list) -> None:
    """Make the scene's ``home`` keyframe the task's start (``base.default_qpos``, at rest): replaced where the
    scene has one (a robot's own keyframe may stand elsewhere: Go1's at 0.278 m, the task's at 0.2965 m), added
    where it has none."""
    import xml.etree.ElementTree as ET

    tree = ET.parse(model_xml)
    root = tree.getroot()
    keyframe = root.find("keyframe")
    if keyframe is None:
        keyframe = ET.SubElement(root, "keyframe")
    key = next((k for k in keyframe.iter("key") if k.get("name") == START_KEYFRAME), None)
    if key is None:
        key = ET.SubElement(keyframe, "key", name=START_KEYFRAME)
    key.set("qpos", " ".join(repr(float(v)) for v in qpos))
    for attr in ("qvel", "act", "time", "mpos", "mquat"):  # at rest, at time 0, bodies where the model puts them
        key.attrib.pop(attr, None)
    tree.write(model_xml, encoding="unicode")


def policy_metadata(checkpoint: Any) -> tuple[dict, str]:
    """``(metadata, scene file)``: the checkpoint's policy I/O contract (the module docstring) and the path of
    the scene it was trained on (MuJoCo builds the task once, one env, to read its boundary; the values are
    the model's and the task's, not the engine's)."""
    import simbackend
    from simbackend.models.mujoco_extra import import_mujoco
    from simbackend.tasks import get_task_class, make_task

    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    config = {**ckpt.task_config, "randomization": None}
    task = make_task(ckpt.task, "mujoco", 1, config=config)
    try:
        io_contract = task.policy_io()
        if int(ckpt.data["observation_size"]) != task.observation_size:
            raise InvalidArgumentError(
                f"checkpoint: its actor takes {ckpt.data['observation_size']} observations; task {ckpt.task!r}"
                f" with its config now gives {task.observation_size}"
            )
        scene = str(get_task_class(ckpt.task).model_source(task.config))
        robot = getattr(task, "robot", None)
    finally:
        task.close()
    meta: dict[str, Any] = {"format": FORMAT}
    if robot is not None:
        desc = robot.description
        meta["robot"] = {"name": desc.name, "model": os.path.basename(str(desc.model))}
    meta.update(io_contract)
    meta["network"] = {
        "input": INPUT,
        "output": OUTPUT,
        "input_size": int(ckpt.data["observation_size"]),
        "output_size": int(ckpt.data["action_dim"]),
        "normalizer": "folded in (the input is the raw observation)",
        "output_is": "the deterministic action (the Gaussian's mean), before clipping",
    }
    meta["task"] = {"name": ckpt.task, "config": ckpt.task_config}
    meta["provenance"] = {
        "simbackend": simbackend.__version__,
        "mujoco": import_mujoco().__version__,
        "checkpoint": ckpt.path.name,
        "checkpoint_sha256": sha256_file(ckpt.path),
        "trained_on": ckpt.sim,
        "iteration": ckpt.iteration,
        "env_steps": ckpt.env_steps,
    }
    return meta, scene


def _onnx_model(actor: Any, size: int, path: Path) -> None:
    """rsl-rl's ONNX wrapper of the actor (normaliser, MLP, the distribution's mean), through torch's exporter,
    with a dynamic batch axis."""
    module = actor.as_onnx(verbose=False).eval()
    example = (torch.zeros(1, size),)
    batch = torch.export.Dim("batch")
    quiet = io.StringIO()
    # torch's exporter logs its progress and the torchvision operators it skips: not the user's business
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    with contextlib.ExitStack() as stack:
        stack.callback(exporter_log.setLevel, level)
        stack.enter_context(contextlib.redirect_stdout(quiet))
        stack.enter_context(contextlib.redirect_stderr(quiet))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore", FutureWarning)  # torch's exporter's own deprecations
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=[INPUT],
            output_names=[OUTPUT],
            opset_version=OPSET,
            dynamo=True,
            dynamic_shapes=({0: batch},),
            external_data=False,
            verbose=False,
        )


def export_policy(
    checkpoint: Any, out: Any, *, scene: bool = True, torchscript: bool = False, overwrite: bool = False
) -> ExportResult:
    """Write a checkpoint's policy as ONNX with its I/O contract (the module docstring).

    Args:
        checkpoint: a path (or a loaded :class:`~simbackend.training.Checkpoint`).
        out: the ``.onnx`` file to write; the JSON (``.json``), the scene folder (``_scene``) and the
            TorchScript file (``.pt``) take its stem.
        scene: copy the robot's scene beside it (what the deployment loop loads).
        torchscript: also write the network as TorchScript.
        overwrite: replace existing files (else a file that exists is refused, naming ``out``).

    Raises:
        InvalidArgumentError: ``out`` not ending in ``.onnx``, its folder missing, a folder, a file there
            (or beside it) without ``overwrite``; an unreadable checkpoint. ArgumentTypeError: ``out`` not a path.
    """
    require_extra("onnx", "onnxscript", purpose="exporting a policy to ONNX")
    import onnx

    from simbackend.playback.recording import check_output_path

    onnx_path = check_output_path(out, "out", (".onnx",), overwrite)  # suffix, folder, not a folder, exists
    stem = onnx_path.with_suffix("")
    json_path = stem.with_suffix(".json")
    scene_dir = stem.parent / f"{stem.name}_scene" if scene else None
    ts_path = stem.with_suffix(".pt") if torchscript else None
    if not overwrite:  # the files written beside it
        for p in (json_path, scene_dir, ts_path):
            if p is not None and p.exists():
                raise InvalidArgumentError(f"out: {str(p)!r} exists (overwrite=True replaces it)")
    source = checkpoint.path if isinstance(checkpoint, Checkpoint) else checkpoint
    if isinstance(source, (str, os.PathLike)):  # nothing written may replace the checkpoint read
        read = Path(source).resolve()
        for p in (onnx_path, json_path, ts_path):
            if p is not None and p.resolve() == read:
                raise InvalidArgumentError(f"out: {str(p)!r} would replace the checkpoint it is exported from")
        if scene_dir is not None and scene_dir.resolve() in read.parents:
            raise InvalidArgumentError(f"out: {str(scene_dir)!r} would replace the checkpoint's folder")
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    meta, scene_file = policy_metadata(ckpt)
    obs_size, act_size = int(ckpt.data["observation_size"]), int(ckpt.data["action_dim"])
    actor: Any = build_actor(ckpt.data["rsl_rl_cfg"], obs_size, act_size)
    actor.load_state_dict(ckpt.data["actor_state_dict"])
    actor.eval()

    with tempfile.TemporaryDirectory(dir=onnx_path.parent, prefix=f".{stem.name}-") as tmp_dir:
        tmp = Path(tmp_dir)
        if scene_dir is not None:  # the scene's MJCF and every file it names, paths made relative
            from simbackend.models import builtin_model_path, builtin_models
            from simbackend.models.export import portable_copy

            staged = tmp / "scene"
            staged.mkdir()
            source = builtin_model_path(scene_file) if scene_file in builtin_models() else Path(scene_file)
            written = portable_copy(source, staged)
            if meta.get("kind") == "velocity":
                _start_keyframe(written, meta["base"]["default_qpos"])
                meta["base"]["keyframe"] = START_KEYFRAME
            meta["robot"] = {
                **meta.get("robot", {}),
                "scene": f"{scene_dir.name}/{written.name}",
                "scene_sha256": scene_sha256(staged),
            }
        _onnx_model(actor, obs_size, tmp / "policy.onnx")
        model = onnx.load(str(tmp / "policy.onnx"))
        del model.metadata_props[:]
        entry = model.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps(meta)
        model.producer_name = "simbackend"
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp / "policy.onnx"))
        (tmp / "policy.json").write_text(json.dumps(meta, indent=2) + "\n")
        if ts_path is not None:  # rsl-rl's TorchScript wrapper (torch marks TorchScript deprecated; libtorch runs it)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.jit.script(actor.as_jit()).save(str(tmp / "policy.pt"))
        # everything written: move into place (a scene folder replaced whole)
        os.replace(tmp / "policy.onnx", onnx_path)
        os.replace(tmp / "policy.json", json_path)
        if ts_path is not None:
            os.replace(tmp / "policy.pt", ts_path)
        if scene_dir is not None:
            if scene_dir.exists():
                shutil.rmtree(scene_dir)
            os.replace(tmp / "scene", scene_dir)
    return ExportResult(onnx_path, json_path, scene_dir, ts_path, meta)
