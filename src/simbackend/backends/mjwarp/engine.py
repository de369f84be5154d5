"""The MuJoCo Warp engine: ``mujoco_warp`` ``Model``/``Data`` with one world per env.

MuJoCo Warp compiles the same MJCF with MuJoCo's compiler and runs MuJoCo's
pipeline as warp kernels, on a CUDA GPU or on warp's CPU device. Design points
(see docs/engines.md, "The MuJoCo Warp backend"):

* **Zero-copy state.** ``qpos``, ``qvel``, ``ctrl``, ``xfrc_applied`` and every
  derived array are torch views of the warp arrays (``wp.to_torch``) on the
  engine's device; ``read_state`` returns the live views (the front end copies).
  Reals are float32, MuJoCo Warp's precision.
* **No host synchronisation** in ``step``, ``write_state`` or the getters:
  clamping, body-force shifts, the pre-call copy for ``revert`` and the masked
  restore are device-side torch/warp operations. On CUDA, ``step`` replays a
  CUDA graph of one substep (captured at the first call, recaptured after
  model fields change); on the CPU it launches the kernels directly.
* **Derived quantities on demand**, as in the MuJoCo engine: a call that changes
  the state marks them stale, and the first getter that needs one runs
  ``mujoco_warp.forward`` for every world (forward writes no state: the warm
  start is written only by the integrator).
* **Divergence**: the front end applies the contract's rule on the state rows
  (a NaN state is caught by it). MuJoCo Warp's contact and constraint buffers
  (``nconmax``, ``njmax`` per world) are fixed: a step that needs more drops
  contacts or constraint rows. They are sized for the model lying on the ground
  and, with a margin, for what a MuJoCo probe of it made (:func:`buffer_sizes`:
  dropped upright, on its sides and upside down under random controls); the
  ``mjwarp`` option block overrides them. Every step reads MuJoCo Warp's
  per-world overflow flags: the envs whose buffers overflowed are reported as
  failed (``info["diverged"]``, their state kept), never stepped on a
  truncated contact set. On the CPU a warning names
  the option and a value that fits (on a GPU nothing is read back in ``step``).
* **Per-env model fields** (domain randomization) are model arrays given a
  leading world dimension at construction (``put_model(batch_sizes=...)``);
  derived constants are recomputed by ``mujoco_warp.set_const``, as the MuJoCo
  engine's ``mj_setConst``.
* **Snapshots** are MuJoCo's integration state (``mjSTATE_INTEGRATION``),
  read and written by ``mujoco_warp.get_state``/``set_state``, float32 values
  stored exactly in the float64 rows.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

import mujoco
import numpy as np
import torch

from simbackend.backends.mujoco.pipeline import (
    ALL_SENSOR_TYPES,
    DR_CAPABILITIES,
    DR_FIELDS,
    SETCONST_FIELDS,
    ActuatorTables,
    apply_options,
    compiled_model_fields,
    dr_index,
    fold_disabled_gravity,
)
from simbackend.backends.mujoco.rays import ALPHA, RayGeoms, transparent_collision
from simbackend.capabilities import Capabilities
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import InvalidArgumentError, ModelLoadError
from simbackend.math import cross, quat_mul
from simbackend.options import EngineOption, check_bool, check_choice, check_int, check_positive_float

from .warp_env import import_warp

wp, mjw = import_warp()

_INTEGRATORS = {"euler": "mjINT_EULER", "implicitfast": "mjINT_IMPLICITFAST", "rk4": "mjINT_RK4"}
_SOLVERS = {"cg": "mjSOL_CG", "newton": "mjSOL_NEWTON"}
#: model arrays set_const writes from the randomized fields: batched with them, so that each world keeps its own
_DERIVED = ("body_subtreemass", "body_invweight0", "dof_invweight0", "tendon_invweight0", "actuator_acc0")
_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)
#: MuJoCo Warp's per-world overflow flags (``Data.overflow``, ``OverflowType``) that mean a buffer this
#: engine sizes was too small (its contacts or constraint rows dropped): nefc > njmax, the constraint
#: Jacobian's non-zeros, broadphase pairs, narrowphase and CCD contacts beyond naconmax. The others
#: (height-field contacts per pair, EPA's horizon, solver iterations) are limits MuJoCo itself has.
_OVERFLOW_NJMAX = int(mjw.OverflowType.NEFC | mjw.OverflowType.NJMAX_NNZ)
_OVERFLOW_NCONMAX = int(mjw.OverflowType.BROADPHASE | mjw.OverflowType.NARROWPHASE | mjw.OverflowType.CCD)
#: the buffer sizes MuJoCo Warp rounds to (16, 24, 32, 48, 64, 96, ...) and the smallest it picks itself
_SIZES = tuple(int(v) for v in (2 + np.arange(40) % 2) * 2 ** (np.arange(40) // 2 + 3))
_MIN_NCONMAX, _MIN_NJMAX = 48, 64
#: the probe's margin over the most contacts and constraint rows it saw
PROBE_MARGIN = 2.0
#: mujoco_warp Data arrays holding the integration state (mjSTATE_INTEGRATION but the plugin state, which
#: mujoco_warp does not keep)
_INTEGRATION_ARRAYS = (
    "time", "qpos", "qvel", "act", "history", "qacc_warmstart", "ctrl", "qfrc_applied", "xfrc_applied",
    "eq_active", "mocap_pos", "mocap_quat", "userdata", "plastic",
)  # fmt: skip


class BufferOverflowWarning(RuntimeWarning):
    """A step needed more contacts or constraint rows than MuJoCo Warp's buffers hold (those envs are
    reported as diverged); the message names the ``mjwarp`` option and a value that fits."""


def _check_optional_int(value: Any, argument: str) -> int | None:
    return None if value is None else check_int(value, argument, minimum=1)


class MJWarpEngine(Engine):
    """MuJoCo Warp: every env one world of a ``mujoco_warp`` ``Data``, float32, on CPU or CUDA.

    Options: the common ones (``solver_iterations``, ``timestep``, the model
    options; ``nthread`` is not used: warp's CPU device runs the kernels) and the
    block ``mjwarp={...}`` with ``integrator`` (euler, implicitfast, rk4),
    ``solver`` (cg, newton), ``tolerance``, ``nconmax`` and ``njmax`` (contacts
    and constraint rows per world; ``None``: sized from a MuJoCo probe of the
    model, :func:`buffer_sizes`) and ``graph`` (capture ``step`` in a CUDA graph on a GPU).
    ``device="cpu"`` runs on warp's CPU device, ``"cuda[:i]"`` on that GPU.
    """

    name = "mjwarp"
    dtype = torch.float32
    devices = ("cpu", "cuda")
    distributions = ("mujoco-warp", "warp-lang")
    options = {
        "integrator": EngineOption(None, check_choice(*_INTEGRATORS), "numerical integrator (model's if unset)"),
        "solver": EngineOption(None, check_choice(*_SOLVERS), "constraint solver (model's if unset)"),
        "tolerance": EngineOption(None, check_positive_float, "solver tolerance (model's if unset)"),
        "nconmax": EngineOption(None, _check_optional_int, "contacts per world (probed from the model if unset)"),
        "njmax": EngineOption(None, _check_optional_int, "constraint rows per world (probed if unset)"),
        "graph": EngineOption(True, check_bool, "replay step as a CUDA graph on a GPU"),
    }

    def __init__(self, build: EngineBuild):
        super().__init__(build)
        n = self.num_envs
        opts = build.options
        e = opts.engine
        mjm = self.model = copy.copy(build.info.compiled)
        apply_options(mjm, opts, _INTEGRATORS, _SOLVERS)
        fold_disabled_gravity(mjm)  # as the MuJoCo engine: the gravity field is what is applied
        own, clear = transparent_collision(mjm)  # rays see transparent collision geoms (see .rays)
        mjm.geom_rgba[own, 3] = ALPHA
        mjm.mat_rgba[clear, 3] = ALPHA
        dev = build.device
        self.wp_device = wp.get_device("cpu" if dev.type == "cpu" else f"cuda:{dev.index or 0}")
        # a randomized centre of mass moves a body's inertial frame off its frame: never assume they coincide
        mjm.body_sameframe[:] = 0
        batched = {f for f in DR_FIELDS.values() if not f.startswith("opt.")} | set(_DERIVED)
        batched |= {"actuator_gainprm", "actuator_biasprm", "actuator_forcerange"}
        announce = not _compiled_before(mjm)
        t0 = time.perf_counter()
        if announce:
            print(
                f"[simbackend] mjwarp: compiling MuJoCo Warp kernels for this model on {self.wp_device}"
                f" (once per model; cached in {wp.config.kernel_cache_dir})",
                file=sys.stderr,
                flush=True,
            )
        problem = _unsupported(mjm)
        if problem:
            raise ModelLoadError(
                f"the mjwarp backend cannot build this model: {problem}; MuJoCo Warp has no support for it"
            )
        with wp.ScopedDevice(self.wp_device):
            try:
                self.m = mjw.put_model(mjm, batch_sizes={name: n for name in batched})
            except (NotImplementedError, ValueError) as err:
                raise ModelLoadError(
                    f"the mjwarp backend cannot build this model: {' '.join(str(err).split())}"
                ) from None
            self._actuators = ActuatorTables(build.info, mjm, n)
            # per-world gravity: model option arrays are indexed world % length, as batched fields are
            self.m.opt.gravity = wp.array(np.tile(np.asarray(mjm.opt.gravity, np.float32), (n, 1)), dtype=wp.vec3)
            # MuJoCo Warp's raw overflow prints off: this engine reports an overflow itself (step)
            self.m.opt.warn_overflow = 0
            self._nconmax, self._njmax = e["nconmax"], e["njmax"]  # the option block wins over the probe
            if self._nconmax is None or self._njmax is None:
                nconmax, njmax = buffer_sizes(mjm)
                self._nconmax, self._njmax = self._nconmax or nconmax, self._njmax or njmax
            try:
                self.d = mjw.make_data(mjm, nworld=n, nconmax=self._nconmax, njmax=self._njmax)
            except (MemoryError, ValueError, RuntimeError) as err:
                raise InvalidArgumentError(
                    f"num_envs: {n} worlds of this model cannot be allocated ({' '.join(str(err).split())})"
                ) from None
            mjw.forward(self.m, self.d)  # compiles the kernels (or loads them from the cache)
        if announce:
            _mark_compiled(mjm)
            print(f"[simbackend] mjwarp: kernels ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        d = self.d
        t = wp.to_torch
        self._qpos, self._qvel, self._ctrl, self._xfrc = t(d.qpos), t(d.qvel), t(d.ctrl), t(d.xfrc_applied)
        self._warmstart = t(d.qacc_warmstart)
        self._stale = False
        self._nstate = int(mujoco.mj_stateSize(mjm, _INTEGRATION))
        self._saved = False
        # the pre-call copy for revert: the integration state's arrays copied as they are (one device copy
        # each); mujoco_warp.get_state builds its packing kernel anew at every call, ~10 ms of Python per
        # step. Flex plasticity needs set_state's own bookkeeping: those models keep get_state/set_state.
        self._revert_fast = int(getattr(mjm, "nplastic", 0)) == 0
        live = [t(getattr(d, f)) for f in _INTEGRATION_ARRAYS if getattr(d, f, None) is not None]
        self._revert_views = [v for v in live if v.numel()] if self._revert_fast else []
        self._revert_saved = [v.clone() for v in self._revert_views]
        self._saved_wp = None if self._revert_fast else wp.zeros((n, self._nstate), dtype=float, device=self.wp_device)
        lo, hi = np.array(self.info.actuator_ctrl_range, np.float32).T
        self._ctrl_lo = torch.as_tensor(lo, dtype=torch.float32, device=dev)
        self._ctrl_hi = torch.as_tensor(hi, dtype=torch.float32, device=dev)
        self._site_body = np.asarray(mjm.site_bodyid, np.int64)
        self._site_quat = torch.as_tensor(np.asarray(mjm.site_quat), dtype=torch.float32, device=dev)
        self._body_root = torch.as_tensor(np.array(self.info.body_root, np.int64), device=dev)
        self._graphs: dict[str, Any] = {}  # warp graphs of a substep and of the forward pass (GPU)
        self._dev_ids: dict[tuple, torch.Tensor] = {}
        self._jac_body: dict[int, Any] = {}
        self._save_buf: Any = None
        self._views: dict[str, torch.Tensor] = {}  # torch views of Data's derived arrays
        self._external_captures: list = []  # warp's records of launches inside a caller's torch.cuda.graph
        self._graph_ok = dev.type == "cuda" and bool(e["graph"])
        self._ray_geoms: RayGeoms | None = None
        self._jac: tuple[Any, Any] | None = None
        #: contact sensing: every body's net contact force of the last substep, (N * nbody, 3), computed
        #: after each step from the contacts that substep solved (a later forward pass replaces them)
        self._sensing = bool(opts.contact_sensing)
        self._stepped = torch.zeros(n, dtype=torch.bool, device=dev)
        if self._sensing:
            cmax = int(d.naconmax)
            self._cf_ids = wp.array(np.arange(cmax, dtype=np.int32), dtype=int, device=self.wp_device)
            self._cf_out = wp.zeros(cmax, dtype=wp.spatial_vector, device=self.wp_device)
            self._geom_body = torch.as_tensor(np.asarray(mjm.geom_bodyid, np.int64), device=dev)
            self._body_force = torch.zeros((n * int(mjm.nbody), 3), dtype=torch.float32, device=dev)
        #: the readings from before the last step (and whether each env had stepped), which a revert gives back
        self._body_force_before = torch.zeros_like(self._body_force) if self._sensing else None
        self._stepped_before = torch.zeros_like(self._stepped)
        self._overflow = wp.to_torch(d.overflow)  # MuJoCo Warp's per-world overflow flags (OverflowType)
        self._warned: set[str] = set()  # the buffers an overflow warning named already
        # the warning reads the flags on the host: on the CPU, unless the backend asked for deferred checks
        # (then a step reads nothing back, as on a GPU, and the mask alone reports an overflow)
        self._warn_on_host = self.device.type == "cpu" and not build.options.deferred_checks

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            gpu=self.device.type == "cuda",
            domain_randomization=DR_CAPABILITIES,
            actuator_kinds=frozenset({"motor", "position", "velocity", "other"}),
            sensor_types=ALL_SENSOR_TYPES,
            rendering=True,  # MuJoCo's renderer draws the compiled model (simbackend.playback)
            ray_casting=True,
            # its height-field collision kicks boxes off slopes (spurious deep contacts; Capabilities)
            hfield_slope_contacts=False,
            cuda_graphs=self.device.type == "cuda",  # kernels launched on a capturing torch stream (_scope)
            contact_forces=True,
            contact_buffers=(
                ("nconmax", f"contacts per env ({self._nconmax} here)"),
                ("njmax", f"constraint rows per env ({self._njmax} here)"),
            ),
            snapshot_restore=True,
            # warp's CPU kernels run in a fixed order; on a GPU, atomic sums may reorder between runs
            snapshot_exact=self.device.type == "cpu",
            deterministic=self.device.type == "cpu",
        )

    @property
    def notes(self) -> tuple[str, ...]:
        return ("MuJoCo Warp computes in float32 (C MuJoCo: float64)",)

    # -- derived quantities ------------------------------------------------------
    def _torch_capturing(self) -> bool:
        """Whether the caller is capturing a ``torch.cuda.graph`` on this device."""
        return self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()

    def _scope(self) -> Any:
        """Where warp launches: this device, and, inside a caller's ``torch.cuda.graph``, torch's capturing
        stream, so that the kernels go into that graph."""
        if not self._torch_capturing():
            return wp.ScopedDevice(self.wp_device)
        stack = contextlib.ExitStack()
        stack.enter_context(wp.ScopedDevice(self.wp_device))
        # no event wait on entry: the capturing stream may not wait on an event recorded outside the capture
        capturing = wp.stream_from_torch(torch.cuda.current_stream(self.device))
        stack.enter_context(wp.ScopedStream(capturing, sync_enter=False))
        # warp told of the capture (torch.cuda.graph's default mode is global): it then defers the frees and
        # module unloads the capture would forbid; the record keeps what the capture uses alive with the engine
        capture = wp.ScopedCapture(external=True, capture_mode=wp.CaptureMode.GLOBAL)
        stack.enter_context(capture)
        self._external_captures.append(capture)
        return stack

    def _refresh(self) -> None:
        if self._stale:
            # a graph of the forward pass on a GPU: ~100 kernels in one launch
            self._run(lambda: mjw.forward(self.m, self.d), 1, "forward")
            self._stale = False

    def _field(self, name: str) -> torch.Tensor:
        self._refresh()
        view = self._views.get(name)
        if view is None:  # Data's arrays live as long as the engine: one torch view each
            view = self._views[name] = wp.to_torch(getattr(self.d, name))
        return view

    # -- state -----------------------------------------------------------------
    def read_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._qpos, self._qvel

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        ids = self._dev(env_ids)
        self._qpos[ids] = qpos.to(self._qpos)
        self._qvel[ids] = qvel.to(self._qvel)
        self._warmstart[ids] = 0.0
        self._stepped[ids] = False
        self._stale = True

    def write_state_masked(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        rows = mask.to(self.device)[:, None]  # torch.where: no host read on a GPU
        self._qpos.copy_(torch.where(rows, qpos.to(self._qpos), self._qpos))
        self._qvel.copy_(torch.where(rows, qvel.to(self._qvel), self._qvel))
        self._warmstart.masked_fill_(rows, 0.0)
        self._stepped.masked_fill_(rows[:, 0], False)
        self._stale = True

    def _dev(self, ids: np.ndarray) -> torch.Tensor:
        """Host ids as a device index tensor, kept per distinct ids (a getter's ids are copied to the device
        once, not at every call)."""
        ids = np.asarray(ids, dtype=np.int64)
        key = (ids.shape, ids.tobytes())
        t = self._dev_ids.get(key)
        if t is None:
            if len(self._dev_ids) >= 256:
                self._dev_ids.clear()
            t = self._dev_ids[key] = torch.as_tensor(ids, dtype=torch.int64, device=self.device)
        return t

    # -- frames ------------------------------------------------------------------
    def body_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        i = self._dev(ids)
        return self._field("xpos")[:, i], self._field("xquat")[:, i]

    def body_velocity(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``cvel`` is ``[ang, lin]`` at the subtree centre of mass of each body's root: shifted to the frame origin."""
        i = self._dev(ids)
        cvel = self._field("cvel")[:, i]
        com = self._field("subtree_com")[:, self._body_root[i]]
        ang = cvel[..., :3]
        return cvel[..., 3:] + cross(ang, self._field("xpos")[:, i] - com), ang

    def site_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        i = self._dev(ids)
        body_q = self._field("xquat")[:, self._dev(self._site_body[ids])]
        local = self._site_quat[i].expand(self.num_envs, -1, -1)
        return self._field("site_xpos")[:, i], quat_mul(body_q, local)

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        self._refresh()
        n, nv = self.num_envs, int(self.model.nv)
        if self._jac is None:
            self._jac = (
                wp.zeros((n, 3, nv), dtype=float, device=self.wp_device),
                wp.zeros((n, 3, nv), dtype=float, device=self.wp_device),
            )
        jacp, jacr = self._jac
        point = wp.from_torch(self._field("site_xpos")[:, site_id].contiguous(), dtype=wp.vec3)
        body = self._jac_body.get(site_id)
        if body is None:  # made once per site: no allocation (nor copy) in a step a caller's graph captures
            body = self._jac_body[site_id] = wp.full(n, int(self._site_body[site_id]), dtype=int, device=self.wp_device)
        with self._scope():
            mjw.jac(self.m, self.d, jacp, jacr, point, body)
        c = self._dev(cols)
        return wp.to_torch(jacp)[:, :, c], wp.to_torch(jacr)[:, :, c]

    def _sense_contacts(self) -> None:
        """Sum the last substep's contact forces (world frame, on geom 2's body; the opposite on geom 1's)
        per body and world: device work only, captured with the step in a caller's graph."""
        out = wp.to_torch(self._cf_out)
        out.zero_()  # the kernel writes only the contacts that exist
        with self._scope():
            mjw.contact_force(self.m, self.d, self._cf_ids, True, self._cf_out)
        nbody = int(self.model.nbody)
        force = out[:, :3]
        geom = wp.to_torch(self.d.contact.geom).long().clamp(min=0)  # unused slots: zero force, any index
        world = wp.to_torch(self.d.contact.worldid).long().clamp(0, self.num_envs - 1) * nbody
        acc = self._body_force
        acc.zero_()
        acc.index_add_(0, world + self._geom_body[geom[:, 1]], force)
        acc.index_add_(0, world + self._geom_body[geom[:, 0]], -force)

    def contact_forces(self, body_ids: np.ndarray) -> torch.Tensor:
        per_body = self._body_force.view(self.num_envs, -1, 3)[:, self._dev(body_ids)]
        keep = self._stepped[:, None, None] & self._dev(body_ids)[None, :, None].ne(0)  # the world body: zero
        return torch.where(keep, per_body, 0.0)

    def sensor(self, sensor_id: int) -> torch.Tensor:
        adr, dim = int(self.info.sensor_adr[sensor_id]), int(self.info.sensor_dim[sensor_id])
        return self._field("sensordata")[:, adr : adr + dim]

    # -- per-env model fields -------------------------------------------------------
    def _model_array(self, name: str) -> torch.Tensor:
        """``(N, ...)`` torch view of a batched model array (``opt.gravity`` included)."""
        owner = self.m.opt if name.startswith("opt.") else self.m
        return wp.to_torch(getattr(owner, name.split(".")[-1]))

    def write_params(self, env_ids: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        ids = self._dev(env_ids)

        def rows(v: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(v, dtype=torch.float32, device=self.device)

        if self._actuators.update(env_ids, values):  # gains and strength, composed (see ActuatorTables)
            self._actuators.write(
                self._model_array("actuator_gainprm"),
                self._model_array("actuator_biasprm"),
                self._model_array("actuator_forcerange"),
                np.asarray(env_ids),
                rows,
                ids,
            )
        for name, v in values.items():
            if name not in ("actuator_kp", "actuator_kv", "actuator_strength"):
                self._model_array(DR_FIELDS[name])[dr_index(name, ids)] = rows(v)
        if SETCONST_FIELDS.intersection(values):
            with wp.ScopedDevice(self.wp_device):
                mjw.set_const(self.m, self.d)
        self._graphs.clear()  # a captured graph may hold the old arrays' launch parameters
        self._stale = True

    def read_params(self, field: str) -> np.ndarray:
        if field in ("actuator_kp", "actuator_kv", "actuator_strength"):
            table = self._actuators.read(field)
            model = np.asarray(getattr(self.info, field), np.float64)
            return np.broadcast_to(model, (self.num_envs, self.info.nu)).copy() if table is None else table
        return self._model_array(DR_FIELDS[field])[dr_index(field, slice(None))].double().cpu().numpy()

    def model_fields(self) -> dict[str, np.ndarray]:
        return compiled_model_fields(self.model, self.info)

    # -- rays --------------------------------------------------------------------
    def _ray(self, pnt: np.ndarray, vec: np.ndarray, bodyexclude: int) -> tuple[np.ndarray, np.ndarray]:
        n, r = pnt.shape[:2]
        with wp.ScopedDevice(self.wp_device):
            p = wp.array(pnt.astype(np.float32), dtype=wp.vec3)
            v = wp.array(vec.astype(np.float32), dtype=wp.vec3)
            dist = wp.empty((n, r), dtype=float)
            geom = wp.empty((n, r), dtype=int)
            normal = wp.empty((n, r), dtype=wp.vec3)
            exclude = wp.full(r, int(bodyexclude), dtype=int)
            groups = wp.types.vector(6, dtype=int)(*([-1] * 6))  # every geom group
            mjw.rays(self.m, self.d, p, v, groups, True, exclude, dist, geom, normal)
        return dist.numpy().astype(np.float64), geom.numpy()

    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> np.ndarray:
        self._refresh()  # rays read the geoms' current poses
        if self._ray_geoms is None:
            self._ray_geoms = RayGeoms(self.model)
        o = origins.cpu().numpy().astype(np.float64)
        v = directions.cpu().numpy().astype(np.float64)
        return self._ray_geoms.cast(self._ray, o, v, exclude_body)

    # -- snapshots: MuJoCo's integration state ---------------------------------------
    @property
    def state_width(self) -> int:
        return self._nstate

    def _state_columns(self, name: str) -> slice:
        """Columns of ``qpos`` or ``qvel`` in an integration state row (components in mjtState bit order)."""
        start = 0
        for bit in range(int(mujoco.mjtState.mjNSTATE)):
            flag = 1 << bit
            if not _INTEGRATION & flag:
                continue
            size = int(mujoco.mj_stateSize(self.model, flag))
            if flag == int(getattr(mujoco.mjtState, f"mjSTATE_{name.upper()}")):
                return slice(start, start + size)
            start += size
        raise KeyError(name)

    def _get_state(self, out: Any) -> None:
        with self._scope():
            mjw.get_state(self.m, self.d, out, _INTEGRATION)

    def _set_state(self, rows: Any, active: torch.Tensor | None) -> None:
        mask = None if active is None else wp.from_torch(active.to(torch.bool).contiguous(), dtype=wp.bool)
        with self._scope():
            mjw.set_state(self.m, self.d, rows, _INTEGRATION, mask)
        self._stale = True

    def save_state(self, env_ids: np.ndarray) -> torch.Tensor:
        out = self._save_buf
        if out is None:  # made once: the rows returned are a copy
            out = self._save_buf = wp.zeros((self.num_envs, self._nstate), dtype=float, device=self.wp_device)
        self._get_state(out)
        return wp.to_torch(out)[self._dev(env_ids)].double()

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        big = rows.abs() > float(np.finfo(np.float32).max)
        if bool(big.any()):
            bad = sorted({int(env_ids[i]) for i in torch.nonzero(big.any(dim=1)).flatten().tolist()})
            raise InvalidArgumentError(f"state: values beyond float32's range in env ids {bad}")
        return rows[:, self._state_columns("qpos")], rows[:, self._state_columns("qvel")]

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        full = torch.zeros((self.num_envs, self._nstate), dtype=torch.float32, device=self.device)
        ids = self._dev(env_ids)
        full[ids] = rows.to(full)
        active = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        active[ids] = True
        self._stepped[ids] = False
        self._set_state(wp.from_torch(full), active)

    # -- stepping -------------------------------------------------------------------
    def _substep(self) -> None:
        mjw.step(self.m, self.d)

    def _launch(self, nsteps: int) -> None:
        self._run(self._substep, nsteps, "step")

    def _run(self, fn: Any, times: int, name: str) -> None:
        """``fn()`` ``times`` times: on a GPU one replay each of a warp graph of ``fn`` (captured at the first
        call, kept under ``name``); eagerly on the CPU, and inside a caller's ``torch.cuda.graph`` (a warp graph
        of its own would run on warp's stream, outside that capture)."""
        if self._torch_capturing() or not self._graph_ok:
            with self._scope():
                for _ in range(times):
                    fn()
            return
        with wp.ScopedDevice(self.wp_device):
            graph = self._graphs.get(name)
            if graph is None:
                with wp.ScopedCapture() as capture:
                    fn()
                graph = self._graphs[name] = capture.graph
            for _ in range(times):
                wp.capture_launch(graph)

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> None:
        self._saved = False
        if self._revert_fast:  # before the new controls: a revert restores the old ones too
            torch._foreach_copy_(self._revert_saved, self._revert_views)  # one call for every array
        else:
            self._get_state(self._saved_wp)
        self._stepped_before.copy_(self._stepped)  # and the contact readings
        if self._body_force_before is not None:
            self._body_force_before.copy_(self._body_force)
        self._saved = True
        torch.clamp(ctrl.to(self._ctrl), self._ctrl_lo, self._ctrl_hi, out=self._ctrl)
        self._stale = True
        self._stepped.fill_(True)
        self._overflow.zero_()  # MuJoCo Warp's flags only accumulate: this call's, from here
        if forces is None:
            self._launch(nsteps)
            if self._sensing:
                self._sense_contacts()
            return self._overflowed()
        b = self._dev(forces.bodies)
        force, torque = forces.force.to(self._xfrc), forces.torque.to(self._xfrc)
        try:  # MuJoCo applies xfrc at the centre of mass: shift the torque at every substep's pose
            for _ in range(nsteps):
                self._stale = True
                lever = self._field("xpos")[:, b] - self._field("xipos")[:, b]
                self._xfrc[:, b, :3] = force
                self._xfrc[:, b, 3:] = torque + cross(lever, force)
                self._launch(1)
                self._stale = True
        finally:
            self._xfrc[:, b] = 0.0
        if self._sensing:
            self._sense_contacts()
        return self._overflowed()

    def _overflowed(self) -> torch.Tensor:
        """``(N,)`` bool: the envs whose contact or constraint buffers overflowed in this call (a device
        mask: the front end reports them as failed and reverts them). On the CPU without deferred checks,
        the first overflow of each buffer also warns, naming the option and a value that fits."""
        flags = self._overflow
        failed = (flags & (_OVERFLOW_NJMAX | _OVERFLOW_NCONMAX)) != 0
        if self._warn_on_host and bool(failed.any()):
            self._warn_overflow(flags)
        return failed

    def _warn_overflow(self, flags: torch.Tensor) -> None:
        d, n = self.d, self.num_envs
        njmax_envs = torch.nonzero((flags & _OVERFLOW_NJMAX) != 0).flatten().tolist()
        if njmax_envs and "njmax" not in self._warned:
            need = int(wp.to_torch(d.nefc)[njmax_envs].max())
            self._warn(
                "njmax", njmax_envs, f"needed {need} constraint rows, more than mjwarp.njmax={self._njmax}", need
            )
        nconmax_envs = torch.nonzero((flags & _OVERFLOW_NCONMAX) != 0).flatten().tolist()
        if nconmax_envs and "nconmax" not in self._warned:
            total = max(int(d.nacon.numpy()[0]), int(d.ncollision.numpy()[0]))
            held = f"more than mjwarp.nconmax={self._nconmax} per env holds ({self._nconmax * n} for {n} envs)"
            self._warn("nconmax", nconmax_envs, f"made {total} contacts together, {held}", -(-total // n))

    def _warn(self, key: str, envs: list[int], what: str, need: int) -> None:
        """One warning per buffer and engine: the envs, what they needed, the option and a value that fits."""
        self._warned.add(key)
        shown = ", ".join(map(str, envs[:8])) + (", ..." if len(envs) > 8 else "")
        warnings.warn(
            f"mjwarp: env(s) {shown} {what}: reported as diverged, their state kept; build the backend with"
            f" mjwarp={{'{key}': {_fitting(need * 1.5, 0)}}} (its contacts would otherwise be dropped)",
            BufferOverflowWarning,
            stacklevel=8,  # the caller of SimBackend.step (through the front end and its guard)
        )

    def revert(self, envs: torch.Tensor) -> None:
        if not self._saved:
            return
        back = envs.to(device=self.device, dtype=torch.bool)  # the contact readings from before the step
        torch.where(back, self._stepped_before, self._stepped, out=self._stepped)
        if self._body_force_before is not None:
            now = self._body_force.view(self.num_envs, -1, 3)
            torch.where(back[:, None, None], self._body_force_before.view_as(now), now, out=now)
        if not self._revert_fast:
            self._set_state(self._saved_wp, envs.to(self.device))
            return
        mask = envs.to(device=self.device, dtype=torch.bool)
        views: dict[int, torch.Tensor] = {}
        for saved, live in zip(self._revert_saved, self._revert_views):  # torch.where: no host sync on CUDA
            m = views.get(live.dim())
            if m is None:
                m = views[live.dim()] = mask.view(-1, *(1,) * (live.dim() - 1))
            torch.where(m, saved, live, out=live)
        self._stale = True

    def close(self) -> None:
        for k in ("m", "d", "_qpos", "_qvel", "_ctrl", "_xfrc", "_warmstart", "_saved_wp", "_graphs", "_jac",
                  "_jac_body", "_save_buf", "_dev_ids", "_external_captures", "_views", "_revert_views", "_revert_saved",
                  "_cf_ids", "_cf_out", "_body_force", "_body_force_before", "_overflow"):  # fmt: skip
            self.__dict__.pop(k, None)


# -- buffer sizes ------------------------------------------------------------------------
def _fitting(count: float, floor: int) -> int:
    """The smallest of MuJoCo Warp's buffer sizes holding ``count``, at least ``floor``."""
    need = max(int(np.ceil(count)), floor)
    return next((v for v in _SIZES if v >= need), need)


def buffer_sizes(mjm: Any) -> tuple[int, int]:
    """``(nconmax, njmax)`` this engine allocates per world for ``mjm`` unless the option block says
    otherwise: the larger of the model lying on the ground (:func:`ground_bound`) and
    :data:`PROBE_MARGIN` times what a MuJoCo run of it made (:func:`probe_buffers`), rounded up to
    MuJoCo Warp's sizes, and never less than MuJoCo Warp's own sizing (48 and 64 for most models, more
    with height fields: a terrain keeps what it had)."""
    ground = ground_bound(mjm)
    probed = probe_buffers(mjm)
    ncon = max(ground[0], probed[0] * PROBE_MARGIN)
    nefc = max(ground[1], probed[1] * PROBE_MARGIN)
    own = _own_sizes(mjm)
    return _fitting(ncon, own[0]), _fitting(nefc, own[1])


def _own_sizes(mjm: Any) -> tuple[int, int]:
    """MuJoCo Warp's own sizing of ``(nconmax, njmax)`` for ``mjm`` (what ``make_data`` picks unset:
    larger for height fields, flexes, SDFs), never less than 48 and 64; those where it moves."""
    from mujoco_warp._src import io as mjw_io

    try:
        return max(int(mjw_io._default_nconmax(mjm)), _MIN_NCONMAX), max(int(mjw_io._default_njmax(mjm)), _MIN_NJMAX)
    except (AttributeError, TypeError):  # a MuJoCo Warp without them: the smallest it ever picked
        return _MIN_NCONMAX, _MIN_NJMAX


#: the most contacts MuJoCo's collision functions make between a plane and a geom of each type
_PLANE_CONTACTS = {
    int(mujoco.mjtGeom.mjGEOM_SPHERE): 1,
    int(mujoco.mjtGeom.mjGEOM_ELLIPSOID): 1,
    int(mujoco.mjtGeom.mjGEOM_CAPSULE): 2,
}


def ground_bound(mjm: Any) -> tuple[int, int]:
    """``(contacts, constraint rows)`` with every moving geom that can touch a static geom (the floor)
    touching it at once, each with the most contacts its type makes on a plane (sphere 1, capsule 2,
    others 4), each contact with its rows (``condim``, pyramidal or elliptic), plus one row per
    limited joint and tendon, per dof with friction loss and six per equality: a robot lying on the
    ground cannot need more (self-collisions and height fields aside: :func:`probe_buffers`)."""
    m = mjm
    static = np.asarray(m.body_weldid)[np.asarray(m.geom_bodyid)] == 0
    contype, conaffinity = np.asarray(m.geom_contype), np.asarray(m.geom_conaffinity)
    elliptic = int(m.opt.cone) == int(mujoco.mjtCone.mjCONE_ELLIPTIC)
    ncon = nrow = 0
    for g in np.flatnonzero(~static):
        hits = static & (((contype[g] & conaffinity) != 0) | ((contype & conaffinity[g]) != 0))
        if not hits.any():
            continue
        count = _PLANE_CONTACTS.get(int(m.geom_type[g]), 4)
        condim = int(max(int(m.geom_condim[g]), int(np.asarray(m.geom_condim)[hits].max())))
        ncon += count
        nrow += count * (condim if elliptic or condim == 1 else 2 * (condim - 1))
    nrow += int(np.sum(m.jnt_limited)) + int(np.sum(m.tendon_limited)) + int(np.sum(m.dof_frictionloss > 0))
    return ncon, nrow + 6 * int(m.neq)


def probe_buffers(mjm: Any, steps: int = 250, seed: int = 0) -> tuple[int, int]:
    """``(contacts, constraint rows)``: the most MuJoCo (C) makes in one world of ``mjm`` when the model
    is let go as it is and, where it has free joints, dropped 0.2 m on its sides, nose and upside down,
    each for ``steps`` steps under random controls (within the ctrl ranges, new ones every 10 steps; the
    first half of the upright run at zero): a robot standing, flailing and falling. A run that goes
    unstable ends there (its counts would mean nothing), quietly. About 0.1 s for a quadruped."""
    m = copy.copy(mjm)  # the probe's own model: the engine's options stay as they are
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    free = [int(m.jnt_qposadr[j]) for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    limited = np.asarray(m.actuator_ctrllimited, bool)
    lo = np.where(limited, m.actuator_ctrlrange[:, 0], -1.0)
    hi = np.where(limited, m.actuator_ctrlrange[:, 1], 1.0)
    half = float(np.sqrt(0.5))
    poses = [(1.0, 0.0, 0.0, 0.0)]
    if free:  # on each side, on its nose, upside down
        poses += [(half, half, 0.0, 0.0), (half, -half, 0.0, 0.0), (half, 0.0, half, 0.0), (0.0, 1.0, 0.0, 0.0)]
    bad = [int(w) for w in (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS)]
    ncon = nefc = 0
    handler = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda _text: None)  # an unstable run is the probe's to drop, not to print
    try:
        for k, quat in enumerate(poses):
            mujoco.mj_resetData(m, d)
            for adr in free:
                d.qpos[adr + 2] += 0.2 if k else 0.0
                d.qpos[adr + 3 : adr + 7] = quat
            for t in range(steps):
                if t % 10 == 0 and m.nu:
                    d.ctrl[:] = 0.0 if (k == 0 and t < steps // 2) else rng.uniform(lo, hi)
                mujoco.mj_step(m, d)
                if any(d.warning[w].number for w in bad):
                    break
                ncon, nefc = max(ncon, int(d.ncon)), max(nefc, int(d.nefc))
    finally:
        mujoco.set_mju_user_warning(handler)
    return ncon, nefc


# -- what MuJoCo Warp refuses, named by element ----------------------------------------
def _unsupported(mjm: Any) -> str | None:
    """The first element of ``mjm`` that ``mujoco_warp.put_model`` would refuse, named; ``None`` if none.

    The element types MuJoCo Warp declares (its ``types`` enums) are checked per element, so the message
    names the element (``put_model``'s own names only the type); the rest is left to ``put_model``."""
    from mujoco_warp._src import types as T

    checks = (
        ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, "transmission", mjm.actuator_trntype, T.TrnType, mujoco.mjtTrn),
        ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, "dynamics", mjm.actuator_dyntype, T.DynType, mujoco.mjtDyn),
        ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, "gain", mjm.actuator_gaintype, T.GainType, mujoco.mjtGain),
        ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, "bias", mjm.actuator_biastype, T.BiasType, mujoco.mjtBias),
        ("equality", mujoco.mjtObj.mjOBJ_EQUALITY, "type", mjm.eq_type, T.EqType, mujoco.mjtEq),
        ("geom", mujoco.mjtObj.mjOBJ_GEOM, "type", mjm.geom_type, T.GeomType, mujoco.mjtGeom),
        ("sensor", mujoco.mjtObj.mjOBJ_SENSOR, "type", mjm.sensor_type, T.SensorType, mujoco.mjtSensor),
    )
    for kind, obj, what, values, supported, names in checks:
        bad = np.flatnonzero(~np.isin(np.asarray(values), [int(v) for v in supported]))
        if bad.size:
            i = int(bad[0])
            name = mujoco.mj_id2name(mjm, obj, i) or f"{kind}{i}"
            return f"{kind} {name!r}: {what} {names(int(np.asarray(values)[i])).name}"
    for what, value, supported, names in (
        ("integrator", mjm.opt.integrator, T.IntegratorType, mujoco.mjtIntegrator),
        ("cone", mjm.opt.cone, T.ConeType, mujoco.mjtCone),
        ("solver", mjm.opt.solver, T.SolverType, mujoco.mjtSolver),
    ):
        if int(value) not in {int(v) for v in supported}:
            hint = f" (choose another with mjwarp={{'{what}': ...}})" if what != "cone" else ""
            return f"option {what} {names(int(value)).name}{hint}"
    return None


# -- the first-compile message ---------------------------------------------------------
def _marker(mjm: Any) -> str:
    import hashlib

    from simbackend.models import model_to_bytes

    digest = hashlib.sha1(model_to_bytes(mjm)).hexdigest()[:16]
    return os.path.join(str(wp.config.kernel_cache_dir), "simbackend", digest)


def _compiled_before(mjm: Any) -> bool:
    try:
        return os.path.exists(_marker(mjm))
    except Exception:  # noqa: BLE001 - the message is a courtesy: never fail a build for it
        return True


def _mark_compiled(mjm: Any) -> None:
    try:
        path = _marker(mjm)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
    except OSError:
        pass
