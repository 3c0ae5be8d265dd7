"""Translate a file of any size in bounded windows, resumably, with the work shared among processes.

The input is an `io.TextInput` with two passes (a pipe is spooled as the first pass reads it, and never read twice).
It is read `buffer_lines` at a time, as fairseq's `--buffer-size` does, so that memory depends on the window and not on
the file.
There are two passes:

1. The check sends every window through the front end without decoding, so that a bad line is named as file:line before
   anything is decoded. The same pass counts and hashes the lines, which gives the input's fingerprint and each
   window's.
2. The decoding first compares each window with its hash from the check (an input changed meanwhile is refused), then
   translates it and writes it with its record into `<output>.partial/` (`vaswani_hf.translation.staging`), whose state file records
   the fingerprint, the model and the settings. The parts are then joined into `<output>` in one rename, each checked
   against its record again.

An interrupted run keeps its finished windows. `resume=True` continues it, reusing only the windows whose parts match
their records, and gives the same bytes as an uninterrupted run; a state that does not match is refused. Under a
launcher (`RANK`, `WORLD_SIZE`) process r decodes the windows k with k % N == r; the processes meet at two gloo
barriers, and rank 0 joins the parts. Parts are kept per window, not per process, so that a run may be resumed with
another number of processes.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .. import io
from ..io.progress import progress_bar
from . import staging as staging_files
from .frontend import PositionTable, translate_lines

# BUFFER_LINES lines are read, sorted by length and decoded together: they are a few MB of text, and enough lines for
# sorting to keep the batches' padding low.
BUFFER_LINES = 10_000


@dataclass
class Engine:
    """Hold a decoding engine (PyTorch or CTranslate2) as this module uses it. `translate(lines, bar)` translates one
    window (a block of input lines decoded together) and advances the progress report `bar`. Before any decoding,
    every line is checked against the engine's limits: `encode` turns lines into token ids, `table` is the model's
    position table (None if unknown), and `max_input_tokens` is the user's limit on a source's length."""

    translate: Callable[[list[str], Any], list[str]]
    encode: Callable[[list[str]], list]
    table: PositionTable | None
    max_input_tokens: int | None
    fingerprint: dict = field(default_factory=dict)  # the model and decoding settings, which a resumed run must repeat
    bound: Callable[[str], int] | None = None  # bounds a text's token count from above (`inference.token_bound`)


class Processes:
    """Find this process's place among the processes a launcher started (`RANK`, `WORLD_SIZE`), and meet them at gloo
    barriers."""

    def __init__(self):
        self.size, self.rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self._own_group = False

    def __enter__(self) -> Processes:
        if self.size > 1 and not dist.is_initialized():
            # The shares are uneven, so a process may wait at the last barrier for as long as the others decode.
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
        """Return the sums of `values` over all processes."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.long)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def device(self, device: str | None) -> str | None:
        """Return the device this process decodes on: `device` when one was given, and otherwise None (the engine's
        own default) for a single process. Among several processes it is this process's own GPU (`cuda:LOCAL_RANK`),
        or the CPU where there is no GPU or ACCELERATE_USE_CPU is set."""
        if device is not None or self.size == 1:
            return device
        use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
        return f"cuda:{self.local_rank}" if torch.cuda.is_available() and not use_cpu else "cpu"


def _windows(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    while window := list(islice(lines, size)):
        yield window


def _window_sha256(window: list[str]) -> str:
    return hashlib.sha256("".join(line + "\n" for line in window).encode("utf-8", "surrogatepass")).hexdigest()


def check_input(text: io.TextInput, label: str, engine: Engine, size: int) -> tuple[dict, list[tuple[int, str]]]:
    """Run the check pass over `text` (its first pass), and return the input's fingerprint {"lines", "sha256"} and
    each window's (lines, SHA-256). A line the engine cannot take raises a UsageError naming `label`:line."""
    digest, count, windows = hashlib.sha256(), 0, []

    def nothing(encoded: list) -> list[str]:
        return [""] * len(encoded)

    limits = [n for n in (engine.table.rows if engine.table else None, engine.max_input_tokens) if n is not None]
    limit = min(limits) if limits else None

    def encode(texts: list[str]) -> list:  # a line that provably fits is not tokenised but gets a placeholder token
        if engine.bound is None or limit is None:
            return engine.encode(texts)
        long = [text for text in texts if engine.bound(text) > limit]
        encoded = iter(engine.encode(long) if long else ())
        return [next(encoded) if engine.bound(text) > limit else (0,) for text in texts]

    for window in _windows(text.lines(), size):
        try:
            translate_lines(window, encode, nothing, engine.table, engine.max_input_tokens)
        except io.InputLineError as error:
            raise io.InputLineError(count + error.line, error.message).in_file(label) from None
        digest.update("".join(line + "\n" for line in window).encode("utf-8", "surrogatepass"))
        windows.append((len(window), _window_sha256(window)))
        count += len(window)
    return {"lines": count, "sha256": digest.hexdigest()}, windows


def _todo(staging: Path | None, windows: list[tuple[int, str]], world: Processes, resume: bool) -> list[int]:
    """Return this process's windows (k % N == rank) that are still to translate: all of them, or, on a resume, those
    whose part is absent or unproven. Each unproven part is named, then removed."""
    mine = [k for k in range(len(windows)) if k % world.size == world.rank]
    if staging is None or not resume:
        return mine
    todo = []
    for k in mine:
        problem = staging_files.part_problem(staging, k, *windows[k])
        if problem is None:
            continue
        if problem != "absent":
            print(f"--resume: {staging_files.part(staging, k)} is translated again: {problem}", file=sys.stderr)
            staging_files.forget(staging, k)
        todo.append(k)
    return todo


def _decode(
    text: io.TextInput, windows: list[tuple[int, str]], todo: list[int], size: int, engine: Engine, staging, bar
) -> tuple[int, int]:
    """Run the decoding pass over `text` (its second pass), and return the number of lines translated and of tokens
    in their translations. Each window of `todo` is first checked against the check pass (an input that changed since
    raises a UsageError), then translated and written to standard output or into the staging folder."""
    lines = tokens = 0
    todo = set(todo)
    for k, window in enumerate(_windows(text.lines(), size)):
        if (
            k >= len(windows)
            or len(window) != windows[k][0]
            or (k in todo and _window_sha256(window) != windows[k][1])
        ):
            raise io.UsageError(
                f"{text.label}: the input changed after its check (lines {k * size + 1} to {k * size + len(window)} "
                "differ); give an input that nothing writes to meanwhile"
            )
        if k not in todo:
            continue
        before = bar.n
        translations = engine.translate(window, bar)
        bar.update(len(window) - (bar.n - before))  # counts the lines the engine did not count (the empty ones)
        if len(translations) != len(window):  # an engine bug must never silently misalign lines
            raise RuntimeError(f"the engine returned {len(translations)} lines for {len(window)} inputs")
        if staging is None:
            io.write_lines(None, translations)
        else:
            staging_files.write_part(staging, k, translations, windows[k][1])
        lines += len(window)
        texts = [t for t in translations if t]
        tokens += sum(len(ids) for ids in engine.encode(texts)) if texts else 0
    return lines, tokens


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
    """Translate `source` into `output`, and return {"lines", "tokens", "seconds"} of this run over all processes.
    `source` is "-" for standard input or any input kind that `io.TextInput` reads (a pipe is read once), and an
    `output` of None or "-" means standard output."""
    world = world or Processes()
    started = time.perf_counter()
    with ExitStack() as stack:
        text = stack.enter_context(io.TextInput(source, "input file", passes=2))
        fingerprint, windows = check_input(text, str(source), engine, buffer_lines)
        to_stdout = output is None or str(output) == io.STDIO
        staging = None if to_stdout else staging_files.staging_folder(output)
        kept = False
        if staging is not None:
            state = {"input": fingerprint, "buffer_lines": buffer_lines, **engine.fingerprint}
            kept = staging_files.prepare(staging, state, resume=resume, overwrite=overwrite, world=world)
            if world.rank == 0:  # one translation at a time writes into an --output; another is refused, not replaced
                stack.enter_context(io.FolderLock(staging, f"{staging} (the staging folder of --output)"))
            stack.enter_context(staging_files.kept_on_interrupt(staging, world.rank, world.size))
        todo = _todo(staging, windows, world, kept)
        total = sum(windows[k][0] for k in todo)
        done = world.total(len([k for k in range(len(windows)) if k % world.size == world.rank]) - len(todo))[0]
        bar = stack.enter_context(
            progress_bar(
                total=total,
                unit="line",
                desc=f"process {world.rank}/{world.size}" if world.size > 1 else "translating",
                disable=not progress or world.rank != 0 or total == 0,
            )
        )
        if done and world.rank == 0 and progress:
            print(f"resuming {staging}: {done} of {len(windows)} windows done", file=sys.stderr)
        lines, tokens = world.total(*_decode(text, windows, todo, buffer_lines, engine, staging, bar))
        if staging is not None:
            world.barrier()  # every window is written
            if world.rank == 0:
                staging_files.publish(staging, windows, output, overwrite)
            world.barrier()
    return {"lines": lines, "tokens": tokens, "seconds": time.perf_counter() - started}
