"""The dress: a floor, a light and a sky for pictures of models that bring none.

Control models (a pendulum, a cart-pole) often have no floor, no light but
MuJoCo's headlight, and no skybox, so their pictures are thin lines on black. As
dm_control and mjlab do for their own scenes, a dressed picture adds what the
model lacks:

* **a floor** where the model has no ground (no upward plane of the world body,
  no height field): a checkerboard just below the lowest point the model's moving
  parts reach (:attr:`~simbackend.playback.render.framing.MovingParts.floor_z`),
  its squares fixed in the world (a tracked body is seen moving over them),
  covering the area around the camera's target, on a plain plane;
* **a light** where the model has none: a directional light from above and in
  front, casting shadows;
* **a sky** where the model has no skybox texture: a vertical gradient behind
  everything drawn (pixels the rgb pass left at the far plane), and a **horizon**:
  the floor (the model's planes or the dress's) is laid out edge to edge, a
  little below itself, to well beyond where it fades, and a haze (MuJoCo's fog)
  blends everything farther than the subject into the sky's lowest colour, fully
  before that floor ends and before the far clipping plane. A finite floor's far
  edge, or the far plane's cut through an infinite one, never shows against the
  sky: the floor meets the sky at a soft, level horizon.

A dressed picture also gets clean shadows: the floor planes of the world body
cast none (a floor below everything shades nothing but itself: in MuJoCo's
shadow map, wherever a texel's depth and the floor's differ by more than the
map's depth bias, as under a slanting light or a large map, it shades itself
in stray dark dashes, "shadow acne"), and every directional light (the dress's, the model's, and the spot
and point lights a tiled view makes directional) is moved along its own
direction to shine from above the camera's target, its shadow map sized to the
subject (:data:`SHADOW_REACH` radii around it), so that every env of a tiled
view casts a shadow.

The dress is added to the scene for the rgb image only, after MuJoCo has built
the scene, and taken out before depth or segmentation are drawn: it is never in
depth, segmentation or point clouds, it changes nothing in the model, and a
geom id means the same with and without it. Its geoms are scene decor
(``objtype`` unknown, no segmentation id). A model that lacks nothing (its own
ground, light and skybox) is drawn as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from simbackend.playback.render.framing import MovingParts, has_ground

__all__ = ["Dress"]

_GEOM_PLANE = int(mujoco.mjtGeom.mjGEOM_PLANE)
_LIGHT_DIRECTIONAL = int(mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
_TEX_SKYBOX = int(mujoco.mjtTexture.mjTEXTURE_SKYBOX)
_OBJ_UNKNOWN = int(mujoco.mjtObj.mjOBJ_UNKNOWN)
_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_CAT_DECOR = int(mujoco.mjtCatBit.mjCAT_DECOR)
_FOG = int(mujoco.mjtRndFlag.mjRND_FOG)
_EYE = np.eye(3).reshape(-1)
#: the floor laid out to the horizon reaches this many haze depths around the target (plus the camera's
#: distance): fog goes by depth along the camera's axis, and a point off the axis at that depth is farther
_HORIZON_REACH = 1.5

#: the floor's two colours (RGBA) and the sky's, top of the picture to bottom (RGB, 0-255)
FLOOR_RGBA = (np.array([0.36, 0.40, 0.46, 1.0], np.float32), np.array([0.30, 0.34, 0.40, 1.0], np.float32))
SKY_TOP = np.array([104, 132, 170], np.float32)
SKY_BOTTOM = np.array([206, 216, 228], np.float32)
#: the checkerboard covers a square of this many radii of the moving parts around the camera's target
CHECKER_HALF_WIDTH = 5.0
#: at most this many squares are drawn (larger ones cover a larger area); a scene keeps room for them
MAX_SQUARES = 400
#: the dress's floor (plain beyond the checkerboard) covers a square of this many radii around the target
FLOOR_HALF_WIDTH = 8.0
#: the haze starts this many radii of the moving parts behind the farthest of them, and is complete
#: this many camera distances (to the target, plus a tiled view's reach) farther
HAZE_START, HAZE_DEPTH = 1.0, 2.5
#: at most this many copies of the floor lay it out to the horizon (a plain floor's copies grow
#: to stay within it; a textured one's haze comes closer); a scene keeps room for them
MAX_HORIZON_TILES = 144
#: a directional light's shadow map covers this many radii of the moving parts around the target
#: (plus a tiled view's reach)
SHADOW_REACH = 3.0


def _nice_length(x: float) -> float:
    """The length of the 1-2-5 series (…, 0.1, 0.2, 0.5, 1, 2, …) nearest ``x`` from below."""
    e = 10.0 ** math.floor(math.log10(x))
    return e * max(k for k in (1.0, 2.0, 5.0) if k * e <= x * (1 + 1e-9))


def _set_gl_fog(context: Any) -> None:
    """Load ``context``'s fog settings into OpenGL (MuJoCo does it once, when it makes the context)."""
    from OpenGL import GL

    for _ in range(8):  # errors MuJoCo left unread are not ours to raise
        if GL.glGetError() == GL.GL_NO_ERROR:
            break
    GL.glFogf(GL.GL_FOG_START, float(context.fogStart))
    GL.glFogf(GL.GL_FOG_END, float(context.fogEnd))
    GL.glFogfv(GL.GL_FOG_COLOR, np.asarray(context.fogRGBA, np.float32))


@dataclass
class _Undo:
    """What :meth:`Dress.add` changed in a scene and a rendering context, for :meth:`Dress.remove`."""

    ngeom: int
    nlight: int
    categories: list[tuple[int, int]] = field(default_factory=list)
    light_pos: list[tuple[int, np.ndarray]] = field(default_factory=list)
    fog: int | None = None
    haze: tuple[float, float] | None = None
    context: tuple[float, float, float, np.ndarray] | None = None


@dataclass
class Dress:
    """What a model lacks for a picture, and how to add it to a scene (see the module docstring).

    Attributes:
        floor: add a floor (the model has no ground).
        light: add a light (the model has none).
        sky: draw a sky and a horizon (the model has no skybox).
        parts: the model's moving parts (floor height, size of the squares).
        floor_geoms: the model's planes of the world body (geom ids): those facing up are floors.
        textured: the model's materials with a texture (material ids).
    """

    floor: bool
    light: bool
    sky: bool
    parts: MovingParts
    floor_geoms: frozenset[int] = frozenset()
    textured: frozenset[int] = frozenset()

    @classmethod
    def of(cls, model: Any, parts: MovingParts) -> Dress:
        """The dress ``model`` needs."""
        sky = not bool((np.asarray(model.tex_type) == _TEX_SKYBOX).any()) if model.ntex else True
        planes = (np.asarray(model.geom_bodyid) == 0) & (np.asarray(model.geom_type) == _GEOM_PLANE)
        textures = np.asarray(model.mat_texid).reshape(model.nmat, int(mujoco.mjtTextureRole.mjNTEXROLE))
        return cls(
            floor=not has_ground(model),
            light=model.nlight == 0,
            sky=sky,
            parts=parts,
            floor_geoms=frozenset(int(g) for g in np.flatnonzero(planes)),
            textured=frozenset(int(m) for m in np.flatnonzero((textures >= 0).any(axis=1))),
        )

    @property
    def needed(self) -> bool:
        """The model lacks something (a floor, a light or a sky): otherwise it is drawn as it is."""
        return self.floor or self.light or self.sky

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

    def add(self, scene: Any, context: Any, target: np.ndarray, cover: float = 0.0) -> _Undo:
        """Add the dress to ``scene`` (drawn with the rendering ``context``) around ``target`` (the
        camera's target, world frame), the checkerboard reaching ``cover`` metres further (a
        tiled grid). Returns what it changed, for :meth:`remove`."""
        undo = _Undo(scene.ngeom, scene.nlight)
        if not self.needed:
            return undo
        r = self.parts.radius
        target = np.asarray(target, np.float64)
        floors = [j for j in range(scene.ngeom) if self._is_floor(scene.geoms[j])]
        for j in floors:  # floors cast no shadow (they would only shade themselves)
            undo.categories.append((j, int(scene.geoms[j].category)))
            scene.geoms[j].category = _CAT_DECOR
        if self.floor:
            z = self.parts.floor_z - 0.02 * r
            t, squares = self.squares(target, cover)
            half = FLOOR_HALF_WIDTH * r + cover
            if self._plane(scene, (float(target[0]), float(target[1]), z), half, half / 8, FLOOR_RGBA[0]):
                floors.insert(0, scene.ngeom - 1)
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
            light.pos[:] = target - 3 * r * direction
            light.ambient[:] = (0.15, 0.15, 0.15)
            light.diffuse[:] = (0.6, 0.6, 0.6)
            light.specular[:] = (0.2, 0.2, 0.2)
            light.attenuation[:] = (1.0, 0.0, 0.0)
            light.cutoff, light.exponent, light.intensity = 90.0, 0.0, 0.0
            light.bulbradius, light.range = 0.02, 10.0 * r
            scene.nlight = scene.nlight + 1
        self._aim_shadows(scene, context, target, cover, undo)
        if self.sky and floors:
            self._horizon(scene, context, [scene.geoms[j] for j in floors], target, cover, undo)
        return undo

    @staticmethod
    def remove(scene: Any, context: Any, undo: _Undo) -> None:
        """Take the dress out of ``scene`` and ``context`` (what :meth:`add` returned)."""
        scene.ngeom, scene.nlight = undo.ngeom, undo.nlight
        for j, category in undo.categories:
            scene.geoms[j].category = category
        for i, pos in undo.light_pos:
            scene.lights[i].pos[:] = pos
        if undo.fog is not None:
            scene.flags[_FOG] = undo.fog
        if undo.context is not None:
            context.shadowClip, context.fogStart, context.fogEnd, rgba = undo.context
            context.fogRGBA[:] = rgba
            if undo.fog is not None:
                _set_gl_fog(context)

    def _is_floor(self, g: Any) -> bool:
        """Scene geom ``g`` is a plane of the world body facing up."""
        return (
            g.objtype == _OBJ_GEOM
            and g.type == _GEOM_PLANE
            and g.objid in self.floor_geoms
            and float(np.asarray(g.mat).flat[8]) > 0.999
        )

    def _save_context(self, context: Any, undo: _Undo) -> None:
        if undo.context is None:
            undo.context = (context.shadowClip, context.fogStart, context.fogEnd, np.array(context.fogRGBA))

    def _aim_shadows(self, scene: Any, context: Any, target: np.ndarray, cover: float, undo: _Undo) -> None:
        """Move every directional light along its direction to shine from above ``target``, and size
        the shadow map of directional lights to the subject."""
        self._save_context(context, undo)
        r = self.parts.radius
        context.shadowClip = SHADOW_REACH * r + cover
        for i in range(scene.nlight):
            light = scene.lights[i]
            if light.headlight or light.type != _LIGHT_DIRECTIONAL:
                continue
            direction = np.asarray(light.dir, np.float64)
            pos = np.asarray(light.pos, np.float64)
            undo.light_pos.append((i, pos.copy()))
            # as far back along the light's direction as it was, at least clear of the subject
            back = max(float(np.dot(target - pos, direction)), 3 * r + cover)
            light.pos[:] = target - back * direction

    def _horizon(
        self, scene: Any, context: Any, floors: list[Any], target: np.ndarray, cover: float, undo: _Undo
    ) -> None:
        """Lay the first of ``floors`` (scene planes: a floor and its copies in a tiled view) out to the
        horizon under itself and haze it into the sky."""
        floor = floors[0]
        r = self.parts.radius
        cam = scene.camera
        eye = (np.asarray(cam[0].pos, np.float64) + np.asarray(cam[1].pos, np.float64)) / 2
        far = float(min(cam[0].frustum_far, cam[1].frustum_far))
        distance = float(np.linalg.norm(eye - target))
        start = distance + cover + HAZE_START * r
        end = min(start + HAZE_DEPTH * (distance + cover), 0.9 * far)
        # the floor is laid out over a square this far around the target (fog goes by depth along the
        # camera's axis: a point off the axis at depth `end` is farther)
        size = np.asarray(floor.size, np.float64)
        if size[0] > 0 and size[1] > 0:  # a finite plane (an infinite one reaches the far plane)
            reach = self._tile(scene, floors, target, _HORIZON_REACH * end + distance)
            end = min(end, (reach - distance) / _HORIZON_REACH)
        end = max(end, 1e-3 * r)
        start = min(start, 0.5 * end)
        self._save_context(context, undo)
        undo.fog = int(scene.flags[_FOG])
        scene.flags[_FOG] = 1
        undo.haze = (start, end)
        context.fogStart, context.fogEnd = start, end
        context.fogRGBA[:] = (*(SKY_BOTTOM / 255.0), 1.0)
        _set_gl_fog(context)

    def _tile(self, scene: Any, floors: list[Any], target: np.ndarray, reach: float) -> float:
        """Copies of the first of ``floors`` edge to edge, a little below it, covering ``reach`` metres
        around ``target`` (but where ``floors`` lie already); returns the reach covered (less where a
        textured floor would need too many)."""
        floor = floors[0]
        half = np.asarray(floor.size, np.float64)[:2]
        mat = np.asarray(floor.mat, np.float64).reshape(3, 3)
        pos = np.asarray(floor.pos, np.float64)
        local = (target - pos) @ mat[:, :2]
        textured = floor.matid in self.textured
        k = 1
        while True:
            side = 2 * half * k
            lo = np.floor((local - reach) / side + 0.5).astype(int)
            hi = np.ceil((local + reach) / side - 0.5).astype(int)
            count = int(np.prod(hi - lo + 1))
            if count <= MAX_HORIZON_TILES:
                break
            if textured:  # its texture repeats with the floor's size: cover less
                reach *= 0.8
            else:
                k *= 2
        if count > scene.maxgeom - scene.ngeom:  # no room (the renderer keeps enough): the floor alone
            return float(max(0.0, np.min(half - np.abs(local))))
        below = pos - 0.01 * self.parts.radius * mat[:, 2]
        size = np.array([half[0] * k, half[1] * k, 1.0])
        laid = set()  # cells the floor and its copies (a tiled view's) cover already
        if k == 1:
            for f in floors:
                if np.allclose(np.asarray(f.size)[:2], half):
                    cell = ((np.asarray(f.pos, np.float64) - pos) @ mat[:, :2]) / side
                    laid.add((round(float(cell[0])), round(float(cell[1]))))
        for i in range(lo[0], hi[0] + 1):
            for j in range(lo[1], hi[1] + 1):
                if (i, j) in laid:
                    continue
                g = scene.geoms[scene.ngeom]
                centre = below + side[0] * i * mat[:, 0] + side[1] * j * mat[:, 1]
                mujoco.mjv_initGeom(g, _GEOM_PLANE, size, centre, mat.reshape(-1), np.asarray(floor.rgba))
                g.matid, g.transparent = floor.matid, floor.transparent
                g.emission, g.specular, g.shininess, g.reflectance = (
                    floor.emission,
                    floor.specular,
                    floor.shininess,
                    0.0,
                )
                g.objtype, g.objid, g.category, g.segid = _OBJ_UNKNOWN, -1, _CAT_DECOR, -1
                scene.ngeom = scene.ngeom + 1
        return reach

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
