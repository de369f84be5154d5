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
from typing import Any, Iterator, Optional

import numpy as np
import pytest
import torch

from simbackend.capabilities import Capabilities
from simbackend.contract import SimBackend
from simbackend.divergence import diverged_rows
from simbackend.errors import NonFiniteError, ValueRangeError
from simbackend.models import compile_model, model_info

_READBACKS = ("cpu", "item", "numpy", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__")


class SyncMonitor:
    """Records calls of host read-back methods on any tensor while active."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.active = False

    @contextlib.contextmanager
    def watching(self) -> Iterator["SyncMonitor"]:
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


class TorchEngine(SimBackend):
    """A pure-torch backend declaring ``gpu=True``; hooks assert what the core hands them."""

    name = "torch_engine"
    hook_dtype = torch.float32

    def __init__(self, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, sync_in_hooks: bool = False):
        m = compile_model(model)
        super().__init__(model_info(m), num_envs, device=self.resolve_device(device), seed=seed)
        self.sync_in_hooks = sync_in_hooks  # a deliberately broken engine: the monitor must see it
        n = self.num_envs
        self.qpos = torch.as_tensor(np.tile(self.info.qpos0, (n, 1)), dtype=torch.float32)
        self.qvel = torch.zeros((n, self.nv))
        self.received: list[tuple[str, Any]] = []
        self._caps = Capabilities(gpu=True, site_jacobians=False, joint_types=frozenset({"free", "ball", "hinge", "slide"}))

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def _check(self, hook: str, *tensors: Optional[torch.Tensor]) -> None:
        for t in tensors:
            if t is None:
                continue
            assert isinstance(t, torch.Tensor), f"{hook} got {type(t).__name__}, not a tensor"
            assert t.device == self.device, f"{hook} got a tensor on {t.device}"
            if t.dtype != torch.bool:
                assert t.dtype == self.hook_dtype, f"{hook} got {t.dtype}"
        self.received.append((hook, tuple(type(t).__name__ for t in tensors)))
        if self.sync_in_hooks and tensors and tensors[0] is not None:
            tensors[0].cpu()

    def get_qpos(self) -> torch.Tensor:
        return self._out(self.qpos)

    def get_qvel(self) -> torch.Tensor:
        return self._out(self.qvel)

    def _links(self, ids: np.ndarray, width: int) -> torch.Tensor:
        base = self.qpos[:, :1].unsqueeze(1).expand(-1, len(ids), width)
        return self._out(base * 0 + torch.as_tensor(ids, dtype=torch.float32)[None, :, None])

    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._links(ids, 3)

    def _body_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        q = torch.zeros((self.num_envs, len(ids), 4))
        q[..., 0] = 1.0
        return self._out(q)

    def _body_lin_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._links(ids, 3)

    def _body_ang_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._links(ids, 3)

    def _site_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._links(ids, 3)

    def _site_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._body_quat_w(ids)

    def _sensor_data(self, sensor_id: int) -> torch.Tensor:
        return self._out(torch.zeros((self.num_envs, int(self.info.sensor_dim[sensor_id]))))

    def _set_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        self._check("_set_state", qpos, qvel)
        rows = torch.as_tensor(env_ids, device=self.device)
        self.qpos[rows] = qpos
        self.qvel[rows] = qvel

    def _step(self, ctrl: torch.Tensor, nsteps: int, hold: Optional[torch.Tensor]) -> torch.Tensor:
        self._check("_step", ctrl, hold, self._force)
        q0, v0 = self.qpos.clone(), self.qvel.clone()
        for _ in range(nsteps):
            self.qvel = self.qvel + self.physics_dt * (ctrl.sum(1, keepdim=True) if ctrl.numel() else 0.0)
            self.qpos = self.qpos + self.physics_dt * self.qvel[:, : self.nq] if self.nq == self.nv else self.qpos
        bad = diverged_rows(self.qpos, self.qvel)
        keep = bad if hold is None else bad | hold
        self.qpos = torch.where(keep[:, None], q0, self.qpos)
        self.qvel = torch.where(keep[:, None], v0, self.qvel)
        return bad if hold is None else bad & ~hold


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
    for getter in ("get_qpos", "get_qvel", "get_dof_pos", "get_dof_vel", "get_base_pos", "get_base_quat",
                   "get_base_lin_vel", "get_base_ang_vel", "get_env_body_mass", "get_env_gravity"):
        getattr(sim, getter)()
    for getter in ("get_body_pos_w", "get_body_quat_w", "get_body_lin_vel_w", "get_body_ang_vel_w",
                   "get_body_pos_b", "get_body_quat_b", "get_body_lin_vel_b", "get_body_ang_vel_b"):
        getattr(sim, getter)()
        getattr(sim, getter)(ids)
    if site is not None:
        sim.get_site_pos_w(site)
        sim.get_site_quat_w()
    if sim.sensor_names:
        sim.get_sensor_data(sim.sensor_names[0])


def test_hooks_receive_device_tensors_in_the_hook_dtype() -> None:
    sim = TorchEngine("cartpole", 4)
    _exercise(sim)
    hooks = {h for h, _ in sim.received}
    assert hooks == {"_set_state", "_step"}
    sim.set_state(None, np.zeros((4, sim.nq), np.float64))          # numpy float64 in, float32 tensors out
    sim.step([[0.0]] * 4)                                          # a nested list too
    assert all(kinds[0] == "Tensor" for _, kinds in sim.received)


def test_core_makes_no_host_read_on_the_hot_path() -> None:
    """The "no host sync" rule: set_state, step, forces, getters and id round trips read nothing back."""
    sim = TorchEngine("cartpole", 4)
    monitor = SyncMonitor()
    with monitor.watching():
        _exercise(sim)
    assert monitor.calls == [], "host read-backs on the hot path:\n" + "\n".join(monitor.calls)


def test_monitor_sees_a_hook_that_syncs() -> None:
    """The monitor is not blind: an engine whose hook calls .cpu() is caught."""
    sim = TorchEngine("cartpole", 4, sync_in_hooks=True)
    monitor = SyncMonitor()
    with monitor.watching():
        sim.step(torch.zeros((4, 1)))
    assert any("Tensor.cpu" in c for c in monitor.calls)


def test_core_check_that_reads_back_would_be_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaking the core (validating ctrl values with bool() as a CPU backend does) is caught by the monitor."""
    sim = TorchEngine("cartpole", 4)
    monkeypatch.setattr(TorchEngine, "_defers_checks", property(lambda self: False))
    monitor = SyncMonitor()
    with monitor.watching():
        sim.step(torch.zeros((4, 1)))
    assert any("__bool__" in c for c in monitor.calls)


def test_gpu_backend_defers_nan_ctrl_without_stepping_the_env() -> None:
    """A NaN ctrl row on a GPU backend: that env is held (not stepped), the others step, the next call raises naming it."""
    sim = TorchEngine("cartpole", 3)
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
    sim = TorchEngine("cartpole", 3)
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch.cuda.set_sync_debug_mode checks real GPU backends")
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
