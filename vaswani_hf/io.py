"""Files in and out, in one place: every tool and loader of vaswani_hf reads text, checks model folders, guards its
outputs and reports errors through this module, so each rule is written once.

Text files (`iter_lines`, `read_lines`, `write_lines`)
    Strict UTF-8: a bad byte is an error naming the file and line, never a silent replacement. A UTF-8 byte-order
    mark at the start is dropped; "\\r\\n" and a lone "\\r" end a line like "\\n" (Python's universal newlines; the
    Unicode separators U+2028/U+0085 that `str.splitlines` would also split on occur inside sentences and are text).
    One item per line, empty lines kept: N lines in, N items out; a final newline adds no empty line. "-" is
    standard input / output. Written files end every line with "\\n" and appear whole or not at all.

Outputs (`check_output_file`, `check_output_dir`, `replace_atomically`)
    Nothing the tool did not create in this run is deleted or overwritten unless the user says so (`--overwrite`);
    the checks run before any work, so a refused run has changed nothing.

Model folders (`check_model_folder`, `load_model_folder`)
    A folder written by `save_pretrained`: config.json, safetensors weights, tokenizer. A missing, truncated or
    broken file is named in one line before anything is loaded.

Errors (`UsageError`, `RunFailure`, `ArgumentParser`, `run_cli`)
    Expected bad input is one line on stderr naming the file (and line) or the key and what to do, exit status 2;
    an expected failure of the run itself (network, disk) is one line and exit status 1; Ctrl-C is exit status 130.
    No traceback unless `--debug` or VASWANI_DEBUG=1 asks for one; unexpected errors keep theirs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STDIO = "-"
BOM = "\ufeff"
CHUNK_BYTES = 1 << 24  # text is decoded in 16 MiB blocks: C-speed decoding, bounded memory for WMT-sized corpora

__all__ = [
    "VaswaniError", "UsageError", "RunFailure", "InputLineError", "ArgumentParser", "run_cli", "add_debug_argument",
    "iter_lines", "read_lines", "write_lines", "check_input_file",
    "check_output_file", "check_output_dir", "replace_atomically", "atomic_output_dir",
    "check_model_folder", "load_model_folder", "check_safetensors", "read_json",
]


# ---------------------------------------------------------------------------------------------------------------------
# Errors and the command-line contract
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniError(Exception):
    """An expected failure, reported as one line without a traceback by `run_cli`."""

    exit_code = 1


class UsageError(VaswaniError, ValueError):
    """Bad arguments or bad input (a file, a line, a key): exit status 2. The message names what is at fault and
    says what to do."""

    exit_code = 2


class RunFailure(VaswaniError, RuntimeError):
    """The run itself failed for an expected reason outside the input (network, disk, a refused upload): exit 1."""

    exit_code = 1


class InputLineError(UsageError):
    """Bad input at one line of a list of sentences (1-based `line`), raised where the file is not known (e.g. a
    sentence longer than the model's positions); a tool that read the sentences from a file names it with
    `in_file`."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line, self.message = line, message

    def in_file(self, label: str | os.PathLike) -> UsageError:
        """The same error naming the file as `file:line: ...` ("-" is standard input)."""
        label = "<stdin>" if str(label) == STDIO else str(label)
        return UsageError(f"{label}:{self.line}: {self.message}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is a `UsageError` (one line through `run_cli`) instead of usage text + exit, every
    tool has `--debug`, and the description (the tool's module docstring) keeps its line breaks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        add_debug_argument(self)

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0 (a usage error names the option otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (also: environment variable VASWANI_DEBUG=1)")


def _debug_requested(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("VASWANI_DEBUG", "").lower() in ("1", "true", "yes")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def run_cli(main: Callable[[list[str]], int | None], argv: Sequence[str] | None = None,
            prog: str | None = None) -> int:
    """Run a tool's `main(argv)` under the contract: its return value is the exit status (None: 0); a
    `VaswaniError` is one line on stderr and its exit status; Ctrl-C is "interrupted" and 130. With `--debug` (or
    VASWANI_DEBUG=1) errors propagate with their traceback. transformers' own progress bars (loading and writing
    weights) are off meanwhile."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or Path(sys.argv[0]).name
    if _debug_requested(argv):
        with _library_progress_bars_off():
            code = main(argv)
        return 0 if code is None else int(code)
    try:
        with _library_progress_bars_off():
            code = main(argv)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except VaswaniError as error:
        print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
        return error.exit_code
    return 0 if code is None else int(code)


@contextmanager
def _library_progress_bars_off():
    """transformers' own progress bars (loading and writing weights) are off while a tool runs: they are not the
    tool's progress, and a bar left on stderr before an error would break the one-line rule. The tools' own bars and
    huggingface_hub's download bars stay; the previous state is restored afterwards (for in-process callers)."""
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
        from transformers.utils import logging as transformers_logging
    except ImportError:
        yield
        return
    was_enabled, hub_was_disabled = transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled()

    def switch(transformers_on: bool) -> None:
        """transformers' switch also switches the hub's bars: the hub's own state is put back each time."""
        with warnings.catch_warnings():  # the hub warns when HF_HUB_DISABLE_PROGRESS_BARS forbids a change
            warnings.simplefilter("ignore")
            if transformers_on:
                transformers_logging.enable_progress_bar()
            else:
                transformers_logging.disable_progress_bar()
            (disable_progress_bars if hub_was_disabled else enable_progress_bars)()

    switch(False)
    try:
        yield
    finally:
        switch(was_enabled)


# ---------------------------------------------------------------------------------------------------------------------
# Text files
# ---------------------------------------------------------------------------------------------------------------------


def check_input_file(path: str | os.PathLike, what: str = "input file") -> Path:
    """The path of an existing regular file, or a UsageError naming it."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} not found: {p}")
    if p.is_dir():
        raise UsageError(f"{what} {p} is a folder; give a file (one sentence per line)")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{what} {p} is not readable; check its permissions")
    return p


@contextmanager
def _open_binary(path: str | os.PathLike, what: str):
    if str(path) == STDIO:
        yield sys.stdin.buffer
        return
    p = check_input_file(path, what)
    try:
        with open(p, "rb") as handle:
            yield handle
    except IsADirectoryError:
        raise UsageError(f"{what} {p} is a folder; give a file") from None


def _decode(data: bytes, label: str, first_line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = first_line + before.count(b"\n") + before.replace(b"\r\n", b"\n").count(b"\r")
        column = error.start - max(before.rfind(b"\n"), before.rfind(b"\r")) - 1
        raise UsageError(
            f"{label}:{line}: not valid UTF-8 (byte 0x{data[error.start]:02x} at byte {column + 1} of the line); "
            "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`") from None


def _split(text: str, final: bool) -> list[str]:
    """Lines of `text` (universal newlines). Unless `final`, `text` ends with a line end, which adds no line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def iter_lines(path: str | os.PathLike, what: str = "input file") -> Iterator[str]:
    """The lines of a UTF-8 text file ("-": standard input) without their line ends, streamed (see module
    docstring for the rules). Raises UsageError naming the file (and line) for a missing, unreadable or non-UTF-8
    file."""
    label = "<stdin>" if str(path) == STDIO else str(path)
    with _open_binary(path, what) as handle:
        pending, line_number, first = b"", 1, True
        while True:
            block = handle.read(CHUNK_BYTES)
            if not block:
                break
            data = pending + block
            cut = data.rfind(b"\n")  # decode whole lines only; a "\r\n" split across blocks stays together
            if cut < 0:
                pending = data
                continue
            text, pending = _decode(data[: cut + 1], label, line_number), data[cut + 1:]
            if first:
                text, first = text.removeprefix(BOM), False
            lines = _split(text, final=False)
            line_number += len(lines)
            yield from lines
        if pending:
            text = _decode(pending, label, line_number)
            yield from _split(text.removeprefix(BOM) if first else text, final=True)


def read_lines(path: str | os.PathLike, what: str = "input file") -> list[str]:
    """`iter_lines` as a list."""
    return list(iter_lines(path, what))


def write_lines(path: str | os.PathLike | None, lines: Iterable[str], *, overwrite: bool = False,
                what: str = "output file") -> None:
    """Write one line per item ("\\n" ends every line; an item's own line breaks become spaces, so N items give N
    lines). `path` None or "-" is standard output; a file is written atomically and, unless `overwrite`, must not
    exist yet (see `check_output_file`)."""
    text = "".join(" ".join(_split(str(line), final=True)) + "\n" for line in lines)  # the reader's line ends only
    if path is None or str(path) == STDIO:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = check_output_file(path, overwrite=overwrite, what=what)
    with replace_atomically(target) as temporary:
        temporary.write_text(text, encoding="utf-8", newline="\n")


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
        raise UsageError(f"{p}:{error.lineno}: invalid JSON ({error.msg} at column {error.colno}); "
                         "the file is corrupt, write it again") from None


# ---------------------------------------------------------------------------------------------------------------------
# Outputs: checked before any work, written atomically, nothing replaced without --overwrite
# ---------------------------------------------------------------------------------------------------------------------


def check_output_file(path: str | os.PathLike, *, overwrite: bool = False, what: str = "output file") -> Path:
    """`path` can be written: not a folder, its folder exists, and it does not exist yet unless `overwrite`."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{what} {p} is a folder; give a file name")
    if not p.parent.is_dir():
        raise UsageError(f"{what} {p}: folder {p.parent} does not exist; create it first")
    if p.exists() and not overwrite:
        raise UsageError(f"{what} {p} exists; pass --overwrite to replace it")
    return p


def check_output_dir(path: str | os.PathLike, *, overwrite: bool = False, what: str = "output folder") -> Path:
    """`path` can become an output folder: not a file, and absent or empty unless `overwrite`."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{what} {p} is a file; give a folder")
    if p.is_dir() and any(p.iterdir()) and not overwrite:
        raise UsageError(f"{what} {p} exists and is not empty; pass --overwrite to replace it, or choose another")
    for parent in p.resolve().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{what} {p}: {parent} is a file, not a folder")
            break
    return p


@contextmanager
def replace_atomically(target: str | os.PathLike, *, folder: bool = False):
    """Yield a temporary path beside `target` to write into (a file, or a folder with `folder=True`); on success it
    replaces `target` in one rename (the old content, if any, removed only after the new one is in place); on failure
    it is removed and `target` is untouched."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    else:
        handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(handle)
        temporary = Path(name)
    try:
        yield temporary
        _fsync(temporary)
        if folder and target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.rename(target, old)
            os.rename(temporary, target)
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        else:
            os.replace(temporary, target)
        _fsync(target.parent)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True) if temporary.is_dir() else temporary.unlink(missing_ok=True)
        raise


def atomic_output_dir(target: str | os.PathLike):
    """`replace_atomically(target, folder=True)`: a whole output folder appears at once."""
    return replace_atomically(target, folder=True)


def _fsync(path: Path) -> None:
    """Flush a file, a folder's entries, or every file of a folder tree to disk (best effort: some file systems
    refuse it on folders)."""
    paths = [path]
    if path.is_dir():
        paths = [Path(root) / name for root, _, files in os.walk(path) for name in files] + [path]
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------------------------------
# Model folders
# ---------------------------------------------------------------------------------------------------------------------

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def check_safetensors(path: str | os.PathLike) -> dict:
    """The header of a safetensors file, after checking that the file is as long as the header says (a truncated
    download or an interrupted copy is named here, not deep inside a loader). Raises UsageError."""
    p = Path(path)
    size = p.stat().st_size
    broken = f"{p}: truncated or corrupt safetensors weights"
    with open(p, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise UsageError(f"{broken} ({size} bytes); copy or save the model again")
        length = int.from_bytes(head, "little")
        if length <= 0 or 8 + length > size:
            raise UsageError(f"{broken} (header of {length} bytes in a file of {size}); copy or save the model again")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UsageError(f"{broken} (unreadable header); copy or save the model again") from None
    end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    if 8 + length + end > size:
        raise UsageError(f"{broken} ({size} of {8 + length + end} bytes); copy or save the model again")
    return header


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return (len(parts) == 2 and all(parts) and not text.startswith((".", "/", "~"))
            and not Path(text).exists())


def check_model_folder(path: str | os.PathLike, *, what: str = "model folder", tokenizer: bool = True) -> Path | str:
    """A saved model folder, checked cheaply (nothing is loaded): config.json is valid JSON with a model_type, the
    safetensors weights are complete, and (with `tokenizer`) tokenizer.json is valid JSON. Returns the folder, or the
    text itself for a Hub id (`org/name`) that is not a local path: loading checks that one. Raises UsageError
    naming the missing or broken file."""
    if isinstance(path, str) and _looks_like_hub_id(path):
        return path
    folder = Path(path)
    if not folder.exists():
        raise UsageError(f"{what} not found: {folder}")
    if not folder.is_dir():
        raise UsageError(f"{what} {folder} is a file; give the folder that holds config.json")
    config = read_json(folder / "config.json", what=f"config.json of {what} {folder} (written by save_pretrained)")
    if not isinstance(config, dict) or "model_type" not in config:
        raise UsageError(f"{folder / 'config.json'}: no model_type; it is not a transformers model config")
    if (folder / WEIGHTS_INDEX).is_file():
        index = read_json(folder / WEIGHTS_INDEX)
        shards = sorted(set(index.get("weight_map", {}).values())) if isinstance(index, dict) else []
        for shard in shards:
            if not (folder / shard).is_file():
                raise UsageError(f"{folder / shard}: weight shard named by {WEIGHTS_INDEX} is missing")
            check_safetensors(folder / shard)
    elif (folder / WEIGHTS).is_file():
        check_safetensors(folder / WEIGHTS)
    else:
        pickled = " (pytorch_model.bin is not read: save with safetensors)" if \
            (folder / "pytorch_model.bin").exists() else ""
        raise UsageError(f"{folder}: no {WEIGHTS}{pickled}; give a folder written by save_pretrained")
    if tokenizer:
        if not (folder / "tokenizer.json").is_file():
            raise UsageError(f"{folder}: no tokenizer.json; save the tokenizer into the model folder "
                             "(tokenizer.save_pretrained(folder))")
        read_json(folder / "tokenizer.json", what="tokenizer.json")
    return folder


def load_model_folder(path: str | os.PathLike, *, device=None, dtype=None, trust_remote_code: bool = False,
                      what: str = "model folder", **model_kwargs):
    """(model in eval mode on `device`, tokenizer) from a checked model folder or a Hub id, through transformers'
    Auto classes (this package registers its classes when imported; `trust_remote_code` is for folders of models
    whose code is not installed). `dtype`: the weights' dtype (torch.dtype or None for float32)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    source = check_model_folder(path, what=what)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=trust_remote_code)
        model = AutoModelForSeq2SeqLM.from_pretrained(str(source), dtype=dtype or torch.float32,
                                                      trust_remote_code=trust_remote_code, **model_kwargs)
    except (OSError, ValueError, KeyError) as error:  # KeyError: a JSON file without the keys transformers needs
        if isinstance(source, Path):
            raise UsageError(f"{what} {source}: cannot be loaded ({_one_line(error)})") from error
        raise UsageError(f"{what} {source}: not a local folder, and not loadable from the Hub "
                         f"({_one_line(error)})") from error
    if device is not None:
        model = model.to(device)
    return model.eval(), tokenizer
