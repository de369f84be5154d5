"""A terrain, described as data: :class:`TerrainConfig` (a dataclass, or the same fields as JSON).

Every field is checked when the config is made, and each failure is one line
naming the field as ``terrain.FIELD`` (``terrain.params.stairs_up.step_height``),
so that a bad terrain fails when the scene is built, never halfway through a
training run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, closest_names_hint

from .tiles import POSITIVE, TERRAIN_TYPES, height_bound, noise_steps, param_values

__all__ = [
    "BUILDS",
    "TerrainConfig",
    "DEFAULT_TYPES",
    "MAX_HEIGHT",
    "MAX_NOISE_STEPS",
    "MAX_OBSTACLES",
    "MAX_PIECES",
    "MAX_SAMPLES",
    "MAX_TILES",
]

#: how a terrain's tiles can be built (``TerrainConfig.build``), the default first
BUILDS = ("pieces", "height_field")
#: the default columns: every type, flat first
DEFAULT_TYPES = tuple(TERRAIN_TYPES)
#: the most height samples a terrain holds (all tiles together): a bound on the scene's size in every engine
MAX_SAMPLES = 4_000_000
#: the most tiles (levels x columns): each is one or more geoms in every env's scene
MAX_TILES = 1000
#: the most geoms a terrain's tiles are built of, all together (the default terrain: 1,124): every engine
#: holds each in every env's scene, and MuJoCo poses every one at every step
MAX_PIECES = 20_000
#: the largest ``|height|`` (m) a tile may reach from its rim (at 0): a pit's depth, a pyramid's summit
MAX_HEIGHT = 100.0
#: the most steps rough ground's noise may span (``amplitude / step``)
MAX_NOISE_STEPS = 1_000_000
#: the most obstacles a tile's ``count`` may ask for (the other parameters are at most 100, in metres)
MAX_OBSTACLES = 1000


@dataclass(frozen=True)
class TerrainConfig:
    """A grid of sub-terrain tiles: rows are difficulty levels (along x), columns terrain types (along y).

    Attributes:
        types: the columns' terrain types (:data:`~simbackend.terrains.TERRAIN_TYPES`), in order; a
            type may repeat (more columns of it).
        levels: the rows: difficulty levels, level ``l`` at difficulty ``lo + (hi - lo) l / (levels - 1)``
            of ``difficulty = (lo, hi)`` (``lo`` when ``levels`` is 1).
        difficulty: ``(lo, hi)`` in ``[0, 1]``: the difficulty of the first and the last level.
        tile_size: the side of a square tile (m), a whole number of ``resolution`` steps.
        resolution: the distance between height samples (m).
        border: the width (m) of flat ground (height 0) around the grid.
        friction: the terrain's sliding friction (MuJoCo's first coefficient; the floor's is 1).
        seed: the seed of the random tiles (rough ground, obstacles, stones).
        params: ``{type: {param: (easy, hard)}}`` replacing the types' default parameter ranges.
        build: how the tiles are built (:data:`BUILDS`): ``pieces`` (each type as its surface is shaped:
            boxes, convex prisms, a height field for rough ground) or ``height_field`` (one height field per
            tile, the first edition's build, over the same sample heights).
    """

    types: Sequence[str] = DEFAULT_TYPES
    levels: int = 5
    difficulty: tuple[float, float] = (0.0, 1.0)
    tile_size: float = 8.0
    resolution: float = 0.1
    border: float = 4.0
    friction: float = 1.0
    seed: int = 0
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    build: str = "pieces"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        types = self.types
        if isinstance(types, str) or not isinstance(types, Sequence) or not types:
            raise ArgumentTypeError(f"terrain.types: expected a non-empty list of terrain types, got {types!r}")
        if len(types) > MAX_TILES:
            raise InvalidArgumentError(f"terrain.types: {len(types)} columns, more than {MAX_TILES} tiles in all")
        for i, t in enumerate(types):
            if not isinstance(t, str):
                raise ArgumentTypeError(
                    f"terrain.types: types[{i}]: expected a terrain type name, got {type(t).__name__} {checks.short_repr(t)}"
                )
            if t not in TERRAIN_TYPES:
                raise InvalidArgumentError(
                    f"terrain.types: unknown terrain type {t!r}{closest_names_hint(str(t), TERRAIN_TYPES)};"
                    f" known: {list(TERRAIN_TYPES)}"
                )
        set_(self, "types", tuple(types))
        set_(self, "levels", checks.integer(self.levels, "terrain.levels", minimum=1, maximum=100))
        if self.levels * len(self.types) > MAX_TILES:
            raise InvalidArgumentError(
                f"terrain.levels: {self.levels} levels x {len(self.types)} types are"
                f" {self.levels * len(self.types)} tiles, more than {MAX_TILES}; use fewer levels or types"
            )
        set_(self, "difficulty", _pair(self.difficulty, "terrain.difficulty", 0.0, 1.0))
        set_(self, "tile_size", checks.real(self.tile_size, "terrain.tile_size", minimum=0.5, maximum=100.0))
        res = checks.real(self.resolution, "terrain.resolution", minimum=0.005, maximum=self.tile_size / 2)
        steps = self.tile_size / res
        if abs(steps - round(steps)) > 1e-6 * steps:
            raise InvalidArgumentError(
                f"terrain.resolution: tile_size {self.tile_size} m is not a whole number of {res} m steps"
            )
        set_(self, "resolution", res)
        samples = (round(steps) + 1) ** 2 * len(self.types) * self.levels
        if samples > MAX_SAMPLES:
            raise InvalidArgumentError(
                f"terrain.resolution: {samples} height samples in all ({self.levels} levels x {len(self.types)}"
                f" types of {round(steps) + 1}^2), more than {MAX_SAMPLES}; use fewer tiles or a coarser resolution"
            )
        set_(self, "border", checks.real(self.border, "terrain.border", minimum=0.0, maximum=1000.0))
        set_(self, "friction", checks.real(self.friction, "terrain.friction", minimum=0.0, maximum=10.0))
        set_(self, "seed", checks.integer(self.seed, "terrain.seed", minimum=0, maximum=2**63 - 1))
        set_(self, "params", _params(self.params))
        if not isinstance(self.build, str) or self.build not in BUILDS:
            raise InvalidArgumentError(f"terrain.build: expected one of {list(BUILDS)}, got {self.build!r}")
        self._check_heights()

    def _check_heights(self) -> None:
        """Every tile's noise levels and heights within their bounds, from the parameters at each level
        (before any tile is drawn): a hostile parameter is refused here, never allocated or overflowed."""
        for kind in dict.fromkeys(self.types):
            for level in range(self.levels):
                d = self.level_difficulty(level)
                p = param_values(kind, d, self.params.get(kind))
                if kind == "rough" and noise_steps(p["amplitude"], p["step"]) > MAX_NOISE_STEPS:
                    raise InvalidArgumentError(
                        f"terrain.params.rough.step: amplitude {p['amplitude']:g} m in steps of {p['step']:g} m at"
                        f" level {level} is more than {MAX_NOISE_STEPS} steps; use a larger step"
                    )
                bound = height_bound(kind, p, self.tile_size)
                if not bound <= MAX_HEIGHT:
                    values = ", ".join(f"{k} {v:g}" for k, v in p.items())
                    raise InvalidArgumentError(
                        f"terrain.params.{kind}: at level {level} ({values}) a {self.tile_size:g} m tile reaches"
                        f" {bound:.3g} m from its rim, more than {MAX_HEIGHT:g} m"
                    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], argument: str = "terrain") -> TerrainConfig:
        """A config from JSON-like data, unknown keys refused by name."""
        if not isinstance(data, Mapping):
            raise ArgumentTypeError(f"{argument}: expected an object of terrain fields, got {type(data).__name__}")
        known = [f.name for f in fields(cls)]
        for key in data:
            if key not in known:
                raise InvalidArgumentError(
                    f"{argument}: unknown field {key!r}{closest_names_hint(str(key), known)}; known: {known}"
                )
        return cls(**dict(data))

    @classmethod
    def load(cls, source: TerrainConfig | Mapping[str, Any] | str | os.PathLike) -> TerrainConfig:
        """A config from a config, a mapping, or a JSON file."""
        if isinstance(source, TerrainConfig):
            return source
        if isinstance(source, Mapping):
            return cls.from_dict(source)
        if isinstance(source, (str, os.PathLike)):
            try:
                with open(source) as f:
                    data = json.load(f)
            except OSError as e:
                raise InvalidArgumentError(f"terrain: cannot read {os.fspath(source)!r}: {e.strerror}") from None
            except json.JSONDecodeError as e:
                raise InvalidArgumentError(f"terrain: {os.fspath(source)!r} is not JSON: {e}") from None
            return cls.from_dict(data)
        raise ArgumentTypeError(
            f"terrain: expected a TerrainConfig, a mapping or a JSON file, got {type(source).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``from_dict`` makes the same config)."""
        d = asdict(self)
        d["types"] = list(self.types)
        d["difficulty"] = list(self.difficulty)
        d["params"] = {t: {k: list(v) for k, v in p.items()} for t, p in self.params.items()}
        return d

    def level_difficulty(self, level: int) -> float:
        """The difficulty of row ``level``."""
        lo, hi = self.difficulty
        return lo if self.levels == 1 else lo + (hi - lo) * level / (self.levels - 1)


def _pair(value: Any, argument: str, lo: float | None = None, hi: float | None = None) -> tuple[float, float]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise InvalidArgumentError(f"{argument}: expected a pair [easy, hard], got {value!r}")
    a, b = (checks.real(v, argument, minimum=lo, maximum=hi) for v in value)
    return a, b


def _params(params: Any) -> dict[str, dict[str, tuple[float, float]]]:
    if not isinstance(params, Mapping):
        raise ArgumentTypeError(f"terrain.params: expected {{type: {{param: [easy, hard]}}}}, got {params!r}")
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for kind, given in params.items():
        if kind not in TERRAIN_TYPES:
            raise InvalidArgumentError(
                f"terrain.params: unknown terrain type {kind!r}{closest_names_hint(str(kind), TERRAIN_TYPES)}"
            )
        if not isinstance(given, Mapping):
            raise ArgumentTypeError(f"terrain.params.{kind}: expected {{param: [easy, hard]}}, got {given!r}")
        known = TERRAIN_TYPES[kind]
        out[kind] = {}
        for name, pair in given.items():
            if name not in known:
                hint = closest_names_hint(str(name), known) if known else ""
                raise InvalidArgumentError(
                    f"terrain.params.{kind}: {kind} has no parameter {name!r}{hint}; it has {list(known)}"
                )
            arg = f"terrain.params.{kind}.{name}"
            a, b = _pair(pair, arg, 0.0, float(MAX_OBSTACLES) if name == "count" else 100.0)
            if name in POSITIVE and min(a, b) <= 0:
                raise InvalidArgumentError(f"{arg}: expected numbers > 0, got {[a, b]}")
            out[kind][name] = (a, b)
    return out
