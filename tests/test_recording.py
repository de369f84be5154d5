"""Recordings (HDF5), kinematic and dynamic replay, across both engines.

The engine-neutral clauses (a backend's own recording replays on itself) are
in the conformance suite (``contract_tests/test_recording.py``); these tests
need both engines, long runs or the file format itself.
"""

from __future__ import annotations

import gc
import json
import os

import h5py
import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import (
    ArgumentTypeError,
    EnvIdError,
    InvalidArgumentError,
    NonFiniteError,
    RecordingError,
    SnapshotMismatchError,
)
from simbackend.playback.recording import FORMAT, VERSION, WRITE_KINDS, Recorder, Recording
from simbackend.playback.replay import dynamic_replay, kinematic_replay
from simbackend.randomization import Distribution, RandomizationPlan, Term


def _ctrl(sim, g):
    return torch.rand(sim.num_envs, sim.num_actuators, generator=g) * 2 - 1


def _record(sim_name: str, model: str, path, steps: int = 60, envs=(1, 3), reset_at: int = 30, plan=None):
    sim = make_backend(sim_name, model, 5)
    if plan is not None:
        sim.apply_init_randomization(plan)
    g = torch.Generator().manual_seed(0)
    with Recorder(sim, path, env_ids=list(envs), chunk_rows=8, plan=plan, metadata={"task": "test"}):
        for t in range(steps):
            sim.step(_ctrl(sim, g), nsteps=2)
            if t == reset_at:
                sim.set_state([3, 4], sim.get_env_default_qpos()[[3, 4]])  # env 4 is not recorded
    return sim


def test_the_file_holds_the_header_the_timeline_and_the_events(tmp_path) -> None:
    plan = RandomizationPlan((Term("body_mass", Distribution.uniform(0.5, 1.5)),), seed=2)
    sim = _record("mujoco", "cartpole", tmp_path / "run.h5", plan=plan)
    with h5py.File(tmp_path / "run.h5", "r") as f:
        assert f.attrs["format"] == FORMAT and f.attrs["version"] == VERSION
        assert f["rows/qpos"].chunks[0] == 8, "rows are appended a chunk at a time"
    with Recording(tmp_path / "run.h5") as rec:
        assert rec.backend == "mujoco" and rec.fingerprint == sim.info.fingerprint
        assert rec.env_ids.tolist() == [1, 3] and rec.metadata == {"task": "test"}
        assert rec.plan == plan and rec.joint_names == sim.joint_names
        # row 0 the start, 60 stepped rows, one write row for the reset of env 3 after step 31
        assert len(rec) == 62 and rec.nsteps[0] == 0 and rec.nsteps[32] == 0 and (rec.nsteps > 0).sum() == 60
        assert rec.env_steps == 120
        np.testing.assert_allclose(rec.rows("time", [1, 61])[:, 0], [2 * sim.physics_dt, 120 * sim.physics_dt])
        np.testing.assert_array_equal(rec.rows("qpos", [61]), sim.get_qpos()[[1, 3]].numpy()[None])
        np.testing.assert_array_equal(rec.rows("ctrl", [61]), sim.get_ctrl()[[1, 3]].numpy()[None])
        ev = rec.events()
        assert ev["row"].tolist() == [0, 0, 32] and ev["env"].tolist() == [0, 1, 1]
        assert [WRITE_KINDS[k] for k in ev["kind"]] == ["start", "start", "set_state"]
        state = rec.event_state([2])
        np.testing.assert_allclose(state.params["body_mass"].numpy(), sim.get_env_body_mass()[[3]].numpy(), rtol=1e-7)
        np.testing.assert_array_equal(state.joint_pos["slider"].numpy()[0], sim.get_env_default_qpos()[3, :1].numpy())
        assert rec.event_snapshot([2]).shape == (1, sim.snapshot_layout.width)
        assert rec.model().nq == sim.nq


COUPLED = """<mujoco><worldbody>
  <body name="a" pos="0 0 1"><joint name="h1" type="hinge" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 .3 0 0"
    size=".03"/><body name="b" pos=".3 0 0"><joint name="h2" type="hinge" axis="0 1 0"/><geom type="capsule"
    fromto="0 0 0 .3 0 0" size=".03"/></body></body></worldbody>
  <equality><joint name="couple" joint1="h1" joint2="h2"/></equality></mujoco>"""


@pytest.mark.parametrize("engine", ["mujoco", "sapien"])
def test_the_header_says_what_the_engine_took_from_mujoco(tmp_path, engine: str) -> None:
    """A recording carries the engine's delegated elements (capabilities.delegated): a replay or a
    figure made from it knows which physics MuJoCo computed for the recording engine."""
    path = tmp_path / "coupled.xml"
    path.write_text(COUPLED)
    sim = make_backend(engine, str(path), 2)
    with Recorder(sim, tmp_path / "run.h5"):
        sim.step(None, nsteps=3)
    with Recording(tmp_path / "run.h5") as rec:
        assert rec.delegated == tuple(sorted(sim.capabilities.delegated))
        assert rec.delegated == (() if engine == "mujoco" else ("equality 'couple': MuJoCo's constraint force",))
    sim.close()


@pytest.mark.parametrize("source", ["mujoco", "sapien"])
def test_a_recording_replays_on_the_other_engine(tmp_path, source: str) -> None:
    """Cartpole recorded on one engine, replayed on both: on its own engine from exact snapshots (no
    error), on the other from named states (the engines agree to 1e-6 on this contact-free model)."""
    plan = RandomizationPlan((Term("body_mass", Distribution.uniform(0.7, 1.3)),), seed=5)
    _record(source, "cartpole", tmp_path / "run.h5", plan=plan)
    with Recording(tmp_path / "run.h5") as rec:
        for target in ("mujoco", "sapien"):
            sim = rec.make_backend(target)
            report = dynamic_replay(rec, sim)
            assert report.exact_start == (target == source)
            assert not report.parted, report.summary()
            assert report.rows.size == 60 and report.qpos_error.shape == (60, 2)
            limit = 0.0 if target == source else 1e-6
            assert report.qpos_error.max() <= limit, report.summary()
            frames = list(kinematic_replay(rec, sim, envs=[3], every=10))
            assert frames == list(range(0, 62, 10))
            np.testing.assert_allclose(sim.get_qpos()[0].numpy(), rec.rows("qpos", [60], [1])[0, 0], atol=1e-6)
            sim.close()


def test_dynamic_replay_reports_where_engines_part(tmp_path) -> None:
    """arm7's stiff servos are integrated differently by the engines (see docs/parity.md):
    a MuJoCo recording parts on PhysX within a few rows, and the report says where; on MuJoCo it does not."""
    _record("mujoco", "arm7", tmp_path / "arm.h5", steps=40, reset_at=100)
    with Recording(tmp_path / "arm.h5") as rec:
        physx = dynamic_replay(rec, rec.make_backend("sapien"), qpos_tolerance=1e-3)
        same = dynamic_replay(rec, rec.make_backend("mujoco"))
    assert physx.parted and 0 < physx.first_parting_row.min() < 41
    for i, row in enumerate(physx.first_parting_row):
        at = np.flatnonzero(physx.rows == row)[0]
        assert physx.qpos_error[at, i] > 1e-3 or physx.qvel_error[at, i] > physx.qvel_tolerance
        assert (physx.qpos_error[:at, i] <= 1e-3).all() and (physx.qvel_error[:at, i] <= physx.qvel_tolerance).all()
    assert "parts at row" in physx.summary()
    assert not same.parted and same.qpos_error.max() == 0.0


def test_a_long_recording_streams_in_bounded_memory(tmp_path) -> None:
    """10^6 env-steps (1000 envs x 1000 steps) stream to disk: once the first chunks are written, memory
    stays flat while the rest of the data (15 MB) reaches the file (rows in memory: one chunk)."""
    psutil = pytest.importorskip("psutil")
    proc = psutil.Process()
    sim = make_backend("mujoco", "pendulum", 1000, nthread=1)
    ctrl = torch.zeros(1000, sim.num_actuators)
    path = tmp_path / "long.h5"
    rss = []
    with Recorder(sim, path, compression=None, chunk_rows=64):
        for t in range(1000):
            sim.step(ctrl)
            if t % 50 == 49:
                gc.collect()
                rss.append(proc.memory_info().rss)
    per_step = 1000 * (4 + 4 + 4 + 8 + 1)  # qpos, qvel, ctrl (float32), time (float64), diverged, per row of 1000 envs
    assert os.path.getsize(path) > 1000 * per_step
    warm = rss[5]  # after 300 steps: buffers, HDF5 chunk caches and the engine's arrays exist
    grown = max(rss[5:]) - warm
    assert grown < 700 * per_step / 8, (
        f"memory grew by {grown / 1e6:.1f} MB while {700 * per_step / 1e6:.1f} MB were written"
    )
    with Recording(path) as rec:
        assert rec.env_steps == 10**6


def test_bad_arguments_raise_one_line_errors(tmp_path) -> None:
    sim = make_backend("mujoco", "pendulum", 2)
    with pytest.raises(InvalidArgumentError, match="path"):
        Recorder(sim, tmp_path / "run.npz")
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        Recorder(sim, tmp_path / "missing" / "run.h5")
    with pytest.raises(EnvIdError):
        Recorder(sim, tmp_path / "run.h5", env_ids=[2])
    with pytest.raises(ArgumentTypeError, match="sim"):
        Recorder("mujoco", tmp_path / "run.h5")
    with pytest.raises(InvalidArgumentError, match="metadata"):
        Recorder(sim, tmp_path / "run.h5", metadata={"f": object()})
    with pytest.raises(InvalidArgumentError, match="compression"):
        Recorder(sim, tmp_path / "run.h5", compression="zip")
    assert not sim._observers, "a failed recorder stays attached"
    with pytest.raises(InvalidArgumentError, match="no such file"):
        Recording(tmp_path / "none.h5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.attrs["format"] = "something else"
    with pytest.raises(SnapshotMismatchError, match="not a simbackend recording"):
        Recording(tmp_path / "other.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(RecordingError, match="not a readable recording"):
        Recording(tmp_path / "text.h5")
    with Recorder(sim, tmp_path / "run.h5") as rec:
        sim.step(torch.zeros(2, sim.num_actuators))
    rec.close()  # idempotent
    with Recording(tmp_path / "run.h5") as r:
        with pytest.raises(SnapshotMismatchError, match="not the recorded one"):
            dynamic_replay(r, make_backend("mujoco", "cartpole", 2))
        with pytest.raises(InvalidArgumentError, match="num_envs >= 2"):
            next(kinematic_replay(r, r.make_backend("mujoco", num_envs=1)))
        with pytest.raises(InvalidArgumentError, match=r"\[7\] were not recorded"):
            dynamic_replay(r, r.make_backend("mujoco"), envs=[7])
        with pytest.raises(InvalidArgumentError, match="qpos_tolerance"):
            dynamic_replay(r, r.make_backend("mujoco"), qpos_tolerance=0)


def test_observers_are_called_in_order_and_removed(tmp_path) -> None:
    sim = make_backend("mujoco", "pendulum", 3)
    calls = []

    class Watch:
        def on_step(self, s, nsteps, info):
            calls.append(("step", nsteps, info["diverged"].tolist()))

        def on_write(self, s, ids, what):
            calls.append((what, ids.tolist()))

    w = Watch()
    sim.add_observer(w)
    with pytest.raises(InvalidArgumentError, match="already added"):
        sim.add_observer(w)
    with pytest.raises(ArgumentTypeError, match="on_step"):
        sim.add_observer(object())
    sim.step(torch.zeros(3, sim.num_actuators), nsteps=3)
    sim.set_state([2, 0], sim.get_qpos()[[2, 0]])
    sim.set_named_state([1], sim.get_named_state([1]))
    sim.set_physics_state([0], sim.get_physics_state([0]))
    with pytest.raises(NonFiniteError):
        sim.set_state([0], torch.full((1, sim.nq), float("nan")))  # a failed call notifies nothing
    sim.remove_observer(w)
    sim.step(torch.zeros(3, sim.num_actuators))
    assert calls == [
        ("step", 3, [False] * 3),
        ("set_state", [0, 2]),
        ("set_named_state", [1]),
        ("set_physics_state", [0]),
    ]
    with pytest.raises(InvalidArgumentError, match="not added"):
        sim.remove_observer(w)
    assert json.loads(json.dumps(WRITE_KINDS))


# ----------------------------------------------------------------------------------------------
# hostile recordings: every file is checked once, when it is opened (issue 29)
# ----------------------------------------------------------------------------------------------
def _pendulum_run(path):
    """A real recording of the built-in pendulum, 2 envs: row 0 the start, rows 1-4 stepped, row 5
    a write (set_state of env 1), rows 6-7 stepped."""
    sim = make_backend("mujoco", "pendulum", 2)
    with Recorder(sim, path, chunk_rows=4):
        for t in range(6):
            sim.step(torch.full((2, sim.num_actuators), 0.5), nsteps=2)
            if t == 3:
                sim.set_state([1], sim.get_qpos()[[1]] * 0.5)
    sim.close()
    return path


def _replace(f, name, data):
    del f[name]
    f.create_dataset(name, data=data)


def _widen_qpos(f):
    T, k, nq = f["rows/qpos"].shape
    _replace(f, "rows/qpos", np.zeros((T, k, nq + 4), np.float32))  # nq = 1: five columns


def _drop_qvel_rows(f):
    f["rows/qvel"].resize(f["rows/qvel"].shape[0] - 2, axis=0)


def _set(name, index, value):
    def tamper(f):
        f[name][index] = value

    return tamper


def _attribute(name, value):
    def tamper(f):
        f.attrs[name] = value

    return tamper


def _snapshot_of_another_model(f):
    f["events/snapshot"][1, 3] += 1  # one half of the fingerprint in the snapshot's header


@pytest.mark.parametrize(
    "tamper,dataset,message",
    [
        (_set("rows/qpos", (3, 1, 0), np.nan), "rows/qpos", "non-finite value nan at row 3, env 1, column 0"),
        (_set("rows/ctrl", (6, 0, 0), np.inf), "rows/ctrl", "non-finite value inf at row 6, env 0, column 0"),
        (_set("rows/time", (2, 0), -np.inf), "rows/time", "non-finite value -inf at row 2, env 0"),
        (_set("events/qvel", (2, 0), np.nan), "events/qvel", "non-finite value nan at entry 2"),
        (_set("events/params", (0, 1), np.inf), "events/params", "non-finite value inf at entry 0"),
        (_widen_qpos, "rows/qpos", "expected shape (8, 2, 1) = (T, k, nq), got (8, 2, 5)"),
        (_drop_qvel_rows, "rows/qvel", "expected shape (8, 2, 1) = (T, k, nv), got (6, 2, 1)"),
        (lambda f: _replace(f, "rows/ctrl", np.zeros((8, 2, 3), np.float32)), "rows/ctrl", "= (T, k, nu), got"),
        (lambda f: _replace(f, "events/qpos", np.zeros((2, 1), np.float32)), "events/qpos", "(3, 1) = (E, nq)"),
        (lambda f: _replace(f, "rows/time", np.full((8, 2), "t", "S1")), "rows/time", "expected numbers, got dtype"),
        (lambda f: f.pop("rows/qvel"), "rows/qvel", "missing"),
        (_attribute("nq", 3), "attribute nq", "the header says 3, the stored model (model) has nq = 1"),
        (_attribute("nu", 0), "attribute nu", "the header says 0, the stored model (model) has nu = 1"),
        (_attribute("nv", "1"), "attribute nv", "expected an integer >= 0"),
        (_attribute("num_envs", 1), "env_ids", "expected distinct ids in [0, 1)"),
        (_attribute("physics_dt", np.nan), "attribute physics_dt", "expected a finite number > 0"),
        (_set("names/joint", 0, "elbow"), "names/joint", "entry 0 is 'elbow', the stored model's joint 0 is"),
        (_set("layout/joint_qposadr", 0, 1), "layout/joint_qposadr", "entry 0 is 1, the stored model has 0"),
        (_set("events/row", 2, 1), "events/row", "entry 2 is on row 1, a stepped row"),
        (_set("events/env", 1, 0), "events/row", "no start state (an event at row 0) for recorded envs [1]"),
        (_set("rows/nsteps", 4, -2), "rows/nsteps", "-2 at row 4"),
        (_snapshot_of_another_model, "events/snapshot", "the snapshot of entry 1 has header"),
        (lambda f: _replace(f, "model", np.zeros(100, np.uint8)), "model", "not a MuJoCo binary model"),
    ],
)  # fmt: skip
def test_a_tampered_recording_is_refused_on_open(tmp_path, tamper, dataset: str, message: str) -> None:
    """A recording whose datasets disagree with its header or its stored model, or hold NaN/inf, is refused
    when it is opened: one RecordingError, one line naming the file and the dataset (expected and found
    shape, the first bad row), never a broadcast error or a replay reported within tolerance."""
    path = _pendulum_run(tmp_path / "run.h5")
    with h5py.File(path, "a") as f:
        tamper(f)
    with pytest.raises(RecordingError) as caught:
        Recording(path)
    e = caught.value
    assert type(e) is RecordingError and e.dataset == dataset and e.path == str(path)
    text = str(e)
    assert text.startswith(f"{dataset} of recording {str(path)!r}: ") and message in text, text
    assert "\n" not in text


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _random(data: bytes) -> bytes:
    return np.random.default_rng(0).bytes(len(data))


def _broken_b_tree(data: bytes) -> bytes:
    at = data.index(b"TREE")  # the signature of the root group's B-tree (the first one in the file)
    return data[:at] + b"XXXX" + data[at + 4 :]


@pytest.mark.parametrize(
    "damage,reason",
    [
        (_truncated, "truncated file"),
        (_random, "file signature not found"),
        (_broken_b_tree, "wrong B-tree signature"),
    ],
)
def test_a_damaged_file_is_not_a_readable_recording(tmp_path, damage, reason: str) -> None:
    """A truncated file, random bytes, or an HDF5 file with a damaged object: one line with the path, that it
    is not a readable recording, and h5py's reason (also the exception's cause); never a missing dataset."""
    data = _pendulum_run(tmp_path / "run.h5").read_bytes()
    path = tmp_path / "damaged.h5"
    path.write_bytes(damage(data))
    with pytest.raises(RecordingError) as caught:
        Recording(path)
    e = caught.value
    assert type(e) is RecordingError and e.dataset is None
    text = str(e)
    assert text.startswith(f"path: {str(path)!r} is not a readable recording: ") and "h5py: " in text, text
    assert reason in text and reason in str(e.__cause__) and "\n" not in text
    assert "lacks" not in text


@pytest.mark.parametrize("name", ["qpos", "qvel"])
def test_a_nan_error_is_never_within_tolerance(tmp_path, monkeypatch, name: str) -> None:
    """A NaN reaching the comparison (here read after the file was opened and checked; a replaying engine
    could give one too) parts the env at that row: NaN is within no tolerance."""
    path = _pendulum_run(tmp_path / "run.h5")
    with Recording(path) as rec:
        read = rec.rows

        def with_nan(dataset, rows=slice(None), envs=slice(None)):
            out = read(dataset, rows, envs)
            if dataset == name:
                out = out.copy()
                out[3, 0, 0] = np.nan  # row 3 (of the first block), the first env
            return out

        monkeypatch.setattr(rec, "rows", with_nan)
        report = dynamic_replay(rec, rec.make_backend("mujoco"))
    assert report.first_parting_row.tolist() == [3, -1] and report.parted
    assert np.isnan(getattr(report, f"{name}_error")[2, 0])
    lines = report.summary().splitlines()
    assert "parts at row 3" in lines[1] and "stays within tolerance" in lines[2]


def test_two_recorders_on_one_path_are_refused(tmp_path) -> None:
    """A second Recorder on a file a Recorder is writing (by any spelling of its path), or on a file open
    in a Recording, is refused with one line naming the path, before anything is changed; a file being
    written is not opened as a Recording."""
    sim = make_backend("mujoco", "pendulum", 2)
    ctrl = torch.zeros(2, sim.num_actuators)
    path = tmp_path / "run.h5"
    with Recorder(sim, path) as first:
        sim.step(ctrl)
        for spelling in (path, tmp_path / "." / "run.h5"):
            with pytest.raises(InvalidArgumentError) as caught:
                Recorder(sim, spelling, env_ids=[1])
            assert type(caught.value) is InvalidArgumentError
            assert str(caught.value).startswith(f"path: {str(spelling)!r} is being written by another Recorder")
        with pytest.raises(InvalidArgumentError, match="is being written by a Recorder"):
            Recording(path)
        assert sim._observers == [first]
        sim.step(ctrl)
    with Recording(path) as rec:
        assert len(rec) == 3 and rec.env_ids.tolist() == [0, 1]
        with pytest.raises(InvalidArgumentError, match=f"path: {str(path)!r} cannot be written"):
            Recorder(sim, path)
        assert not sim._observers
    with Recording(path) as rec:
        assert len(rec) == 3, "the refused Recorder changed the file"
    with Recorder(sim, path):  # free again
        sim.step(ctrl)
    with Recording(path) as rec:
        assert len(rec) == 2
    sim.close()
