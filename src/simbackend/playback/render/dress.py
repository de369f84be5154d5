"""The dress: a floor, a light and a sky for pictures of models that bring none.

Control models (a pendulum, a cart-pole) often have no floor, no light but
MuJoCo's headlight, and no skybox, so their pictures are thin lines on black. As
dm_control and mjlab do for their own scenes, a dressed picture adds what the
model lacks, and nothing else:

* **a floor** where the model has no ground (no upward plane of the world body,
  no height field): a checkerboard just below the lowest point the model's moving
  parts reach (:attr:`~simbackend.playback.render.framing.MovingParts.floor_z`),
  its squares fixed in the world (a tracked body is seen moving over them),
  covering the area around the camera's target, on a plain plane to the horizon;
* **a light** where the model has none: a directional light from above and in
  front, casting shadows;
* **a sky** where the model has no skybox texture: a vertical gradient behind
  everything drawn (pixels the rgb pass left at the far plane).

The dress is added to the scene for the rgb image only, after MuJoCo has built
the scene, and taken out before depth or segmentation are drawn: it is never in
depth, segmentation or point clouds, it changes nothing in the model, and a
geom id means the same with and without it. Its geoms are scene decor
(``objtype`` unknown, no segmentation id).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from simbackend.playback.render.framing import MovingParts, has_ground

__all__ = ["Dress"]

_GEOM_PLANE = int(mujoco.mjtGeom.mjGEOM_PLANE)
_LIGHT_DIRECTIONAL = int(mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
_TEX_SKYBOX = int(mujoco.mjtTexture.mjTEXTURE_SKYBOX)
_OBJ_UNKNOWN = int(mujoco.mjtObj.mjOBJ_UNKNOWN)
_CAT_DECOR = int(mujoco.mjtCatBit.mjCAT_DECOR)
_EYE = np.eye(3).reshape(-1)

#: the floor's two colours (RGBA) and the sky's, top of the picture to bottom (RGB, 0-255)
FLOOR_RGBA = (np.array([0.36, 0.40, 0.46, 1.0], np.float32), np.array([0.30, 0.34, 0.40, 1.0], np.float32))
SKY_TOP = np.array([104, 132, 170], np.float32)
SKY_BOTTOM = np.array([206, 216, 228], np.float32)
#: the checkerboard covers a square of this many radii of the moving parts around the camera's target
CHECKER_HALF_WIDTH = 5.0
#: at most this many squares are drawn (larger ones cover a larger area); a scene keeps room for them
MAX_SQUARES = 400
#: the floor, plain beyond the checkerboard, covers a square of this many radii around the target
FLOOR_HALF_WIDTH = 8.0


def _nice_length(x: float) -> float:
    """The length of the 1-2-5 series (…, 0.1, 0.2, 0.5, 1, 2, …) nearest ``x`` from below."""
    e = 10.0 ** math.floor(math.log10(x))
    return e * max(k for k in (1.0, 2.0, 5.0) if k * e <= x * (1 + 1e-9))


@dataclass
class Dress:
    """What a model lacks for a picture, and how to add it to a scene (see the module docstring).

    Attributes:
        floor: add a floor (the model has no ground).
        light: add a light (the model has none).
        sky: draw a sky (the model has no skybox).
        parts: the model's moving parts (floor height, size of the squares).
    """

    floor: bool
    light: bool
    sky: bool
    parts: MovingParts

    @classmethod
    def of(cls, model: Any, parts: MovingParts) -> Dress:
        """The dress ``model`` needs."""
        sky = not bool((np.asarray(model.tex_type) == _TEX_SKYBOX).any()) if model.ntex else True
        return cls(floor=not has_ground(model), light=model.nlight == 0, sky=sky, parts=parts)

    def squares(self, target: np.ndarray, cover: float = 0.0) -> tuple[float, list[tuple[float, float]]]:
        """``(side, centres)`` of the checkerboard's dark squares around ``target``: squares of a
        round side near the parts' radius (doubled until at most :data:`MAX_SQUARES`), on
        the world's grid, covering :data:`CHECKER_HALF_WIDTH` radii plus ``cover`` metres."""
        reach = CHECKER_HALF_WIDTH * self.parts.radius + cover
        t = _nice_length(self.parts.radius)
        while (2 * reach / t + 2) ** 2 / 2 > MAX_SQUARES:  # an upper bound of the dark squares drawn
            t *= 2
        i0, i1 = math.floor((target[0] - reach) / t), math.ceil((target[0] + reach) / t)
        j0, j1 = math.floor((target[1] - reach) / t), math.ceil((target[1] + reach) / t)
        return t, [((i + 0.5) * t, (j + 0.5) * t) for i in range(i0, i1) for j in range(j0, j1) if (i + j) % 2]

    def add(self, scene: Any, target: np.ndarray, cover: float = 0.0) -> tuple[int, int]:
        """Add the floor and the light to ``scene`` around ``target`` (the camera's target,
        world frame), the checkerboard reaching ``cover`` metres further (a tiled grid).
        Returns the scene's ``(ngeom, nlight)`` before, for :meth:`remove`."""
        before = (scene.ngeom, scene.nlight)
        r = self.parts.radius
        z = self.parts.floor_z - 0.02 * r
        if self.floor:
            t, squares = self.squares(target, cover)
            half = FLOOR_HALF_WIDTH * r + cover
            self._plane(scene, (float(target[0]), float(target[1]), z), half, half / 8, FLOOR_RGBA[0])
            lift = z + 1e-3 * r
            for x, y in squares:
                if not self._plane(scene, (x, y, lift), t / 2, t, FLOOR_RGBA[1]):
                    break
        if self.light and scene.nlight < len(scene.lights):
            light = scene.lights[scene.nlight]
            direction = np.array([0.3, 0.45, -1.0])
            direction /= np.linalg.norm(direction)
            light.type = _LIGHT_DIRECTIONAL
            light.headlight = 0
            light.castshadow = 1
            light.texid = -1
            light.dir[:] = direction
            light.pos[:] = np.asarray(target, np.float64) - 3 * r * direction
            light.ambient[:] = (0.15, 0.15, 0.15)
            light.diffuse[:] = (0.6, 0.6, 0.6)
            light.specular[:] = (0.2, 0.2, 0.2)
            light.attenuation[:] = (1.0, 0.0, 0.0)
            light.cutoff, light.exponent, light.intensity = 90.0, 0.0, 0.0
            light.bulbradius, light.range = 0.02, 10.0 * r
            scene.nlight = scene.nlight + 1
        return before

    @staticmethod
    def remove(scene: Any, before: tuple[int, int]) -> None:
        """Take the dress out of ``scene`` (the counts :meth:`add` returned)."""
        scene.ngeom, scene.nlight = before

    @staticmethod
    def _plane(scene: Any, pos: tuple[float, float, float], half: float, grid: float, rgba: np.ndarray) -> bool:
        """Append a horizontal square plane; False when the scene is full."""
        if scene.ngeom >= scene.maxgeom:
            return False
        g = scene.geoms[scene.ngeom]
        mujoco.mjv_initGeom(g, _GEOM_PLANE, np.array([half, half, grid]), np.array(pos, np.float64), _EYE, rgba)
        g.objtype, g.objid, g.category, g.segid = _OBJ_UNKNOWN, -1, _CAT_DECOR, -1
        g.castshadow, g.reflectance, g.shininess, g.specular = 0, 0.0, 0.0, 0.1
        scene.ngeom = scene.ngeom + 1
        return True

    def paint_sky(self, rgb: np.ndarray, background: np.ndarray) -> None:
        """Paint the sky into ``rgb`` ``(H, W, 3)`` uint8 (row 0 at the top) where ``background``:
        :data:`SKY_TOP` at the top row, :data:`SKY_BOTTOM` from the lowest row with background down."""
        rows = np.flatnonzero(background.any(axis=1))
        if rows.size == 0:
            return
        horizon = max(int(rows[-1]), 1)
        ramp = np.clip(np.arange(rgb.shape[0], dtype=np.float32) / horizon, 0.0, 1.0)[:, None]
        colours = (SKY_TOP * (1 - ramp) + SKY_BOTTOM * ramp).round().astype(np.uint8)  # (H, 3)
        np.copyto(rgb, colours[:, None, :], where=background[..., None])
