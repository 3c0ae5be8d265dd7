"""Keep the staging folder of a translation into a file, `<output>.partial/`, which holds what a resumed run may reuse
and the proof of it.

Each finished window k is two files: its translations (`window-k.txt`) and, written after them, its record
(`window-k.json`, which holds the window's number of lines and the SHA-256 of the part's bytes and of the input lines
it translates). A resumed run reuses a part only if its bytes match its record and the record matches this run's input
window; any other part (cut short, edited, without a record because the run stopped between the two writes, of another
input) is translated again and named. The join into `--output` hashes every part as it copies it and refuses one that
differs from its record: nothing unverified reaches the output. `state.json` holds what the whole run must repeat (the
input's fingerprint, the window size, the model and the settings).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

from .. import io

PARTIAL_KIND = "partial translation"  # the kind that the staging folder's marker names (see io.check_output_dir)
STATE = "state.json"
COPY_BYTES = 1 << 20
MAX_NAME_BYTES = 255  # the longest file name of Linux file systems, in bytes


def part(staging: Path, k: int) -> Path:
    return staging / f"window-{k:08d}.txt"


def record(staging: Path, k: int) -> Path:
    return staging / f"window-{k:08d}.json"


def write_part(staging: Path, k: int, translations: list[str], source_sha256: str) -> None:
    """Write window k's translations and then its record, each atomically. A part without its record is never
    reused, so a run that stopped between the two writes translates the window again."""
    data = io.format_lines(translations).encode("utf-8")
    with io.replace_atomically(part(staging, k)) as temporary:
        temporary.write_bytes(data)
    proof = {
        "lines": len(translations),
        "sha256": hashlib.sha256(data).hexdigest(),
        "source_sha256": source_sha256,
    }
    with io.replace_atomically(record(staging, k)) as temporary:
        temporary.write_text(json.dumps(proof) + "\n", encoding="utf-8")


def _read_record(staging: Path, k: int) -> dict | None:
    try:
        proof = json.loads(record(staging, k).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields = {"lines": int, "sha256": str, "source_sha256": str}
    ok = isinstance(proof, dict) and all(type(proof.get(name)) is kind for name, kind in fields.items())
    return proof if ok else None


def part_problem(staging: Path, k: int, lines: int, source_sha256: str) -> str | None:
    """Return why window k's part cannot be reused for an input window of `lines` lines hashing to `source_sha256`,
    or None if it can be. "absent" means that there is neither a part nor a record: the window was never finished."""
    has_part, has_record = part(staging, k).is_file(), record(staging, k).exists()
    if not has_part and not has_record:
        return "absent"
    if not has_part:
        return "its part file is missing"
    proof = _read_record(staging, k)
    if proof is None:
        return "it has no readable record (the run stopped between writing the part and its record?)"
    if proof["lines"] != lines or proof["source_sha256"] != source_sha256:
        return "its record is of other input lines"
    found = io.proofs.digest(part(staging, k))
    if found["lines"] != proof["lines"]:
        return f"the part has {found['lines']} lines, its record {proof['lines']}"
    if found["sha256"] != proof["sha256"]:
        return "the part's bytes differ from its record (edited?)"
    return None


def staging_folder(output: str | os.PathLike) -> Path:
    """Return the staging folder of a translation into `output`, which is `<output>.partial` beside it.

    A file name may have up to 255 bytes, and the suffix may take the name over that limit. In that case the name is
    cut, and a hash of the whole name is added to keep it apart from any other output's staging folder."""
    output = Path(output)
    name = f"{output.name}.partial"
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        digest = hashlib.sha256(os.fsencode(output.name)).hexdigest()[:16]
        name = f"{io.shortened(output.name, 200)}-{digest}.partial"
    return output.with_name(name)


def forget(staging: Path, k: int) -> None:
    """Remove window k's part and record (before it is translated again)."""
    for path in (part(staging, k), record(staging, k)):
        path.unlink(missing_ok=True)


def publish(staging: Path, windows: list[tuple[int, str]], output: str | os.PathLike, overwrite: bool) -> None:
    """Join the parts, in input order, into `output` in one rename, checking each against its record as it is copied,
    and then remove the staging folder. `windows` holds each window's number of lines and input SHA-256. A part that
    differs from its record is removed and a RunFailure is raised, so that `--resume` translates it again."""
    target = io.check_output_file(output, overwrite=overwrite, what="--output")
    with io.replace_atomically(target, overwrite=overwrite) as temporary, open(temporary, "wb") as handle:
        for k, (lines, source_sha256) in enumerate(windows):
            proof = _read_record(staging, k)
            digest, copied = hashlib.sha256(), 0
            with open(part(staging, k), "rb") as source:
                while block := source.read(COPY_BYTES):
                    digest.update(block)
                    copied += block.count(b"\n")
                    handle.write(block)
            expected = (lines, lines, digest.hexdigest(), source_sha256)
            if proof is None or (proof["lines"], copied, proof["sha256"], proof["source_sha256"]) != expected:
                forget(staging, k)
                raise io.RunFailure(
                    f"{part(staging, k)} changed after it was written (it differs from its record); nothing was "
                    "written to --output: run the command again with --resume to translate that window again"
                )
    remove(staging)


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Return the keys whose values differ between `old` and `new`; a key inside "settings" is named with that
    prefix, as "settings.num_beams"."""
    differ = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if key == "settings" and isinstance(a, dict) and isinstance(b, dict):
            differ += differences(a, b, f"{key}.")
        elif a != b:
            differ.append(prefix + key)
    return differ


def foreign(staging: Path) -> list[str]:
    """Return the names of the entries of the staging folder that this tool did not write there, so that a user's
    file is never removed."""
    ours = {STATE, io.MARKER}
    return sorted(
        p.name
        for p in staging.iterdir()
        if p.name not in ours
        and not (p.name.startswith("window-") and p.name.endswith((".txt", ".json")) and p.is_file())
    )


def remove(staging: Path) -> None:
    """Remove the staging folder's parts, records, state and marker, then the folder if nothing else is left in it."""
    kept = set(foreign(staging))
    for p in staging.iterdir():
        if p.name not in kept:
            p.unlink()
    with suppress(OSError):
        staging.rmdir()


@contextmanager
def kept_on_interrupt(staging: Path, rank: int, size: int):
    """Keep the finished windows when the body is interrupted, but remove a staging folder that holds none, since
    there is nothing to resume; only a run of a single process removes it."""
    try:
        yield
    except BaseException:
        if rank == 0 and size == 1 and staging.is_dir() and not any(staging.glob("window-*.txt")):
            remove(staging)
        raise


def prepare(staging: Path, state: dict, *, resume: bool, overwrite: bool, world) -> bool:
    """Check the staging folder on every process, then create it or keep it on rank 0, and return whether an earlier
    run's folder is kept.

    An earlier run's folder is continued only with `resume` and when its state.json matches `state`, and it is
    replaced only with `overwrite`. Otherwise, and also when another translation is using the folder or it holds files
    this tool did not write, a UsageError says what to do."""
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
        io.check_output_dir(staging, overwrite=overwrite, what=what, kind=PARTIAL_KIND)  # it names what is there
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
