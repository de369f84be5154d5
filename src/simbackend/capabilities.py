"""What a backend supports, declared in advance.

The conformance suite skips a test only where a backend declares the feature
absent here, and says so in the skip reason. ``simbackend info`` prints the
table for every registered backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

#: Sensor types every backend should compute from the state.
CORE_SENSOR_TYPES = frozenset(
    {"jointpos", "jointvel", "framepos", "framequat", "framelinvel", "frameangvel", "gyro", "velocimeter"}
)


@dataclass(frozen=True)
class KnownDifference:
    """A value of the loaded model that an engine cannot hold as MuJoCo compiled it, declared as data.

    The engine holds ``values`` (what it substitutes) where the compiled model
    has another value, for exactly the elements ``ids`` of ``quantity``; the
    parity suite (:mod:`simbackend.parity`) reports such an element as a known
    difference (status ``KNOWN``) as long as the engine's value agrees with the
    declared one at the quantity's tolerance, and as a failure otherwise.

    Attributes:
        quantity: a key of :meth:`~simbackend.contract.SimBackend.model_fields` with
            one entry per element along its first axis (``"body_mass"``, ``"body_inertia"``,
            ``"body_com"``, ``"joint_range"``, ``"actuator_ctrl_range"``, ``"actuator_force_range"``).
        ids: the elements (body, joint or actuator ids, by the quantity's prefix), ascending.
        names: their names, in the same order (the parity suite checks them against the reference's).
        values: what the engine holds for each of ``ids``, shaped as one element of the quantity
            (a number for ``body_mass``, 3 x 3 nested tuples for ``body_inertia``, ...).
        reason: why the engine cannot hold MuJoCo's value, and what it does instead.
    """

    quantity: str
    ids: tuple[int, ...]
    names: tuple[str, ...]
    values: tuple[Any, ...]
    reason: str

    def __post_init__(self) -> None:
        if not (len(self.ids) == len(self.names) == len(self.values)) or not self.ids:
            raise ValueError(
                f"KnownDifference {self.quantity!r}: ids, names and values must be non-empty and of one length"
                f" (got {len(self.ids)}, {len(self.names)}, {len(self.values)})"
            )

    @property
    def text(self) -> str:
        """One line: the quantity, the elements by name, and the reason (the engine's note)."""
        return f"{self.quantity} of {', '.join(repr(n) for n in self.names)}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``values`` as nested lists)."""
        return {
            "quantity": self.quantity,
            "ids": list(self.ids),
            "names": list(self.names),
            "values": [_listed(v) for v in self.values],
            "reason": self.reason,
            "text": self.text,
        }


def _listed(v: Any) -> Any:
    return [_listed(x) for x in v] if isinstance(v, (tuple, list)) else float(v)


@dataclass(frozen=True)
class Capabilities:
    """Features a backend supports.

    Attributes:
        gpu: physics runs on a GPU (state lives in device memory).
        joint_types: joint kinds the backend simulates (``free``, ``ball``, ``hinge``, ``slide``).
        actuator_kinds: actuator kinds (``motor``, ``position``, ``velocity``, ``other``).
        sensor_types: MuJoCo sensor type names ``get_sensor_data`` serves.
        body_forces: ``apply_body_force`` is supported.
        site_jacobians: ``get_site_jacobian_w`` is supported.
        pre_step_control: ``set_pre_step_control`` callbacks run before every substep.
        contacts: geoms collide (contact dynamics).
        deterministic: identical inputs give bit-identical trajectories for any
            ``num_envs`` and thread count.
        divergence_detection: ``step`` reports diverged envs and keeps their last finite state.
        keyframes: ``get_keyframe_qpos`` reads model keyframes.
        rendering: pictures of the state (``render``, ``get_camera_images``,
            ``get_point_cloud``); ``get_play_capabilities()`` names the renderers.
        contact_forces: ``get_body_contact_force_w``: each body's net contact force (normal and
            friction) in the last substep, world frame (with the ``contact_sensing`` option).
        snapshot_restore: full simulator snapshot and restore (``get_physics_state`` /
            ``set_physics_state``).
        snapshot_exact: a restored snapshot continues bit for bit as the original
            did (otherwise the engine keeps caches a snapshot cannot hold, and the
            continuation agrees to the tolerance the backend documents).
        ray_casting: rays against the collision geoms of every env
            (``create_height_scanner``).
        hfield_slope_contacts: a box let down on a height field's slope rests where MuJoCo's
            collision holds it (the conformance suite's terrain clause). MuJoCo Warp 4.0.0
            declares it absent: its height-field collision makes spurious deep contacts under
            tilted boxes (normal straight down), which kick them off the slope (upstream
            mujoco_warp issues 736 and 831); spheres and level boxes rest as on MuJoCo.
        cuda_graphs: with deferred checks, ``step``, the getters and ``set_state`` with a mask
            and N rows can be captured in a caller's ``torch.cuda.graph`` (every kernel on the
            capturing stream, nothing read back, nothing allocated outside the graph's pool):
            :class:`simbackend.graphs.CapturedStep` replays a whole RL step.
        domain_randomization: ``"<term>:<phase>"`` domain-randomization entries the engine
            applies (:mod:`simbackend.randomization`; ``get_dr_capabilities()`` adds the
            contract's own terms).
        max_envs: the most envs one backend instance (or one process, where the
            engine's limit is per process) can hold; ``None`` for no limit
            beyond memory.
        delegated: the model elements whose physics this engine does not compute
            itself but takes from another engine each substep (delegated
            physics), one line each, e.g. ``"equality 'loop' (connect): MuJoCo's
            constraint force"``. Empty where the engine computes everything; a
            parity figure on such an element partly compares MuJoCo with itself.
        renderers_absent: ``(renderer, reason)`` pairs: renderers the engine has
            but cannot offer here (``get_play_capabilities().absent`` lists them).
        contact_buffers: ``(option, what it sizes)`` pairs: the keys of the engine's option block that
            size fixed per-env contact and constraint buffers (MuJoCo Warp's ``nconmax``, ``njmax``).
            A step that needs more than a buffer holds never truncates silently: the envs it overflowed
            are reported in ``info["diverged"]`` and keep their state. Empty where the engine's buffers
            grow as needed (``contract_tests/test_buffers.py`` skips such an engine).
        known_differences: the values of the loaded model the engine cannot hold as
            MuJoCo compiled them (:class:`KnownDifference`: e.g. a massless body given a
            positive mass); empty where it holds every value as compiled. The parity
            suite reports exactly these elements, within the declared values, as known
            differences rather than failures.
    """

    gpu: bool = False
    joint_types: frozenset[str] = frozenset({"free", "ball", "hinge", "slide"})
    actuator_kinds: frozenset[str] = frozenset({"motor", "position", "velocity"})
    sensor_types: frozenset[str] = CORE_SENSOR_TYPES
    body_forces: bool = True
    site_jacobians: bool = True
    pre_step_control: bool = True
    contacts: bool = True
    deterministic: bool = True
    divergence_detection: bool = True
    keyframes: bool = True
    rendering: bool = False
    contact_forces: bool = False
    snapshot_restore: bool = False
    snapshot_exact: bool = False
    ray_casting: bool = False
    hfield_slope_contacts: bool = True
    cuda_graphs: bool = False
    domain_randomization: frozenset[str] = field(default_factory=frozenset)
    max_envs: int | None = None
    delegated: frozenset[str] = field(default_factory=frozenset)
    renderers_absent: tuple[tuple[str, str], ...] = ()
    contact_buffers: tuple[tuple[str, str], ...] = ()
    known_differences: tuple[KnownDifference, ...] = ()

    def as_rows(self) -> list[tuple[str, str]]:
        """(capability, value) rows for tables, values rendered as short text."""
        rows = []
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool):
                text = "yes" if v else "no"
            elif v is None:
                text = "unlimited"
            elif f.name == "known_differences":
                text = "; ".join(d.text for d in v) if v else "-"
            elif isinstance(v, frozenset):
                text = ("; " if f.name == "delegated" else ", ").join(sorted(v)) if v else "-"
            elif isinstance(v, tuple):
                text = "; ".join(f"{name}: {why}" for name, why in v) if v else "-"
            else:
                text = str(v)
            rows.append((f.name, text))
        return rows
