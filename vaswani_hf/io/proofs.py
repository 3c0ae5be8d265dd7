"""Prove that what a resume reuses is what was written. Each finished unit's size, line count and SHA-256 are recorded
when it is written and compared before it is reused, so that a unit cut short, edited or damaged since is never
trusted by its name alone.

The proof has two forms, built from one digest (`digest`). One is a file's record beside it (translate's windows, in
`translation.staging`). The other is a folder's manifest, `checksums.json`, which is written into a folder before it is
published (training checkpoints, in `training.checkpoints.publish_checkpoint`) and checked before the folder is resumed
from or averaged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

MANIFEST = "checksums.json"
BLOCK_BYTES = 1 << 20


def digest(path: str | os.PathLike) -> dict:
    """Return {"bytes", "lines", "sha256"} of a file's content."""
    sha256, size, lines = hashlib.sha256(), 0, 0
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            sha256.update(block)
            size += len(block)
            lines += block.count(b"\n")
    return {"bytes": size, "lines": lines, "sha256": sha256.hexdigest()}


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MANIFEST)


def write_manifest(folder: str | os.PathLike) -> None:
    """Write `folder/checksums.json`, which lists every regular file under `folder` with its size and SHA-256. Call it
    when the folder is complete, before it is published."""
    folder = Path(folder)
    entries = {}
    for path in _files(folder):
        found = digest(path)
        entries[path.relative_to(folder).as_posix()] = {"bytes": found["bytes"], "sha256": found["sha256"]}
    (folder / MANIFEST).write_text(json.dumps({"files": entries}, indent=1) + "\n", encoding="utf-8")


def _manifest(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(entry, dict) and type(entry.get("bytes")) is int and isinstance(entry.get("sha256"), str)
        for entry in files.values()
    ):
        return None
    return files


def manifest_problem(folder: str | os.PathLike, select: Callable[[str], bool] | None = None) -> str | None:
    """Return why `folder`'s files (those listed in its manifest, or only those `select` keeps) differ from the
    manifest, or None if they match. A folder without a manifest gives "no checksums.json", and the caller decides
    what that means."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        return f"no {MANIFEST}"
    files = _manifest(folder)
    if files is None:
        return f"{MANIFEST} is unreadable or of another shape"
    for name in sorted(files):
        if select is not None and not select(name):
            continue
        path = folder / name
        try:
            info = path.stat()
        except OSError:
            return f"{name} is missing (its {MANIFEST} lists it)"
        expected = files[name]
        if info.st_size != expected["bytes"]:
            return f"{name} has {info.st_size} bytes, {expected['bytes']} when written ({MANIFEST})"
        if _sha256(str(path), info.st_size, info.st_mtime_ns, info.st_ino) != expected["sha256"]:
            return f"{name} differs from its SHA-256 in {MANIFEST} (changed or damaged since it was written)"
    return None


@functools.lru_cache(maxsize=256)
def _sha256(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """Return a file's SHA-256, computed once per version of the file in a process, since a resume looks at a
    checkpoint twice."""
    return digest(path)["sha256"]
