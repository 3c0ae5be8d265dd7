"""The staging folder of a translation into a file, `<output>.partial/`: each finished window k as one part file
(`window-k.txt`), written atomically; `state.json` holds what the whole run must repeat (the input's fingerprint, the
window size, the model and the settings); the parts are joined into `--output` in input order, in one rename.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

from . import io

PARTIAL_KIND = "partial translation"  # the staging folder's marker (io.check_output_dir)
STATE = "state.json"


def part(staging: Path, k: int) -> Path:
    return staging / f"window-{k:08d}.txt"


def write_part(staging: Path, k: int, translations: list[str]) -> None:
    """Window k's translations, atomically."""
    data = io.format_lines(translations).encode("utf-8")
    with io.replace_atomically(part(staging, k)) as temporary:
        temporary.write_bytes(data)


def publish(staging: Path, windows: int, output: str | os.PathLike, overwrite: bool) -> None:
    """The parts joined, in input order, into `output` in one rename; then the staging folder removed."""
    target = io.check_output_file(output, overwrite=overwrite, what="--output")
    with io.replace_atomically(target) as temporary, open(temporary, "wb") as handle:
        for k in range(windows):
            with open(part(staging, k), "rb") as source:
                shutil.copyfileobj(source, handle)
    remove(staging)


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The keys whose values differ ("settings.num_beams" for a nested one)."""
    differ = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if key == "settings" and isinstance(a, dict) and isinstance(b, dict):
            differ += differences(a, b, f"{key}.")
        elif a != b:
            differ.append(prefix + key)
    return differ


def foreign(staging: Path) -> list[str]:
    """What the staging folder holds that this tool did not write there (a user's file is never removed)."""
    ours = {STATE, io.MARKER}
    return sorted(
        p.name
        for p in staging.iterdir()
        if p.name not in ours and not (p.name.startswith("window-") and p.name.endswith(".txt") and p.is_file())
    )


def remove(staging: Path) -> None:
    """Remove the staging folder's parts, state and marker, then the folder if nothing else is left in it."""
    kept = set(foreign(staging))
    for p in staging.iterdir():
        if p.name not in kept:
            p.unlink()
    with suppress(OSError):
        staging.rmdir()


@contextmanager
def kept_on_interrupt(staging: Path, rank: int, size: int):
    """Finished windows stay on an interruption; a staging folder with none is removed (nothing to resume)."""
    try:
        yield
    except BaseException:
        if rank == 0 and size == 1 and staging.is_dir() and not any(staging.glob("window-*.txt")):
            remove(staging)
        raise


def prepare(staging: Path, state: dict, *, resume: bool, overwrite: bool, world) -> bool:
    """Check the staging folder (every process), then (rank 0) make or keep it; whether an earlier run's is kept.
    An earlier run's is continued only with `resume` and the same state, replaced only with `overwrite`."""
    what = f"{staging} (the staging folder of --output)"
    if io.folder_in_use(staging):
        raise io.UsageError(
            f"{what} is in use by another translation into the same --output; wait for it to "
            "finish, or choose another --output"
        )
    ours = io.written_by(staging) == PARTIAL_KIND
    if ours and foreign(staging):
        raise io.UsageError(
            f"{what} holds files this tool did not write ({', '.join(foreign(staging)[:3])}); move "
            "them out first, or choose another --output"
        )
    if staging.exists() and not ours:
        io.check_output_dir(staging, overwrite=overwrite, what=what, kind=PARTIAL_KIND)  # names what is there
    keep = False
    if resume and ours:
        try:
            old = json.loads((staging / STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        differ = differences(old if isinstance(old, dict) else {}, state)
        if differ:
            raise io.UsageError(
                f"--resume: {staging} holds a translation whose {', '.join(differ)} differ from this "
                "run's; repeat the interrupted command, or start again with --overwrite"
            )
        keep = True
    elif ours and not overwrite:
        done = len(list(staging.glob("window-*.txt")))
        raise io.UsageError(
            f"{staging} holds an interrupted translation ({done} window(s) done): pass --resume to "
            "continue it, or --overwrite to start again"
        )
    world.barrier()  # every process has looked at the folder before rank 0 changes it
    if world.rank == 0 and not keep:
        if ours:
            print(f"replacing the interrupted translation in {staging} (--overwrite)", file=sys.stderr)
        with io.replace_atomically(staging, folder=True, kind=PARTIAL_KIND) as temporary:
            (temporary / STATE).write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    world.barrier()
    return keep
