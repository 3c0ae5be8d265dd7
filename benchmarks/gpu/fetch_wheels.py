#!/usr/bin/env python
"""Fetch exactly the wheels the GPU image lacks into .whl/ and prove offline that they install there.

    python benchmarks/gpu/fetch_wheels.py            # needs PyPI once; then the proof runs offline

1. `pip download --no-deps` of each pin of wheels.txt for Python 3.12, manylinux x86_64, into REPO/.whl (ignored by
   git; the device tool carries it with `carry: [".whl"]`); any other wheel there is removed, so the folder holds
   exactly this set.
2. The set must stay under 40 MiB (the device tool carries at most 64 MiB with the working tree).
3. Offline proof: a Python 3.12 virtual environment in /tmp holding stub distributions of the image's packages
   (image_packages.txt: name and version only), then `pip install --dry-run --no-index --find-links .whl` of the
   pins there, which must resolve to exactly the carried wheels: every other requirement met by the image.
run_on_gpu.sh repeats step 3 on the image itself, against what it really has.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WHEELS = REPO / ".whl"
LIMIT_MIB = 40
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
STUB = Path("/tmp/vaswani_gpu_image_stub")


def read_pins(path: Path) -> list[str]:
    """`name==version` lines, comments and blanks dropped."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def download(pins: list[str]) -> list[Path]:
    WHEELS.mkdir(exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *platforms,
            "-d",
            str(WHEELS),
            *pins,
        ],
        check=True,
    )
    wanted = {canonical(p.split("==")[0]): p.split("==")[1] for p in pins}
    kept = []
    for wheel in sorted(WHEELS.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        if wanted.get(canonical(name)) == version:
            kept.append(wheel)
        else:
            wheel.unlink()  # a wheel of another package or version: the set is exactly wheels.txt
            print(f"removed {wheel.name} (not in wheels.txt)")
    return kept


def find_python312() -> str:
    """$PYTHON312, a pyenv 3.12 build, or python3.12 on PATH, whichever runs first (pyenv shims may not)."""
    pyenv = sorted(map(str, Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")))
    candidates = [os.environ.get("PYTHON312"), *pyenv, shutil.which("python3.12")]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    sys.exit("fetch_wheels: no working python3.12 (set PYTHON312): the dry run needs the GPU image's Python version")


def stub_environment(packages: list[str]) -> Path:
    """A Python 3.12 venv whose site-packages holds one metadata-only distribution per image package."""
    python312 = find_python312()
    if STUB.exists():
        shutil.rmtree(STUB)
    subprocess.run([python312, "-m", "venv", str(STUB)], check=True)
    site = next(STUB.glob("lib/python3.12/site-packages"))
    for pin in packages:
        name, version = pin.split("==")
        info = site / f"{canonical(name).replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("stub\n")
        (info / "RECORD").write_text("")
    return STUB / "bin" / "python"


def dry_run(python: Path, pins: list[str]) -> list[str]:
    """What pip would install offline from .whl into the stub image: `name==version` of each."""
    report = STUB / "report.json"
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)  # no index, no find-links or constraints but ours
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--dry-run",
            "--no-index",
            "--find-links",
            str(WHEELS),
            "--report",
            str(report),
            *pins,
        ],
        check=True,
        env=env,
    )
    installs = json.loads(report.read_text())["install"]
    return sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs)


def main() -> int:
    pins = read_pins(HERE / "wheels.txt")
    wheels = download(pins)
    total = sum(w.stat().st_size for w in wheels) / 2**20
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{total:7.2f} MiB  in all ({len(wheels)} wheels; limit {LIMIT_MIB} MiB)")
    if total >= LIMIT_MIB or len(wheels) != len(pins):
        print(f"fetch_wheels: FAILED: {len(wheels)}/{len(pins)} wheels, {total:.1f} MiB", file=sys.stderr)
        return 1
    would = dry_run(stub_environment(read_pins(HERE / "image_packages.txt")), pins)
    print("offline dry run against the image's packages would install: " + ", ".join(would))
    if {canonical(w) for w in would} != {canonical(p) for p in pins}:
        print("fetch_wheels: FAILED: the dry run wants other packages than the carried set", file=sys.stderr)
        return 1
    print("fetch_wheels: OK: exactly the carried wheels, every other requirement met by the image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
