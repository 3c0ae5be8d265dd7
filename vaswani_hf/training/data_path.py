"""How training batches travel from the dataset to the device: DataLoader workers, pinned memory, prefetch and
non-blocking copies, chosen for the device of the run (CPU runs are unchanged by this choice).

On a CUDA device the step runs asynchronously: the host queues the kernels of a step and comes back long before the
GPU is done (a step of ours reads nothing back to the host, see `objective`). The next batch is collated in that
time, so collation (a few tensor fills) costs nothing with 0 workers; what matters is the copy to the device. From
pageable memory `tensor.to("cuda")` is synchronous and staged; from pinned (page-locked) memory with
`non_blocking=True` it is a DMA that overlaps the running step. So on CUDA: `pin_memory=True` and Accelerate's
`non_blocking` device placement (transformers' `accelerator_config={"non_blocking": True}`). Workers are the
recipe's (`dataloader_num_workers`, 0 in the bundled recipes so that the tokens/s and padding statistics, counted by
the collator in the process that runs it, are kept); -1 chooses them: 2 per process on CUDA when the CPUs allow,
with `persistent_workers` (no re-fork per epoch and per evaluation) and `prefetch_factor` 4 (batches queued per
worker). On the CPU nothing is pinned and nothing is prefetched: the batches are already where the step runs.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

AUTO = -1  # dataloader_num_workers: choose by device
CUDA_WORKERS = 2  # per process: collation is light; two keep a batch ready while the other is being pinned
CUDA_PREFETCH = 4  # batches queued per worker (torch's default is 2)


@dataclass(frozen=True)
class DataPath:
    """The DataLoader settings of a run, as `Seq2SeqTrainingArguments` names them (`training_arguments`)."""

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


def choose_data_path(device: str, num_workers: int = 0, *, processes: int = 1, cpu_count: int | None = None,
                     pin_memory: bool | None = None, prefetch_factor: int | None = None) -> DataPath:
    """The data path for a run on `device` ("cpu", "cuda", "cuda:0", "mps", ...) with `processes` processes on this
    machine: see the module docstring. `num_workers` -1 chooses; `pin_memory` and `prefetch_factor` None choose;
    any other value is kept (the recipe overrides). Pure: it reads the device's name, not the hardware."""
    cuda = device.split(":")[0] == "cuda"
    if num_workers == AUTO:
        spare = (cpu_count or os.cpu_count() or 1) // max(1, processes) - 1  # one core per process runs the step
        num_workers = min(CUDA_WORKERS, max(0, spare)) if cuda else 0
    if num_workers < 0:
        raise ValueError(f"num_workers must be -1 (auto) or >= 0, got {num_workers}")
    if prefetch_factor is None and cuda and num_workers > 0:
        prefetch_factor = CUDA_PREFETCH
    return DataPath(
        num_workers=num_workers,
        pin_memory=cuda if pin_memory is None else pin_memory,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,  # torch refuses it without workers
        persistent_workers=cuda and num_workers > 0,
        non_blocking=cuda and (cuda if pin_memory is None else pin_memory),  # a non-blocking copy needs pinned memory
    )


__all__ = ["AUTO", "DataPath", "choose_data_path"]
