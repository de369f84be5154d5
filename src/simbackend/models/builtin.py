"""The built-in models: the MJCF files shipped in ``assets/``, by name."""

from __future__ import annotations

from pathlib import Path

from simbackend.errors import ModelLoadError, closest_names_hint

ASSETS = Path(__file__).resolve().parent / "assets"


def builtin_models() -> tuple[str, ...]:
    """Names of the models shipped with the package, sorted."""
    return tuple(sorted(p.stem for p in ASSETS.glob("*.xml")))


def builtin_model_path(name: str) -> Path:
    """Path of built-in model ``name``; raises :class:`ModelLoadError` for unknown names."""
    path = ASSETS / f"{name}.xml"
    if not path.is_file():
        raise ModelLoadError(f"no built-in model named {name!r}{closest_names_hint(name, builtin_models())}")
    return path
