"""The engine interface: everything a physics engine implements to sit behind the contract.

:class:`~simbackend.contract.SimBackend` is the front end users call. It
validates and converts every input, resolves names, normalises quaternions,
keeps time, controls, pending forces and per-env parameters, applies the
contract's divergence rule, notifies observers, and reaches the physics only
through the members of :class:`Engine` below. A backend is one ``Engine``
subclass registered under the entry-point group ``simbackend.backends``:

=======================  ====================================================================
member                   job
=======================  ====================================================================
``name``, ``dtype``,     identity, the real dtype the engine takes and gives, its option block
``options``, ``devices`` (``make_backend(..., <name>={...})``) and the device types it runs on
``distributions``        the engine library's distributions (their versions: ``simbackend info``)
``__init__(build)``      build ``num_envs`` copies of the compiled model (:class:`EngineBuild`)
``capabilities``         what it supports (:class:`~simbackend.capabilities.Capabilities`)
``read_state``           ``(qpos (N, nq), qvel (N, nv))``, current
``write_state``          write some envs' state; getters current, warm starts cleared
``write_state_masked``   the same for the envs of a device mask, from N rows (default: the
                         mask read to the host, then ``write_state``; a GPU engine overrides it)
``step``                 advance every env ``nsteps`` substeps with ``ctrl`` and body forces;
                         report the envs the engine itself failed
``revert``               put some envs back where the last ``step`` found them
``body_pose``,           frame kinematics: body and site poses, body-origin velocities,
``body_velocity``,       world frame
``site_pose``
``site_jacobian``        world-frame Jacobian of a site's point (optional)
``sensor``               one MuJoCo sensor's reading (default: computed from the frames)
``contact_forces``       net contact force on some bodies in the last substep (optional)
``read_params``,         per-env model fields for domain randomization (optional)
``write_params``
``state_width``,         snapshots of the engine's own state (optional)
``save_state``,
``check_saved``,
``restore_state``
``cast_rays``            rays against every env's collision geoms (optional)
``model_fields``         the model as the engine holds it, for the parity suite (optional)
``notes``                what the conversion approximates (default: nothing)
``close``                release the engine's resources
=======================  ====================================================================

Optional members have defaults that raise
:class:`~simbackend.errors.UnsupportedFeatureError`; the front end calls one
only where ``capabilities`` declares the feature, so an engine that declares
it absent never sees the call.

Conventions at this boundary (the front end guarantees them on the way in and
relies on them on the way out):

* **Reals** are torch tensors in :attr:`Engine.dtype` on the engine's device,
  finite and contiguous. States written (``qpos``, ``qvel``) are also within
  the divergence rule's bounds; controls and forces are only finite (the
  conformance suite sends values as large as ``1e30``, which an engine must
  integrate or report as diverged, never crash on). Outputs may be
  numpy arrays or tensors of any real dtype on the device; they may be views
  of the engine's memory, valid until its next call: the front end copies
  every output it gives a caller (float32, on the device).
* **Ids** are int64 host numpy arrays (they index host-side tables), validated;
  ``env_ids`` passed to writes are sorted and distinct.
* **Masks** over envs are ``(N,)`` bool torch tensors on the engine's device;
  an engine may return numpy or a tensor. An engine on a GPU never reads a
  device value back to the host in ``read_state``, ``write_state``, ``step``,
  ``revert`` or the frame members: the front end's checks are device
  reductions too, so the whole step stays asynchronous.
* **Frames**: world Z up; quaternions wxyz; linear velocity of a body is the
  velocity of its frame's origin, angular velocity in the world frame;
  ``qpos``/``qvel`` in MuJoCo's layout for the model (free joint: position,
  wxyz quaternion / world linear velocity, body-local angular velocity). The
  world body (id 0) is at the origin, at rest.
* **Divergence** is the front end's job: it applies the contract's rule
  (:mod:`simbackend.divergence`) to ``read_state`` after every ``step``, adds
  the failures ``step`` reports, and calls :meth:`Engine.revert` for those envs.
  If ``step`` raises (Ctrl-C included), the front end reverts every env.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import torch

from simbackend.capabilities import Capabilities
from simbackend.errors import UnsupportedFeatureError
from simbackend.model_info import ModelInfo
from simbackend.options import BackendOptions, EngineOption

if TYPE_CHECKING:  # pragma: no cover
    from simbackend.sensors import FrameSensors

__all__ = ["BodyForces", "Engine", "EngineBuild", "ENGINE_MEMBERS", "OPTIONAL_MEMBERS"]


@dataclass(frozen=True)
class EngineBuild:
    """What an engine is built from (the front end prepares it).

    Attributes:
        info: the compiled model's description; ``info.compiled`` is the
            ``mujoco.MjModel`` every engine builds from (names, order and
            kinematics then agree by construction), with the common options
            that change the model already applied (``timestep``).
        source: the model source as the user gave it (a path, a built-in name,
            a ``mujoco.MjSpec`` or ``MjModel``), for engines with a compiler of
            their own (they write it out with
            :func:`simbackend.models.export_mjcf`).
        num_envs: N, the number of parallel copies.
        device: where tensors live (checked against :attr:`Engine.devices`).
        options: the validated construction options: the common ones
            (``nthread``, ``solver_iterations``, ``timestep``, the model options)
            and ``options.engine``, this engine's block with defaults filled in.
        seed: the backend's seed, for engines with random streams of their own.
    """

    info: ModelInfo
    source: Any
    num_envs: int
    device: torch.device
    options: BackendOptions
    seed: int = 0


class BodyForces(NamedTuple):
    """External forces that act in every substep of one ``step`` call.

    Attributes:
        bodies: ``(B,)`` int64 host array of distinct body ids, sorted, never
            the world body.
        force: ``(N, B, 3)`` force at each body frame's **origin**, world
            frame, N (engine dtype, on the device).
        torque: ``(N, B, 3)`` torque, world frame, N m.
    """

    bodies: np.ndarray
    force: torch.Tensor
    torque: torch.Tensor


class Engine(abc.ABC):
    """One physics engine simulating ``num_envs`` copies of one compiled model.

    Subclass it, call ``super().__init__(build)`` first in ``__init__``, and
    implement the abstract members; the optional ones only where the
    capabilities declare the feature. ``self.info``, ``self.num_envs`` and
    ``self.device`` are set by this base class.
    """

    #: registered name (lower case); also the key of this engine's option block
    name: ClassVar[str] = "abstract"
    #: dtype of the real tensors the engine takes (``float32`` or ``float64``)
    dtype: ClassVar[torch.dtype] = torch.float64
    #: the keys of this engine's option block (``make_backend(..., <name>={...})``)
    options: ClassVar[Mapping[str, EngineOption]] = {}
    #: device types the engine runs on (``"cpu"``, ``"cuda"``)
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    #: the Python distributions (pip names) of the engine it drives, the engine's own first: ``simbackend
    #: info`` reports their versions (``("mujoco-warp", "warp-lang")``); none: the backend's own distribution's
    distributions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, build: EngineBuild) -> None:
        self.info: ModelInfo = build.info
        self.num_envs: int = build.num_envs
        self.device: torch.device = build.device
        self._frame_sensors: FrameSensors | None = None

    # ------------------------------------------------------------------
    # what it is
    # ------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """The features this engine supports on its device (see :class:`~simbackend.capabilities.Capabilities`)."""

    @property
    def notes(self) -> tuple[str, ...]:
        """What the engine's conversion of the model approximates, one line each (default: nothing)."""
        return ()

    @property
    def env_engines(self) -> tuple[str, ...]:
        """The registered name of the engine simulating each env, in env order (default: this engine's, N
        times; an engine composing several engines names each env's)."""
        return (self.name,) * self.num_envs

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def read_state(self) -> tuple[Any, Any]:
        """``(qpos (N, nq), qvel (N, nv))`` of every env, current; may be views (see the module docstring)."""

    @abc.abstractmethod
    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write the state of envs ``env_ids`` (sorted, distinct host ids); the others stay bit-identical.

        ``qpos (n, nq)`` and ``qvel (n, nv)`` are validated (finite, within the
        divergence rule's bounds, unit quaternions). Afterwards every read
        describes the new state without a step, and the named envs' solver
        warm starts are cleared, so a replay from the same state reproduces the
        same trajectory. Controls and time are the front end's.
        """

    def write_state_masked(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """:meth:`write_state` of the envs ``mask`` (``(N,)`` bool on the device) selects, from ``qpos
        (N, nq)`` and ``qvel (N, nv)`` (the other rows are not inputs: they may hold anything).

        The default reads the mask to the host and calls :meth:`write_state`; an engine on a GPU
        overrides it with a masked write (``torch.where``) that reads nothing back.
        """
        ids = np.flatnonzero(mask.cpu().numpy())
        if ids.size:
            rows = torch.as_tensor(ids, device=qpos.device)
            self.write_state(ids, qpos[rows].contiguous(), qvel[rows].contiguous())

    # ------------------------------------------------------------------
    # stepping
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> Any:
        """Advance every env ``nsteps`` substeps; return the envs the engine itself failed.

        Args:
            ctrl: ``(N, nu)`` finite controls with MuJoCo's meaning per actuator;
                the engine clamps them to the ctrl ranges.
            nsteps: substeps, >= 1 (a long call should stay interruptible, e.g.
                by stepping in chunks).
            forces: external forces acting in every substep, or ``None``.

        Returns:
            ``None`` when the engine reports no failure, else an ``(N,)`` bool
            mask (numpy, or a tensor on the device) of the envs the engine
            reported as failed (MuJoCo's bad-state warnings, a PhysX step it
            could not integrate). The front end adds the contract's divergence
            rule on :meth:`read_state` and calls :meth:`revert`.

        Before it changes anything the engine keeps every env's pre-call state
        (everything it integrates, warm starts and delegated-force memory
        included), for :meth:`revert`; a step interrupted before that has
        changed nothing, and the revert that follows must change nothing
        either. After the call, reads describe the reached state (no quantity
        one substep behind).
        """

    @abc.abstractmethod
    def revert(self, envs: torch.Tensor) -> None:
        """Put envs ``envs`` (``(N,)`` bool) back in the state the last :meth:`step` call found them in.

        Called after a step (diverged envs, envs whose input was held) and when
        ``step`` raised (every env). The other envs are untouched; reads are
        current afterwards, and every read of a reverted env (its contact
        forces included) is what it was before that step.
        """

    # ------------------------------------------------------------------
    # frame kinematics
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def body_pose(self, ids: np.ndarray) -> tuple[Any, Any]:
        """``(pos (N, B, 3), quat (N, B, 4) wxyz)`` of body frames ``ids``, world frame."""

    @abc.abstractmethod
    def body_velocity(self, ids: np.ndarray) -> tuple[Any, Any]:
        """``(lin (N, B, 3), ang (N, B, 3))``: velocity of each body frame's origin and angular velocity, world frame."""

    @abc.abstractmethod
    def site_pose(self, ids: np.ndarray) -> tuple[Any, Any]:
        """``(pos (N, S, 3), quat (N, S, 4) wxyz)`` of sites ``ids``, world frame."""

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[Any, Any]:
        """``(jacp (N, 3, k), jacr (N, 3, k))``: world-frame Jacobian of site ``site_id``'s point,
        qvel columns ``cols`` (``capabilities.site_jacobians``)."""
        raise UnsupportedFeatureError(self.name, "site_jacobians")

    def contact_forces(self, body_ids: np.ndarray) -> Any:
        """``(N, B, 3)`` net contact force on bodies ``body_ids``, world frame, N: the sum over the
        contacts touching each body's geoms of the force the contact exerted on that body, in the last
        substep of the last :meth:`step` (``capabilities.contact_forces``; called only on an engine
        built with ``options.contact_sensing``). Rows of envs written (:meth:`write_state`,
        :meth:`write_state_masked`, :meth:`restore_state`) since their last step are zero; envs
        :meth:`revert` put back read what they read before that step.
        Body forces the caller applied are not contact forces, nor are equality constraints."""
        raise UnsupportedFeatureError(self.name, "contact_forces")

    def sensor(self, sensor_id: int) -> Any:
        """``(N, dim)`` reading of sensor ``sensor_id`` (a type in ``capabilities.sensor_types``).

        The default computes the core types (:data:`~simbackend.capabilities.CORE_SENSOR_TYPES`)
        from :meth:`body_pose`, :meth:`body_velocity` and :meth:`read_state`, with MuJoCo's
        meaning (:mod:`simbackend.sensors`); an engine that evaluates MuJoCo's sensors itself
        overrides it.
        """
        if self._frame_sensors is None:
            from simbackend.sensors import FrameSensors

            self._frame_sensors = FrameSensors(self.info)
        return self._frame_sensors.read(self, sensor_id)

    # ------------------------------------------------------------------
    # per-env model fields (domain randomization)
    # ------------------------------------------------------------------
    def read_params(self, field: str) -> np.ndarray | None:
        """``(N, ...)`` float64: the engine's current per-env values of model field ``field``
        (names in :data:`simbackend.randomization.FIELDS`), or ``None`` when every env holds the
        model's value (the default)."""
        return None

    def write_params(self, env_ids: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Write per-env model fields: ``values[field]`` ``(n, ...)`` float64 rows for sorted ``env_ids``.

        Only fields of the terms ``capabilities.domain_randomization`` declares
        arrive; rows are complete (untouched entries hold their current values)
        and validated (positive masses and inertias, non-negative friction,
        ...). Derived model constants (MuJoCo's ``mj_setConst``) are the
        engine's to recompute. An engine that must refuse a value raises before
        it writes anything.
        """
        raise UnsupportedFeatureError(self.name, "domain_randomization")

    # ------------------------------------------------------------------
    # snapshots (capabilities.snapshot_restore)
    # ------------------------------------------------------------------
    @property
    def state_width(self) -> int:
        """Columns of the engine's block of a snapshot row."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    def save_state(self, env_ids: np.ndarray) -> Any:
        """``(n, state_width)`` float64 (numpy or tensor): everything the engine needs so that a
        restored env continues as this one would (its integration state, warm starts, the memory
        of delegated forces), for host ``env_ids`` in the order given."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[Any, Any]:
        """``(qpos (n, nq), qvel (n, nv))`` held by saved rows ``(n, state_width)`` (finite float64),
        for the front end's state checks; raises a contract error naming ``env_ids`` for rows the
        engine cannot restore (e.g. values beyond its float range). Writes nothing."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        """Restore checked rows into sorted host ``env_ids``; reads are current afterwards. Per-env
        model fields are restored before (:meth:`write_params`)."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    # ------------------------------------------------------------------
    # rays, model read-back, resources
    # ------------------------------------------------------------------
    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> Any:
        """``(N, R)`` distance along each ray to the first collision geom it hits, negative for a miss.

        ``origins``/``directions`` ``(N, R, 3)`` world frame, directions unit;
        ``exclude_body``: a body whose geoms the rays ignore, or -1
        (``capabilities.ray_casting``).
        """
        raise UnsupportedFeatureError(self.name, "ray_casting")

    def model_fields(self) -> dict[str, np.ndarray]:
        """The physical model as the engine holds it (see :meth:`simbackend.contract.SimBackend.model_fields`)."""
        raise UnsupportedFeatureError(self.name, "model_fields")

    def close(self) -> None:  # noqa: B027 (optional: an engine holding nothing keeps this)
        """Release the engine's resources (called once; nothing is called afterwards)."""


#: every member a backend may implement, in the order "Writing a backend" documents them
ENGINE_MEMBERS = (
    "name",
    "dtype",
    "options",
    "devices",
    "distributions",
    "__init__",
    "capabilities",
    "notes",
    "env_engines",
    "read_state",
    "write_state",
    "write_state_masked",
    "step",
    "revert",
    "body_pose",
    "body_velocity",
    "site_pose",
    "site_jacobian",
    "contact_forces",
    "sensor",
    "read_params",
    "write_params",
    "state_width",
    "save_state",
    "check_saved",
    "restore_state",
    "cast_rays",
    "model_fields",
    "close",
)
#: the members with a default (the rest must be implemented)
OPTIONAL_MEMBERS = (
    "dtype",
    "options",
    "devices",
    "distributions",
    "notes",
    "env_engines",
    "write_state_masked",
    "site_jacobian",
    "contact_forces",
    "sensor",
    "read_params",
    "write_params",
    "state_width",
    "save_state",
    "check_saved",
    "restore_state",
    "cast_rays",
    "model_fields",
    "close",
)
