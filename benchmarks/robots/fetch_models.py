"""Fetch the third-party quadruped models the descriptions in this folder use.

The models come from two PyPI wheels (nothing is committed: ``models/`` is in
``.gitignore``):

* ``pybullet==3.2.7``: Unitree A1 (``pybullet_data/a1``)
  and Unitree Aliengo (``pybullet_data/aliengo``);
* ``genesis-world==1.4.5``: Unitree Go2 (``genesis/assets/urdf/go2``).

The wheels are downloaded with ``pip download --no-deps`` into a cache folder
(``--dest``, default ``~/.cache/simbackend/robot_wheels``) unless they are
there, checked against their SHA-256, and only the robot folders (URDF and
meshes) are extracted into ``models/<robot>/``, with the wheel's license file
beside them. A robot whose folder is complete (its ``.fetched.json`` lists
every file, and every file is there) is not touched: a second run uses no
network and writes nothing.

    python benchmarks/robots/fetch_models.py
    python benchmarks/robots/fetch_models.py --dest /tmp/wheels --robot a1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
MANIFEST = ".fetched.json"


@dataclass(frozen=True)
class Wheel:
    requirement: str
    filename: str
    sha256: str
    license_member: str
    # pybullet's wheels are per platform: pin the one whose hash is recorded, so
    # that any host downloads the same file (the models are data, not code).
    platform: str | None = None
    python_version: str | None = None


@dataclass(frozen=True)
class Robot:
    name: str
    wheel: Wheel
    prefix: str  # folder in the wheel; its contents go to models/<name>/


PYBULLET = Wheel(
    requirement="pybullet==3.2.7",
    filename="pybullet-3.2.7-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    sha256="5d858abf7c12a21ef3ed351cf81dac1b5e486ec25c9ab59bfc84beb89034edff",
    license_member="pybullet-3.2.7.dist-info/LICENSE.txt",
    platform="manylinux2014_x86_64",
    python_version="3.11",
)
GENESIS = Wheel(
    requirement="genesis-world==1.4.5",
    filename="genesis_world-1.4.5-py3-none-any.whl",
    sha256="7ce8fcc8b0af9a87907e550b5f373b27af3f6ca622e843ce12dc51e8a93a03fd",
    license_member="genesis_world-1.4.5.dist-info/licenses/LICENSE",
)
ROBOTS = {
    r.name: r
    for r in (
        Robot("a1", PYBULLET, "pybullet_data/a1/"),
        Robot("go2", GENESIS, "genesis/assets/urdf/go2/"),
        Robot("aliengo", PYBULLET, "pybullet_data/aliengo/"),
    )
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_complete(folder: Path) -> bool:
    """True when ``folder``'s manifest lists files that are all present."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(files) and all((folder / f).is_file() for f in files)


def ensure_wheel(wheel: Wheel, dest: Path) -> Path:
    """The wheel's path in ``dest``, downloading it with pip when it is absent."""
    path = dest / wheel.filename
    if not path.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        if wheel.platform is not None:
            cmd += ["--platform", wheel.platform]
        if wheel.python_version is not None:
            cmd += ["--python-version", wheel.python_version]
        cmd += ["--dest", str(dest), wheel.requirement]
        print("downloading:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        if not path.is_file():
            raise SystemExit(f"--dest: pip did not leave {wheel.filename} in {dest}")
    digest = sha256(path)
    if digest != wheel.sha256:
        raise SystemExit(
            f"--dest: {path} has SHA-256 {digest}, expected {wheel.sha256} (delete it to download it again)"
        )
    return path


def extract(robot: Robot, wheel_path: Path, models: Path) -> list[str]:
    """Extract ``robot``'s folder (and the wheel's license) into ``models/<name>``."""
    target = models / robot.name
    staging = models / f".{robot.name}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    files: list[str] = []
    with zipfile.ZipFile(wheel_path) as zf:
        members = [m for m in zf.infolist() if m.filename.startswith(robot.prefix) and not m.is_dir()]
        if not members:
            raise SystemExit(f"{wheel_path.name} has no folder {robot.prefix}")
        copies = [(m, PurePosixPath(m.filename).relative_to(robot.prefix)) for m in members]
        license_rel = PurePosixPath(f"LICENSE.{wheel_path.name.split('-')[0]}.txt")
        copies.append((zf.getinfo(robot.wheel.license_member), license_rel))
        for member, rel in copies:
            if rel.is_absolute() or ".." in rel.parts:
                raise SystemExit(f"{wheel_path.name}: unsafe member name {member.filename}")
            out = staging.joinpath(*rel.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            files.append(rel.as_posix())
    manifest = {
        "wheel": wheel_path.name,
        "sha256": robot.wheel.sha256,
        "folder": robot.prefix,
        "files": sorted(files),
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return sorted(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dest",
        type=Path,
        default=Path.home() / ".cache" / "simbackend" / "robot_wheels",
        help="folder the wheels are downloaded to (and read from when present)",
    )
    parser.add_argument(
        "--models",
        type=Path,
        default=HERE / "models",
        help="folder the robot folders are extracted into (default: models/ beside this script)",
    )
    parser.add_argument(
        "--robot",
        action="append",
        choices=sorted(ROBOTS),
        help="fetch only this robot (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    names = args.robot or list(ROBOTS)
    models: Path = args.models
    models.mkdir(parents=True, exist_ok=True)
    for name in names:
        robot = ROBOTS[name]
        target = models / name
        if is_complete(target):
            print(f"{name}: already extracted in {target}")
            continue
        wheel_path = ensure_wheel(robot.wheel, args.dest)
        files = extract(robot, wheel_path, models)
        size = sum((target / f).stat().st_size for f in files)
        print(f"{name}: {len(files)} files ({size / 1e6:.1f} MB) from {wheel_path.name}")
        print(f"  {robot.prefix} -> {target}")
        for f in files:
            if f.endswith(".urdf") or f.startswith("LICENSE") or "license" in f.lower():
                print(f"  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
