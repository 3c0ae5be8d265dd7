"""Choose how training batches travel to the device.

On CUDA the step runs asynchronously, so collating with 0 workers is free; what matters is the copy, which overlaps
the step when it comes from pinned memory with `non_blocking=True`. The number of workers is the recipe's: 0 in the
bundled recipes, because batch statistics are counted in the process that collates. A value of -1 chooses 2 persistent
workers per process on CUDA where the CPUs allow, each prefetching 4 batches. On the CPU nothing changes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

AUTO = -1  # This dataloader_num_workers value chooses by device.
CUDA_WORKERS = 2  # Workers per process: collation is light, and two keep a batch ready while another is pinned.
CUDA_PREFETCH = 4  # Batches queued per worker (torch's default is 2).


@dataclass(frozen=True)
class DataPath:
    """Hold the DataLoader settings of a run; `training_arguments` names them as `Seq2SeqTrainingArguments` does."""

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    non_blocking: bool = False

    def training_arguments(self) -> dict:
        values = asdict(self)
        non_blocking = values.pop("non_blocking")
        args = {f"dataloader_{k}": v for k, v in values.items()}
        if non_blocking:
            args["accelerator_config"] = {"non_blocking": True}
        return args


def choose_data_path(
    device: str,
    num_workers: int = 0,
    *,
    processes: int = 1,
    cpu_count: int | None = None,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
) -> DataPath:
    """Return the data path for `device` ("cpu", "cuda:0", ...) and `processes` on this machine. A value of -1 or None
    is chosen here; other values are kept. Only the device's name is read, not the hardware. The values are the
    recipe's, checked where the recipe is built (`dataloader_num_workers` and its neighbours)."""
    cuda = device.split(":")[0] == "cuda"
    if num_workers == AUTO:
        spare = (cpu_count or os.cpu_count() or 1) // max(1, processes) - 1  # One core per process runs the step.
        num_workers = min(CUDA_WORKERS, max(0, spare)) if cuda else 0
    if prefetch_factor is None and cuda and num_workers > 0:
        prefetch_factor = CUDA_PREFETCH
    return DataPath(
        num_workers=num_workers,
        pin_memory=cuda if pin_memory is None else pin_memory,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,  # torch refuses it without workers.
        persistent_workers=cuda and num_workers > 0,
        non_blocking=cuda and (cuda if pin_memory is None else pin_memory),  # A non-blocking copy needs pinned memory.
    )
