"""Translating a file of any size: bounded windows, resumable, across processes.

The input is read twice, `buffer_lines` at a time (as fairseq's `--buffer-size`), so memory depends on the window:
1. the check: every window through the front end without decoding, so a bad line is named as file:line before
   anything is decoded; the same pass counts and hashes the lines (the input's fingerprint);
2. the decoding: window k is translated and written atomically as one part file of `<output>.partial/`, whose state
   file records the fingerprint, model and settings; the parts are then joined into `<output>` in one rename.

An interrupted run keeps its finished windows; `resume=True` continues and gives the same bytes as an uninterrupted
run (a state that does not match is refused). Under a launcher (`RANK`, `WORLD_SIZE`) process r decodes the windows
k % N == r; processes meet at two gloo barriers and rank 0 joins the parts. Parts are per window, not per process,
so a run may be resumed with another number of processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import io
from .io.progress import progress_bar
from .translation_frontend import PositionTable, translate_lines

BUFFER_LINES = 10_000  # lines read, sorted and decoded together: a few MB of text, batches padded as little as sorting
PARTIAL_KIND = "partial translation"  # the staging folder's marker (io.check_output_dir)
STATE = "state.json"


@dataclass
class Engine:
    """A decoding engine: `translate(lines, bar)` (a window's translations), its front end's `encode`, `table`."""

    translate: Callable[[list[str], Any], list[str]]
    encode: Callable[[list[str]], list]
    table: PositionTable | None
    max_input_tokens: int | None
    fingerprint: dict = field(default_factory=dict)  # model and decoding settings: what a resumed run must repeat
    bound: Callable[[str], int] | None = None  # an upper bound on a text's tokens (`inference.token_bound`), if known


class Processes:
    """This process's place among those a launcher started (`RANK`, `WORLD_SIZE`), with gloo barriers between them."""

    def __init__(self):
        self.size, self.rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self._own_group = False

    def __enter__(self) -> Processes:
        if self.size > 1 and not dist.is_initialized():
            # shares are uneven: a process may wait at the last barrier for as long as the others decode
            dist.init_process_group("gloo", timeout=timedelta(days=7))
            self._own_group = True
        return self

    def __exit__(self, *exc) -> None:
        if self._own_group:
            dist.destroy_process_group()

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def total(self, *values: int) -> list[int]:
        """The sums over all processes of `values`."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.long)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def device(self, device: str | None) -> str | None:
        """`device`, or among several processes this process's GPU (`LOCAL_RANK`), or the CPU."""
        if device is not None or self.size == 1:
            return device
        use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
        return f"cuda:{self.local_rank}" if torch.cuda.is_available() and not use_cpu else "cpu"


def _windows(path: str | os.PathLike, size: int) -> Iterator[list[str]]:
    lines = io.iter_lines(path)
    while window := list(islice(lines, size)):
        yield window


def check_input(path: str | os.PathLike, label: str, engine: Engine, size: int) -> dict:
    """The check pass: UsageError naming `label`:line of a line the engine cannot take; else {"lines", "sha256"}."""
    digest, count = hashlib.sha256(), 0

    def nothing(encoded: list) -> list[str]:
        return [""] * len(encoded)

    limits = [n for n in (engine.table.rows if engine.table else None, engine.max_input_tokens) if n is not None]
    limit = min(limits) if limits else None

    def encode(texts: list[str]) -> list:  # a line that provably fits is not tokenised: a placeholder of one token
        if engine.bound is None or limit is None:
            return engine.encode(texts)
        long = [text for text in texts if engine.bound(text) > limit]
        encoded = iter(engine.encode(long) if long else ())
        return [next(encoded) if engine.bound(text) > limit else (0,) for text in texts]

    for window in _windows(path, size):
        try:
            translate_lines(window, encode, nothing, engine.table, engine.max_input_tokens)
        except io.InputLineError as error:
            raise io.InputLineError(count + error.line, error.message).in_file(label) from None
        digest.update("".join(line + "\n" for line in window).encode("utf-8", "surrogatepass"))
        count += len(window)
    return {"lines": count, "sha256": digest.hexdigest()}


def _spool_stdin(stack: ExitStack) -> Path:
    """Standard input copied, as read (`io.iter_lines`), into a temporary file: it is read twice."""
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaswani_stdin_")))
    with open(folder / "input.txt", "w", encoding="utf-8", newline="\n") as handle:
        for line in io.iter_lines(io.STDIO):
            handle.write(line + "\n")
    return folder / "input.txt"


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The keys whose values differ ("settings.num_beams" for a nested one)."""
    differ = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if key == "settings" and isinstance(a, dict) and isinstance(b, dict):
            differ += _differences(a, b, f"{key}.")
        elif a != b:
            differ.append(prefix + key)
    return differ


def prepare_staging(staging: Path, state: dict, *, resume: bool, overwrite: bool, world: Processes) -> int:
    """Check the staging folder (every process), then (rank 0) make or keep it; returns the windows already done.
    An earlier run's is continued only with `resume` and the same state, replaced only with `overwrite`."""
    what = f"{staging} (the staging folder of --output)"
    if io.folder_in_use(staging):
        raise io.UsageError(
            f"{what} is in use by another translation into the same --output; wait for it to "
            "finish, or choose another --output"
        )
    ours = io.written_by(staging) == PARTIAL_KIND
    if ours and _foreign(staging):
        raise io.UsageError(
            f"{what} holds files this tool did not write ({', '.join(_foreign(staging)[:3])}); move "
            "them out first, or choose another --output"
        )
    if staging.exists() and not ours:
        io.check_output_dir(staging, overwrite=overwrite, what=what, kind=PARTIAL_KIND)  # names what is there
    done = len(list(staging.glob("window-*.txt"))) if ours else 0
    keep = False
    if resume and ours:
        try:
            old = json.loads((staging / STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        differ = _differences(old, state)
        if differ:
            raise io.UsageError(
                f"--resume: {staging} holds a translation whose {', '.join(differ)} differ from this "
                "run's; repeat the interrupted command, or start again with --overwrite"
            )
        keep = True
    elif ours and not overwrite:
        raise io.UsageError(
            f"{staging} holds an interrupted translation ({done} window(s) done): pass --resume to "
            "continue it, or --overwrite to start again"
        )
    world.barrier()  # every process has looked at the folder before rank 0 changes it
    if world.rank == 0:
        if ours and not keep:
            print(f"replacing the interrupted translation in {staging} (--overwrite)", file=sys.stderr)
        if not keep:
            with io.replace_atomically(staging, folder=True, kind=PARTIAL_KIND) as temporary:
                (temporary / STATE).write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    world.barrier()
    return done if keep else 0


def _part(staging: Path, k: int) -> Path:
    return staging / f"window-{k:08d}.txt"


def _publish(staging: Path, windows: int, output: str | os.PathLike, overwrite: bool) -> None:
    """The parts joined, in input order, into `output` in one rename; then the staging folder removed."""
    target = io.check_output_file(output, overwrite=overwrite, what="--output")
    with io.replace_atomically(target) as temporary, open(temporary, "wb") as handle:
        for k in range(windows):
            with open(_part(staging, k), "rb") as part:
                shutil.copyfileobj(part, handle)
    _remove_staging(staging)


def _foreign(staging: Path) -> list[str]:
    """What the staging folder holds that this tool did not write there (a user's file is never removed)."""
    ours = {STATE, io.MARKER}
    return sorted(
        p.name
        for p in staging.iterdir()
        if p.name not in ours and not (p.name.startswith("window-") and p.name.endswith(".txt") and p.is_file())
    )


def _remove_staging(staging: Path) -> None:
    """Remove the staging folder's parts, state and marker, then the folder if nothing else is left in it."""
    foreign = set(_foreign(staging))
    for p in staging.iterdir():
        if p.name not in foreign:
            p.unlink()
    with suppress(OSError):
        staging.rmdir()


@contextmanager
def _kept_on_interrupt(staging: Path, world: Processes):
    """Finished windows stay on an interruption; a staging folder with none is removed (nothing to resume)."""
    try:
        yield
    except BaseException:
        if world.rank == 0 and world.size == 1 and staging.is_dir() and not any(staging.glob("window-*.txt")):
            _remove_staging(staging)
        raise


def translate_file(
    source: str | os.PathLike,
    output: str | os.PathLike | None,
    engine: Engine,
    *,
    buffer_lines: int = BUFFER_LINES,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    world: Processes | None = None,
) -> dict:
    """Translate `source` ("-": standard input) into `output` (None or "-": standard output); returns {"lines",
    "tokens", "seconds"} of this run over all processes."""
    world = world or Processes()
    started = time.perf_counter()
    with ExitStack() as stack:
        path = _spool_stdin(stack) if str(source) == io.STDIO else source
        fingerprint = check_input(path, str(source), engine, buffer_lines)
        windows = -(-fingerprint["lines"] // buffer_lines)
        to_stdout = output is None or str(output) == io.STDIO
        staging = None if to_stdout else Path(f"{output}.partial")
        done = 0
        if staging is not None:
            state = {"input": fingerprint, "buffer_lines": buffer_lines, **engine.fingerprint}
            done = prepare_staging(staging, state, resume=resume, overwrite=overwrite, world=world)
            if world.rank == 0:  # one translation at a time into one --output (another is refused, not replaced)
                stack.enter_context(io.FolderLock(staging, f"{staging} (the staging folder of --output)"))
            stack.enter_context(_kept_on_interrupt(staging, world))
        mine = [
            k
            for k in range(windows)
            if k % world.size == world.rank and (staging is None or not _part(staging, k).is_file())
        ]
        total = sum(min(buffer_lines, fingerprint["lines"] - k * buffer_lines) for k in mine)
        bar = stack.enter_context(
            progress_bar(
                total=total,
                unit="line",
                desc=f"process {world.rank}/{world.size}" if world.size > 1 else "translating",
                disable=not progress or world.rank != 0 or total == 0,
            )
        )
        if done and world.rank == 0 and progress:
            print(f"resuming {staging}: {done} of {windows} windows done", file=sys.stderr)
        lines = tokens = 0
        todo = set(mine)
        for k, window in enumerate(_windows(path, buffer_lines)):
            if k not in todo:
                continue
            before = bar.n
            translations = engine.translate(window, bar)
            bar.update(len(window) - (bar.n - before))  # the lines the engine did not count (empty ones)
            if len(translations) != len(window):  # an engine bug must never silently misalign lines
                raise RuntimeError(f"the engine returned {len(translations)} lines for {len(window)} inputs")
            if staging is None:
                io.write_lines(None, translations)
            else:
                io.write_lines(_part(staging, k), translations, overwrite=True, what="--output part")
            lines += len(window)
            texts = [t for t in translations if t]
            tokens += sum(len(ids) for ids in engine.encode(texts)) if texts else 0
        lines, tokens = world.total(lines, tokens)
        if staging is not None:
            world.barrier()  # every window is written
            if world.rank == 0:
                _publish(staging, windows, output, overwrite)
            world.barrier()
    return {"lines": lines, "tokens": tokens, "seconds": time.perf_counter() - started}
