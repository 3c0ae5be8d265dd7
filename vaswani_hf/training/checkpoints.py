"""Write checkpoints atomically at time intervals, find them again for `--resume`, and average them (Section 6.1: "we
used a single model obtained by averaging the last 5 checkpoints, which were written at 10-minute intervals"); at the
end of a run, `average_last` averages its last checkpoints and loads the average. Reading the checkpoints into their
average is `io.averaging`'s, as reading one model folder is `io.models`'; writing the averaged folder is here.

transformers does none of this: it writes into the final folder, saves by steps or epochs, and `get_last_checkpoint`
takes the newest checkpoint whether it loads or not; only fairseq averages, in its own format.
"""

from __future__ import annotations

import errno
import logging
import os
import pickle
import re
import shutil
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import safetensors.torch
import torch
from transformers import TrainerCallback
from transformers.trainer_pt_utils import safe_globals
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints

from ..hub.folder import missing_code_files  # training may import hub, never the reverse.
from ..io import UsageError, apply_umask, atomic_output_dir, check_output_dir, check_safetensors, fsync_tree, proofs
from ..io.averaging import average_checkpoints
from ..io.files import CONFIG, TRAINER_STATE, read_json
from ..io.models import CODE_FILES, WEIGHTS, WEIGHTS_INDEX, copy_model_files

if TYPE_CHECKING:  # The plan's preflight reads the checkpoints, so this module does not import it.
    from .plan import RunPlan

logger = logging.getLogger(__name__)

STAGING_DIR = ".staging"
# A checkpoint holds these besides the model folder's files; averaged folders leave them out.
TRAINING_STATE_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "trainer_state.json",
    "training_args.bin",
    proofs.MANIFEST,
)


def publish_checkpoint(staged: Path, final: Path) -> None:
    """Move a complete `OUTPUT/.staging/checkpoint-N` to `OUTPUT/checkpoint-N` in one rename, so that a kill never
    leaves a half-written checkpoint for `--resume`."""
    earlier = None
    try:
        proofs.write_manifest(staged)  # Resume and averaging check every file against it.
        apply_umask(staged)
        fsync_tree(staged)
        if final.exists():  # The same step was saved twice (e.g. on time at the final step).
            earlier = staged.parent / f"{final.name}.earlier"
            os.rename(final, earlier)
        os.rename(staged, final)
        fsync_tree(final.parent, recursive=False)
    finally:  # Whatever happened (Ctrl-C too), leave a checkpoint-N in place and no staged part behind.
        if earlier is not None and earlier.exists() and not final.exists():
            os.rename(earlier, final)
        shutil.rmtree(staged.parent, ignore_errors=True)


# These messages are how torch.save reports a failed write, since its C++ writer keeps no errno.
_TORCH_WRITE_FAILED = ("unexpected pos", "file write failed", "PytorchStreamWriter failed")
LOW_SPACE_BYTES = 64 << 20  # Less free space after a failed write means the disk was full.


def _free_bytes(path: Path) -> int:
    for folder in (path, *path.parents):
        if folder.exists():
            return shutil.disk_usage(folder).free
    return 1 << 62


@contextmanager
def checkpoint_write_errors(staged: Path, final: Path) -> Iterator[None]:
    """Re-raise a full disk met by `torch.save` inside the block as OSError(ENOSPC), so that it reads as one.

    `torch.save` reports a failed write as a RuntimeError without an errno. When such an error comes while the staging
    folder's disk has at most LOW_SPACE_BYTES free, it is re-raised as OSError(ENOSPC) naming the final path of the
    newest staged file; any other RuntimeError passes through unchanged.
    """
    try:
        yield
    except RuntimeError as error:
        if not any(text in str(error) for text in _TORCH_WRITE_FAILED) or _free_bytes(staged) > LOW_SPACE_BYTES:
            raise
        written = sorted((p for p in staged.glob("*") if p.is_file()), key=lambda p: p.stat().st_mtime_ns)
        name = final / written[-1].name if written else final
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(name)) from error


def checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Return the `checkpoint-N` folders of `output_dir` (none if it does not exist), oldest step first."""
    return [Path(p) for p in sort_checkpoints(str(output_dir), PREFIX_CHECKPOINT_DIR, use_mtime=False)]


def last_checkpoints(output_dir: str | os.PathLike, n: int) -> list[Path]:
    """Return the `n` newest `checkpoint-N` folders of `output_dir` by step, oldest first; n <= 0 returns all."""
    found = checkpoints(output_dir)
    return found[-n:] if n > 0 else found


def rng_state_files(processes: int) -> list[str]:
    """Return the RNG-state files of `processes` processes, so a resume redraws the same dropout masks and batches."""
    return ["rng_state.pth"] if processes <= 1 else [f"rng_state_{rank}.pth" for rank in range(processes)]


class InconsistentCheckpoint(UsageError):
    """Refuse a checkpoint rather than pass over it: its trainer_state.json is of another step, so resuming would
    silently continue another run's state, or a file holds a pickle that torch's safe loader refuses (planted code)."""


def checkpoint_step(folder: Path) -> int | None:
    """Return the N of a `checkpoint-N` folder, or None for another name."""
    match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", Path(folder).name)
    return int(match.group(1)) if match else None


def check_checkpoint_state(folder: Path) -> dict:
    """Return the checkpoint's trainer_state.json (`TRAINER_STATE`), or raise InconsistentCheckpoint if it is not of
    the folder's own step N (`checkpoint-N`)."""
    path = folder / "trainer_state.json"
    state = read_json(path, TRAINER_STATE)
    step = checkpoint_step(folder)
    if step is not None and state["global_step"] != step:
        raise InconsistentCheckpoint(
            f"{path}: field global_step is {state['global_step']}, but the folder is {folder.name}: the state belongs "
            "to another step (copied from another checkpoint?); remove the checkpoint or restore its own "
            "trainer_state.json"
        )
    return state


def checkpoint_problem(folder: Path, processes: int = 1, rng: bool = True) -> str | None:
    """Return why `processes` processes cannot resume exactly from `folder`, or None if they can. The reason is a
    missing, broken or misshapen file (its RNG states included with `rng`) or one that differs from its checksum. A
    state of another step raises InconsistentCheckpoint."""
    if not (folder / WEIGHTS).is_file():
        return f"no {WEIGHTS}"
    try:
        check_safetensors(folder / WEIGHTS)
        read_json(folder / "config.json", CONFIG)
        check_checkpoint_state(folder)
    except InconsistentCheckpoint:
        raise
    except UsageError as error:
        return str(error)
    required = ("optimizer.pt", "scheduler.pt", *(rng_state_files(processes) if rng else ()))
    for name in required:
        if not (folder / name).is_file() or (folder / name).stat().st_size == 0:
            saved = sorted(p.name for p in folder.glob("rng_state*.pth"))
            if name.startswith("rng_state") and saved:
                return (
                    f"no {name}: it was saved by {max(1, len(saved))} process(es) ({', '.join(saved)}), this run "
                    f"has {processes}"
                )
            return f"{name} missing or empty"
    optional = [name for name in ("scaler.pt",) if (folder / name).is_file()]
    for name in (*required, *optional):
        damage = torch_archive_problem(folder / name)
        if damage is not None:
            return f"{name} is damaged ({damage}); it cannot be loaded"
    return _proof_problem(folder, rng)


def _proof_problem(folder: Path, rng: bool) -> str | None:
    """Return a problem that the structural checks cannot see, or None: a file that differs from its entry in
    `checksums.json` (io.proofs) because it changed after the checkpoint was written, for example a tensor's bytes
    edited or a file swapped for another of the same kind. A checkpoint
    written before checksums existed is logged as checked by structure only. `rng` includes its RNG states."""
    proof = proofs.manifest_problem(folder, None if rng else lambda name: not name.startswith("rng_state"))
    if proof == f"no {proofs.MANIFEST}":
        logger.warning(
            "%s has no %s (written by an earlier version): its files are checked by structure only",
            folder,
            proofs.MANIFEST,
        )
        return None
    return proof


_REFUSED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)")
FULL_CHECK_BYTES = 64 << 20  # Smaller archives are read whole (each CRC); larger ones by structure.


def torch_archive_problem(path: Path) -> str | None:
    """Return why `path` is not a `torch.save` archive that a resume can load, or None if it is.

    It checks the zip structure, every member's CRC when the file is at most FULL_CHECK_BYTES, and the pickle, loaded
    as the Trainer loads it. A pickle that torch's safe loader refuses raises InconsistentCheckpoint.
    """
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            members = sorted(archive.infolist(), key=lambda info: info.header_offset)
            if not any(info.filename.endswith("/data.pkl") or info.filename == "data.pkl" for info in members):
                return "not a torch archive: no data.pkl"
            ends = [info.header_offset for info in members[1:]] + [archive.start_dir]
            for info, end in zip(members, ends):
                if info.header_offset + info.compress_size > end or end > size:
                    return f"member {info.filename} extends past its end"
            bad = archive.testzip() if size <= FULL_CHECK_BYTES else None
            if bad is not None:
                return f"member {bad} fails its checksum"
        with safe_globals():
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        refused = _REFUSED_GLOBAL.search(str(error))
        what = f"it calls {refused.group(1)}" if refused else "not plain tensors and numbers"
        raise InconsistentCheckpoint(
            f"{path}: holds a pickle that torch's safe loader refuses ({what}); "
            "it was not loaded: remove this checkpoint (a Trainer never writes such a file), or train into another "
            "output_dir"
        ) from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OverflowError, RuntimeError) as error:
        return f"not a readable torch archive: {' '.join(str(error).split())[:200]}"
    except OSError as error:
        return f"not readable: {error.strerror or error}"
    return None


def resumable_checkpoint(
    output_dir: str | os.PathLike, processes: int = 1, rng: bool = True
) -> tuple[Path | None, list[str]]:
    """Return the newest checkpoint that `processes` processes can resume from exactly, and why each newer one was
    passed over (transformers' `get_last_checkpoint` takes the newest whatever its state)."""
    skipped = []
    for folder in reversed(checkpoints(output_dir)):
        problem = checkpoint_problem(folder, processes, rng)
        if problem is None:
            return folder, skipped
        skipped.append(f"{folder.name} ({problem})")
    return None, skipped


# Time-interval checkpoints and the wall-clock budget


def _broadcast_code(code: int, device: torch.device | str = "cpu") -> int:
    """Return rank 0's decision on every rank, since clocks differ and all ranks must save the same step together."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return code
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([code], dtype=torch.int32, device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


class WallClockCallback(TrainerCallback):
    """Save checkpoints at time intervals (the paper: every 10 minutes, Section 6.1) and stop at a wall-clock budget.
    Rank 0 decides for all processes; the last step and a budget stop are saved too, for averaging and `--resume`."""

    def __init__(self, save_every_minutes: float = 10.0, max_train_minutes: float = 0.0, save_steps: int = 0):
        self.save_every = save_every_minutes * 60.0
        self.budget = max_train_minutes * 60.0
        self.save_steps = save_steps
        self.start = self.last_save = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.last_save = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget > 0 or self.save_every > 0:
            now = time.monotonic()
            over_budget = self.budget > 0 and now - self.start >= self.budget
            time_to_save = self.save_every > 0 and now - self.last_save >= self.save_every
            code = _broadcast_code(2 * int(over_budget) + int(time_to_save), args.device)
            over_budget, time_to_save = bool(code & 2), bool(code & 1)
            if time_to_save:
                control.should_save = True
            if over_budget:
                logger.info(
                    "wall-clock budget of %.1f min reached at step %d: stopping", self.budget / 60, state.global_step
                )
                control.should_training_stop = True
                control.should_save = True
                control.should_evaluate = False
        if self.save_steps > 0 and state.global_step % self.save_steps == 0:
            control.should_save = True
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        self.last_save = time.monotonic()


# Section 6.1: checkpoint averaging


def load_averaged_weights(model, weights: Mapping[str, torch.Tensor]) -> None:
    """Put averaged `weights` into `model` and re-tie the shared embedding / projection (Section 3.4)."""
    _, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected:
        raise UsageError(f"averaged weights have tensors this model does not have: {unexpected[:5]}")
    model.tie_weights()


def _complete_code_files(folder: Path) -> None:
    """Copy from the package the code files config.json needs that `folder` lacks (a checkpoint saved by plain
    `save_pretrained` names `pipeline_vaswani.py` without holding it), so it loads with `trust_remote_code`."""
    package = Path(__file__).resolve().parent.parent
    for name in CODE_FILES:
        if not (folder / name).is_file() and any(name in problem for problem in missing_code_files(folder)):
            shutil.copy2(package / name, folder / name)
    problems = missing_code_files(folder)
    if problems:
        raise UsageError(f"{folder}: {problems[0]}; the checkpoint's config names code this package does not have")


AVERAGED = "averaged model folder"  # The kind of output that save_averaged_checkpoint writes.


def save_averaged_checkpoint(
    folders: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    own: bool = False,
    one_run: bool = True,
) -> Path:
    """Average `folders` into a loadable folder that appears whole: the averaged weights, the newest checkpoint's
    declared files and `averaged_from.json`. An existing `out_dir` is replaced only with `overwrite` if it is an
    `AVERAGED` folder, or with `own` if it is the run's own."""
    out_dir = check_output_dir(
        out_dir, overwrite=overwrite, what="averaged model folder", kind=None if own else AVERAGED
    )
    newest = Path(folders[-1])
    if any(Path(f).resolve() in (out_dir.resolve(), *out_dir.resolve().parents) for f in folders):
        raise UsageError(f"--out {out_dir} would replace the checkpoints being averaged; choose another folder")
    averaged = average_checkpoints(folders, one_run)
    with atomic_output_dir(out_dir, kind=AVERAGED, overwrite=overwrite or own) as tmp:
        copy_model_files(
            newest, tmp, exclude=("model*.safetensors", WEIGHTS_INDEX), known=(*TRAINING_STATE_FILES, "rng_state*.pth")
        )
        _complete_code_files(tmp)
        safetensors.torch.save_file(
            {k: v.contiguous() for k, v in averaged.items()}, str(tmp / WEIGHTS), metadata={"format": "pt"}
        )
        (tmp / "averaged_from.json").write_text(
            "[\n" + ",\n".join(f' "{Path(f).name}"' for f in folders) + "\n]", encoding="utf-8"
        )
    return out_dir


def average_last(trainer, plan: RunPlan, state) -> list[str]:
    """Average the run's last N checkpoints (the recipe's average_last) into OUTPUT/averaged (Section 6.1), load them
    on every process and return their names; with none returned, the final weights are kept."""
    trainer.accelerator.wait_for_everyone()
    count = plan.recipe.checkpoints.average_last
    if count <= 1:
        return []
    found = last_checkpoints(plan.output_dir, count)
    if len(found) < 2:
        logger.warning("average_last=%d but only %d checkpoint(s) exist: using the final weights", count, len(found))
        return []
    averaged = plan.output_dir / "averaged"
    if state.is_main_process:
        save_averaged_checkpoint(found, averaged, overwrite=True, own=True)  # It is this run's own folder.
    trainer.accelerator.wait_for_everyone()
    model = trainer.accelerator.unwrap_model(trainer.model)
    load_averaged_weights(model, safetensors.torch.load_file(str(averaged / WEIGHTS)))
    logger.info("averaged %d checkpoints: %s", len(found), ", ".join(f.name for f in found))
    return [f.name for f in found]
