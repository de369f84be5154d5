"""The torch-native hook boundary and the "no host sync" rule, proven without a GPU.

``TorchEngine`` is a backend written only in torch that declares ``gpu=True``
(its physics is a trivial integrator: what matters here is what the core hands
it and what the core does around it). ``SyncMonitor`` patches the tensor
methods that read a device back to the host (``.cpu()``, ``.item()``,
``.numpy()``, ``.tolist()``, ``bool()``, ``int()``, ``float()``, ``__array__``)
and records every call made while it is active. Along ``set_state``, ``step``,
``apply_body_force`` and every getter the core must make none: on a CUDA
backend each would synchronise the host with the GPU. On a machine with a GPU,
``torch.cuda.set_sync_debug_mode("error")`` checks the real GPU backends the
same way.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.capabilities import Capabilities
from simbackend.contract import SimBackend
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import NonFiniteError, ValueRangeError

_READBACKS = ("cpu", "item", "numpy", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__")


class SyncMonitor:
    """Records calls of host read-back methods on any tensor while active."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.active = False

    @contextlib.contextmanager
    def watching(self) -> Iterator[SyncMonitor]:
        originals = {name: getattr(torch.Tensor, name) for name in _READBACKS}
        monitor = self

        def wrap(name: str, fn: Any) -> Any:
            def wrapped(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                if monitor.active:
                    where = traceback.extract_stack(limit=3)[0]
                    monitor.calls.append(f"Tensor.{name} at {where.filename}:{where.lineno}")
                return fn(self, *args, **kwargs)

            return wrapped

        for name, fn in originals.items():
            setattr(torch.Tensor, name, wrap(name, fn))
        self.active = True
        try:
            yield self
        finally:
            self.active = False
            for name, fn in originals.items():
                setattr(torch.Tensor, name, fn)


class TorchEngine(Engine):
    """A pure-torch engine declaring ``gpu=True``; its members assert what the front end hands them."""

    name = "torch_engine"
    dtype = torch.float32

    def __init__(self, build: EngineBuild, sync_in_hooks: bool = False):
        super().__init__(build)
        self.sync_in_hooks = sync_in_hooks  # a deliberately broken engine: the monitor must see it
        n = self.num_envs
        self.qpos = torch.as_tensor(np.tile(self.info.qpos0, (n, 1)), dtype=torch.float32)
        self.qvel = torch.zeros((n, self.info.nv))
        self.received: list[tuple[str, Any]] = []
        self._caps = Capabilities(
            gpu=True, site_jacobians=False, joint_types=frozenset({"free", "ball", "hinge", "slide"})
        )

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def _check(self, hook: str, *tensors: torch.Tensor | None) -> None:
        for t in tensors:
            if t is None:
                continue
            assert isinstance(t, torch.Tensor), f"{hook} got {type(t).__name__}, not a tensor"
            assert t.device == self.device, f"{hook} got a tensor on {t.device}"
            if t.dtype != torch.bool:
                assert t.dtype == self.dtype, f"{hook} got {t.dtype}"
        self.received.append((hook, tuple(type(t).__name__ for t in tensors)))
        if self.sync_in_hooks and tensors and tensors[0] is not None:
            tensors[0].cpu()

    def read_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.qpos, self.qvel

    def _links(self, ids: np.ndarray, width: int) -> torch.Tensor:
        base = self.qpos[:, :1].unsqueeze(1).expand(-1, len(ids), width)
        return base * 0 + torch.as_tensor(ids, dtype=torch.float32)[None, :, None]

    def _unit(self, ids: np.ndarray) -> torch.Tensor:
        q = torch.zeros((self.num_envs, len(ids), 4))
        q[..., 0] = 1.0
        return q

    def body_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self._links(ids, 3), self._unit(ids)

    def body_velocity(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self._links(ids, 3), self._links(ids, 3)

    def site_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self._links(ids, 3), self._unit(ids)

    def sensor(self, sensor_id: int) -> torch.Tensor:
        return torch.zeros((self.num_envs, int(self.info.sensor_dim[sensor_id])))

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        self._check("write_state", qpos, qvel)
        rows = torch.as_tensor(env_ids, device=self.device)
        self.qpos[rows] = qpos
        self.qvel[rows] = qvel

    def write_state_masked(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """A GPU engine's masked write (docs/writing-a-backend.md): ``torch.where``, no host read."""
        self._check("write_state_masked", mask, qpos, qvel)
        self.qpos = torch.where(mask[:, None], qpos, self.qpos)
        self.qvel = torch.where(mask[:, None], qvel, self.qvel)

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> None:
        self._check("step", ctrl, None if forces is None else forces.force)
        self._before = self.qpos.clone(), self.qvel.clone()
        dt = self.info.timestep
        for _ in range(nsteps):
            self.qvel = self.qvel + dt * (ctrl.sum(1, keepdim=True) if ctrl.numel() else 0.0)
            self.qpos = self.qpos + dt * self.qvel[:, : self.info.nq] if self.info.nq == self.info.nv else self.qpos
        return None

    def revert(self, envs: torch.Tensor) -> None:
        self._check("revert", envs)
        q0, v0 = self._before
        self.qpos = torch.where(envs[:, None], q0, self.qpos)
        self.qvel = torch.where(envs[:, None], v0, self.qvel)


def torch_backend(model: Any, num_envs: int, sync_in_hooks: bool = False) -> SimBackend:
    """A front end on :class:`TorchEngine` (its ``sync_in_hooks`` set)."""
    engine = (
        TorchEngine
        if not sync_in_hooks
        else type(
            "SyncingTorchEngine",
            (TorchEngine,),
            {"__init__": lambda self, build: TorchEngine.__init__(self, build, sync_in_hooks=True)},
        )
    )
    return SimBackend(engine, model, num_envs)


def _exercise(sim: SimBackend) -> None:
    """The hot path: set_state, step (plain, with forces, with a pre-step function) and every getter."""
    n = sim.num_envs
    ids = sim.get_body_ids(["pole", "cart"])
    site = sim.get_site_ids(sim.site_names[:1]) if sim.site_names else None
    half = sim.get_body_ids("pole")  # an id tensor passed back where ids are expected
    qpos = torch.zeros((n, sim.nq))
    sim.set_state(None, qpos, torch.zeros((n, sim.nv)))
    sim.set_state([1, 0], qpos[:2])
    sim.set_state(np.array([True] + [False] * (n - 1)), qpos[:1])
    ctrl = torch.zeros((n, sim.num_actuators))
    sim.step(ctrl)
    sim.step(ctrl, nsteps=3)
    sim.apply_body_force(half, torch.ones((n, 1, 3)))
    sim.step(ctrl)
    sim.set_pre_step_control(lambda s, c: c + s.get_qpos()[:, :1] * 0)
    sim.step(ctrl, nsteps=2)
    sim.set_pre_step_control(None)
    for getter in (
        "get_qpos",
        "get_qvel",
        "get_dof_pos",
        "get_dof_vel",
        "get_base_pos",
        "get_base_quat",
        "get_base_lin_vel",
        "get_base_ang_vel",
        "get_env_body_mass",
        "get_env_gravity",
    ):
        getattr(sim, getter)()
    for getter in (
        "get_body_pos_w",
        "get_body_quat_w",
        "get_body_lin_vel_w",
        "get_body_ang_vel_w",
        "get_body_pos_b",
        "get_body_quat_b",
        "get_body_lin_vel_b",
        "get_body_ang_vel_b",
    ):
        getattr(sim, getter)()
        getattr(sim, getter)(ids)
    if site is not None:
        sim.get_site_pos_w(site)
        sim.get_site_quat_w()
    if sim.sensor_names:
        sim.get_sensor_data(sim.sensor_names[0])


def test_hooks_receive_device_tensors_in_the_hook_dtype() -> None:
    sim = torch_backend("cartpole", 4)
    _exercise(sim)
    hooks = {h for h, _ in sim.engine.received}
    assert hooks == {"write_state_masked", "step", "revert"}  # deferred checks: every write is masked
    sim.set_state(None, np.zeros((4, sim.nq), np.float64))  # numpy float64 in, float32 tensors out
    sim.step([[0.0]] * 4)  # a nested list too
    assert all(kinds[0] == "Tensor" for _, kinds in sim.engine.received)


def test_core_makes_no_host_read_on_the_hot_path() -> None:
    """The "no host sync" rule: set_state, step, forces, getters and id round trips read nothing back."""
    sim = torch_backend("cartpole", 4)
    monitor = SyncMonitor()
    with monitor.watching():
        _exercise(sim)
    assert monitor.calls == [], "host read-backs on the hot path:\n" + "\n".join(monitor.calls)


def test_monitor_sees_a_hook_that_syncs() -> None:
    """The monitor is not blind: an engine whose hook calls .cpu() is caught."""
    sim = torch_backend("cartpole", 4, sync_in_hooks=True)
    monitor = SyncMonitor()
    with monitor.watching():
        sim.step(torch.zeros((4, 1)))
    assert any("Tensor.cpu" in c for c in monitor.calls)


def test_core_check_that_reads_back_would_be_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaking the core (validating ctrl values with bool() as a CPU backend does) is caught by the monitor."""
    sim = torch_backend("cartpole", 4)
    monkeypatch.setattr(SimBackend, "_defers_checks", property(lambda self: False))
    monitor = SyncMonitor()
    with monitor.watching():
        sim.step(torch.zeros((4, 1)))
    assert any("__bool__" in c for c in monitor.calls)


def test_gpu_backend_defers_nan_ctrl_without_stepping_the_env() -> None:
    """A NaN ctrl row on a GPU backend: that env is held (not stepped), the others step, the next call raises naming it."""
    sim = torch_backend("cartpole", 3)
    sim.set_state(None, torch.full((3, 2), 0.1), torch.full((3, 2), 0.5))
    before = sim.get_qpos().clone()
    ctrl = torch.ones((3, 1))
    ctrl[1, 0] = float("nan")
    monitor = SyncMonitor()
    with monitor.watching():
        info = sim.step(ctrl, nsteps=2)
    assert monitor.calls == []
    assert not info["diverged"].any()
    after = sim.get_qpos()
    assert torch.equal(after[1], before[1]), "the env with the bad ctrl was stepped"
    assert not torch.equal(after[0], before[0]) and not torch.equal(after[2], before[2])
    assert torch.isfinite(sim.get_qvel()).all()
    with pytest.raises(NonFiniteError, match=r"ctrl.*\[1\].*next call"):
        sim.step(torch.zeros((3, 1)))
    sim.step(torch.zeros((3, 1)))  # reported once, then the backend goes on


def test_gpu_backend_defers_bad_state_rows_and_synchronize_reports_them() -> None:
    """set_state rows with inf or out-of-range values keep the env's state; synchronize() raises naming them."""
    sim = torch_backend("cartpole", 3)
    sim.set_state(None, torch.full((3, 2), 0.1))
    qpos = torch.full((3, 2), 0.3)
    qvel = torch.zeros((3, 2))
    qpos[2, 0] = float("inf")
    qvel[0, 1] = 1e9
    sim.set_state(None, qpos, qvel)
    got = sim.get_qpos()
    assert torch.allclose(got[1], torch.tensor([0.3, 0.3]))
    assert torch.allclose(got[0], torch.tensor([0.1, 0.1])) and torch.allclose(got[2], torch.tensor([0.1, 0.1]))
    with pytest.raises((NonFiniteError, ValueRangeError)) as err:
        sim.synchronize()
    assert "[2]" in str(err.value) or "[0]" in str(err.value)
    sim.synchronize()  # each problem is raised once


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: torch.cuda.set_sync_debug_mode checks real GPU backends"
)
def test_gpu_backends_do_not_synchronise() -> None:  # pragma: no cover - run on machines with a GPU
    from simbackend.registry import available_backends, make_backend

    checked = 0
    for name in available_backends():
        try:
            sim = make_backend(name, "cartpole", 8, device="cuda")
        except Exception:
            continue
        with sim:
            if not sim.capabilities.gpu:
                continue
            _exercise(sim)  # warm up: first calls may allocate and synchronise
            torch.cuda.set_sync_debug_mode("error")
            try:
                _exercise(sim)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            checked += 1
    assert checked, "no GPU backend could be built on cuda"
