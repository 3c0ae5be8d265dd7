"""Text files in and out: the one reader and writer of sentences, and JSON.

Strict UTF-8 (a bad byte is named by file and line); a BOM is dropped; "\\r\\n" and "\\r" end a line like "\\n"
(U+2028/U+0085 are text). N lines in, N items out; "-" is standard input / output; written files appear whole. An
input is a regular file, a pipe or the null device (reading /dev/zero would never end).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import STDIO, UsageError
from .outputs import check_output_file, file_kind, replace_atomically

BOM = "\ufeff"
CHUNK_BYTES = 1 << 24  # text is decoded in 16 MiB blocks: C-speed decoding, bounded memory for WMT-sized corpora


def check_input_file(path: str | os.PathLike, what: str = "input file") -> Path:
    """The path of an existing regular file (or a pipe), or a UsageError naming it."""
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise UsageError(
            f"{what} not found: {p}" + (" (a symlink to a missing file)" if p.is_symlink() else "")
        ) from None
    except OSError as error:  # a symlink loop, a name too long, a folder without search permission
        raise UsageError(f"{what} {p}: {os.strerror(error.errno) if error.errno else error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{what} {p} is a folder; give a file (one sentence per line)")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISFIFO(info.st_mode) or is_null_device(info)):
        raise UsageError(
            f"{what} {p} is {file_kind(info.st_mode)}, not a text file; give a regular file "
            f"(or {STDIO} for standard input)"
        )
    if not os.access(p, os.R_OK):
        raise UsageError(f"{what} {p} is not readable; check its permissions")
    return p


def is_null_device(info: os.stat_result) -> bool:
    """Whether `info` (a stat result) is the null device, which reads as empty."""
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(info.st_mode) and stat.S_ISCHR(null.st_mode) and info.st_rdev == null.st_rdev


def _decode(data: bytes, label: str, first_line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = first_line + before.count(b"\n") + before.replace(b"\r\n", b"\n").count(b"\r")
        column = error.start - max(before.rfind(b"\n"), before.rfind(b"\r")) - 1
        raise UsageError(
            f"{label}:{line}: not valid UTF-8 (byte 0x{data[error.start]:02x} at byte {column + 1} of the line); "
            "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`"
        ) from None


def _split(text: str) -> list[str]:
    """Lines of `text` (universal newlines); a final line end adds no line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def iter_lines(path: str | os.PathLike, what: str = "input file") -> Iterator[str]:
    """The lines of a UTF-8 text file ("-": standard input), streamed; UsageError naming the file (and line)."""
    stdin = str(path) == STDIO
    label = "<stdin>" if stdin else str(path)
    with nullcontext(sys.stdin.buffer) if stdin else open(check_input_file(path, what), "rb") as handle:
        pending, line_number, first = b"", 1, True
        for block in iter(lambda: handle.read(CHUNK_BYTES), b""):
            data = pending + block
            cut = data.rfind(b"\n")  # decode whole lines only; a "\r\n" split across blocks stays together
            if cut < 0:
                pending = data
                continue
            text, pending = _decode(data[: cut + 1], label, line_number), data[cut + 1 :]
            if first:
                text, first = text.removeprefix(BOM), False
            lines = _split(text)
            line_number += len(lines)
            yield from lines
        if pending:
            text = _decode(pending, label, line_number)
            yield from _split(text.removeprefix(BOM) if first else text)


def read_lines(path: str | os.PathLike, what: str = "input file") -> list[str]:
    """`iter_lines` as a list."""
    return list(iter_lines(path, what))


def write_lines(
    path: str | os.PathLike | None, lines: Iterable[str], *, overwrite: bool = False, what: str = "output file"
) -> None:
    """One line per item (its line breaks become spaces) to `path` (None or "-": standard output), atomically."""
    text = "".join(" ".join(_split(str(line))) + "\n" for line in lines)  # the reader's line ends only
    if path is None or str(path) == STDIO:
        write_stdout(text)
        return
    target = check_output_file(path, overwrite=overwrite, what=what)
    with replace_atomically(target) as temporary:
        temporary.write_text(text, encoding="utf-8", newline="\n")


def write_stdout(text: str) -> None:
    """`text` to standard output, all of it or a BrokenPipeError (Python's text layer silently drops what a closing
    pipe did not take, so the descriptor is written directly)."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = memoryview(text.encode("utf-8"))
    while data:
        written = os.write(fd, data[: 1 << 20])
        if written <= 0:
            raise BrokenPipeError(errno.EPIPE, "standard output closed")
        data = data[written:]


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """A JSON file's content, or a UsageError naming the file, line and column of the problem."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} not found: {p}")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not UTF-8 text; the file is corrupt, write it again") from None
    except json.JSONDecodeError as error:
        raise UsageError(
            f"{p}:{error.lineno}: invalid JSON ({error.msg} at column {error.colno}); "
            "the file is corrupt, write it again"
        ) from None
    except RecursionError:
        raise UsageError(f"{p}: JSON nested too deeply to read; the file is corrupt, write it again") from None


def write_json(path: str | os.PathLike, data: Any, *, overwrite: bool = True) -> None:
    """`to_json(data)` written atomically; replaced unless `overwrite` is False."""
    target = check_output_file(path, overwrite=overwrite, what="JSON file") if not overwrite else Path(path)
    with replace_atomically(target) as temporary:
        temporary.write_text(to_json(data) + "\n", encoding="utf-8")


def to_json(data: Any) -> str:
    """Indented JSON text; numbers from numpy/torch and paths written as themselves."""
    return json.dumps(data, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o))
