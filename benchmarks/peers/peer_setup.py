"""The peers' own virtual environments, created by the benchmark outside the repository (they are no dependency of
this project): ~/.cache/vaswani_hf_bench/venvs/<name> by default.

Each gets `torch==2.13.0` first, alone: that pins the CPU build this machine's pip finds (a plain torch requirement of
a later install would otherwise pull a multi-GB CUDA build), then the peer:
- eole: `eole==<version>` and `aiohttp`, which eole 0.6.4's command line imports (`eole/bin/tools/load_test.py`)
  without declaring it: without it, `eole train` fails at start-up with ModuleNotFoundError;
- marian: transformers at our installed version, datasets, accelerate, sacrebleu (what run_translation.py needs).
A venv counts as ready once `ready.json` (written after the last install succeeded, with the versions) exists.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEFAULT_ROOT = Path.home() / ".cache" / "vaswani_hf_bench" / "venvs"
TORCH = "torch==2.13.0"
PEERS = ("eole", "marian")
VERSION_PACKAGES = {
    "eole": ["torch", "eole", "numpy"],
    "marian": ["torch", "transformers", "datasets", "accelerate"],
    "ours": ["torch", "transformers", "datasets", "accelerate", "vaswani_hf"],
}


def requirements(name: str, eole_version: str) -> list[list[str]]:
    """The pip installs of a venv, in order."""
    if name == "eole":
        return [[TORCH], [f"eole=={eole_version}", "aiohttp"]]
    if name == "marian":
        import transformers

        return [[TORCH], [f"transformers=={transformers.__version__}", "datasets", "accelerate", "sacrebleu"]]
    raise ValueError(f"no environment for {name!r}")


def python(root: Path, name: str) -> Path:
    return root / name / "bin" / "python"


def ready(root: Path, name: str) -> bool:
    return python(root, name).is_file() and (root / name / "ready.json").is_file()


def versions(interpreter: str | Path, name: str) -> dict[str, str]:
    """Installed versions of the packages that matter for `name`, asked of that environment's interpreter."""
    code = (
        "import json, importlib.metadata as m\n"
        f"names = {VERSION_PACKAGES[name]!r}\n"
        "found = {}\n"
        "for n in names:\n"
        "    try: found[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(found))"
    )
    done = subprocess.run([str(interpreter), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def create(root: Path, name: str, eole_version: str, log: Path) -> dict[str, str]:
    """Create (or complete) the venv `name` under `root`; returns its versions. Raises CalledProcessError naming
    the failing step (its output is in `log`)."""
    folder = root / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        if not python(root, name).is_file():
            subprocess.run(
                [sys.executable, "-m", "venv", str(folder)], check=True, stdout=out, stderr=subprocess.STDOUT
            )
        for packages in requirements(name, eole_version):
            print(f"[{name}] pip install {' '.join(packages)}", flush=True)
            subprocess.run(
                [str(python(root, name)), "-m", "pip", "install", "-q", *packages],
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    found = versions(python(root, name), name)
    (folder / "ready.json").write_text(json.dumps(found, indent=2), encoding="utf-8")
    return found
