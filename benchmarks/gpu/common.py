"""What every stage of the GPU check shares: the stage context, results written as they come, clocks and memory.

A stage runs in its own process (benchmarks/gpu/run.py starts it and cuts it at its time budget), so whatever it has
recorded must already be on disk when it is cut: `Recorder` rewrites the stage's JSON file after every `set`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the benchmarks this check reuses (bench_training_step, bench_decoding, ...)
    sys.path.insert(0, str(BENCHMARKS))


class SkipStage(Exception):
    """Raised by a stage that cannot run here; its message is the reason written into the report."""


@dataclass
class Context:
    """What a stage is told: the device, smoke or real sizes, a scratch folder, its deadline, earlier results."""

    device: str
    smoke: bool
    work: Path
    deadline: float
    earlier: dict = field(default_factory=dict)  # results of the stages that ran before, by stage name

    def left(self) -> float:
        """Seconds left before the runner cuts this stage."""
        return self.deadline - time.monotonic()

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")


class Recorder:
    """A stage's results, rewritten atomically to `path` after every change (a cut stage keeps what it had)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.data: dict = {}

    def set(self, key: str, value) -> None:
        self.data[key] = value
        self.flush()

    def append(self, key: str, value) -> None:
        self.data.setdefault(key, []).append(value)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, self.path)


def synchronize(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mib(device) -> float:
    """Peak memory: allocated on CUDA since the last reset; on the CPU the process's peak resident set (Linux)."""
    import resource

    import torch

    if torch.device(device).type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def versions() -> dict:
    """Versions of what the figures depend on (None: not installed)."""
    from importlib import metadata

    names = (
        "torch",
        "transformers",
        "accelerate",
        "tokenizers",
        "datasets",
        "evaluate",
        "huggingface_hub",
        "safetensors",
        "sacrebleu",
        "triton",
        "ctranslate2",
        "numpy",
    )
    found = {"python": sys.version.split()[0]}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def first_line(error: BaseException, limit: int = 300) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text[:limit]
