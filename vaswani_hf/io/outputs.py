"""Decide what a command may write before any work, and write it atomically with the user's umask.

The rules are each written once here and applied to every path a command declares:

- `check_paths(inputs, outputs)` ensures that an output never is, contains or lies inside an input (or another
  output), whatever `--overwrite` says, because `--overwrite` means "replace my previous output", never "delete my
  input". Paths are compared after following symbolic links, so that a link to an input is the input. Where the working
  folder was deleted (`UNUSABLE_WORKING_FOLDER`), a relative path is refused, because it names nothing that can be read
  or written (`check_not_relative`).
- `check_output_file` accepts an output file that is absent, or (with `overwrite`) a regular file; a symbolic link, a
  device, a FIFO or a socket is never replaced by a file.
- `check_output_dir` accepts an output folder that is absent or empty, or (with `overwrite`) a folder that this
  package wrote as the same kind of output. Every folder a tool writes carries a small marker (`MARKER`) naming what it
  is, and a folder without it (a model folder downloaded from the Hub, a corpus folder, a parent of the input) is not
  replaced.
- `replace_atomically` makes the new file or folder appear whole, in one rename, with the modes the umask gives (not
  the 0600/0700 of temporary files), flushed to disk.
- A folder's name that is not UTF-8 (on Linux a name is bytes) cannot be given to the libraries written in Rust: the
  tokenizers library raises UnicodeEncodeError for it, and transformers' `save_pretrained` of a tokenizer calls it. A
  folder published whole (`replace_atomically(folder=True)`, `atomic_output_dir`) is therefore handed to the writer by
  its descriptor's name, /proc/self/fd/N (`library_path`), and is written as asked. A folder written into in place
  (a training run's, where the Trainer saves checkpoints and reads them back through the same libraries) is refused by
  `check_output_dir` before any work, as is any such folder where Linux's descriptor names are missing.
- `FolderLock` lets one run at a time write into a folder (a training run's folder, the staging folder of a
  translation).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from ..errors import STDIO, UsageError

MARKER = ".vaswani_hf.json"  # holds {"written_by": KIND}: which tool's output the folder is (see check_output_dir)
# This holds what was wrong with the working folder ("the working folder /x/y was deleted") when the running command
# started, or None. The commands' runner then works from "/" (vaswani_commands.leave_an_unusable_working_folder), so
# that a command that names only absolute paths runs; a relative path would be read against "/" and is refused. The
# command-line boundary (vaswani_hf.cli.contract.run_cli) sets it for the running command.
UNUSABLE_WORKING_FOLDER: ContextVar[str | None] = ContextVar("unusable_working_folder", default=None)


def _loop_check(path: Path, what: str) -> None:
    try:
        path.resolve(strict=False)
    except (RuntimeError, OSError):  # Python reports a symlink loop as RuntimeError or OSError(ELOOP)
        raise UsageError(
            f"{what} {path}: too many levels of symbolic links (a link loop); fix or remove the link"
        ) from None


def check_not_relative(paths: Mapping[str, str | os.PathLike | None]) -> None:
    """Where the working folder was deleted or cannot be read (`UNUSABLE_WORKING_FOLDER`), raise a UsageError naming
    the first relative path of `paths`, since it names nothing there. `paths` maps a flag or recipe key to its path;
    None and "-" are skipped."""
    unusable = UNUSABLE_WORKING_FOLDER.get()
    relative = [
        f"{name} {path}"
        for name, path in paths.items()
        if path is not None and str(path) != STDIO and not Path(path).is_absolute()
    ]
    if unusable and relative:
        raise UsageError(
            f"{relative[0]} is relative to the working folder, but {unusable}; give an absolute path, or cd into "
            "an existing folder and run the command again"
        )


def check_paths(
    inputs: Mapping[str, str | os.PathLike | None], outputs: Mapping[str, str | os.PathLike | None]
) -> None:
    """Raise a UsageError for an output that is, contains or lies inside an input or another output, and for "-"
    named by two inputs (or two outputs), since it is one stream. `inputs` and `outputs` map a flag or recipe key to
    its path; None is skipped, and so is an input that does not exist (a Hub id). A relative path where the working
    folder is gone is refused by `check_not_relative`."""
    for role, paths in (("inputs", inputs), ("outputs", outputs)):
        streams = [name for name, p in paths.items() if p is not None and str(p) == STDIO]
        if len(streams) > 1:
            stream = "standard input" if role == "inputs" else "standard output"
            raise UsageError(
                f"{' and '.join(streams)} all name {stream} ({STDIO}), which holds one stream; give files "
                f"for all but one"
            )
    ins = {name: Path(p) for name, p in inputs.items() if p is not None and str(p) != STDIO}
    outs = {name: Path(p) for name, p in outputs.items() if p is not None and str(p) != STDIO}
    check_not_relative({**ins, **outs})
    for name, path in {**ins, **outs}.items():
        _loop_check(path, name)
    real_in = {name: Path(os.path.realpath(p)) for name, p in ins.items() if os.path.lexists(p)}
    real_out = {name: Path(os.path.realpath(p)) for name, p in outs.items()}
    for out_name, out in real_out.items():
        for in_name, inp in real_in.items():
            relation = _relation(out, inp)
            if relation:
                raise UsageError(
                    f"{out_name} {outs[out_name]} {relation} {in_name} {ins[in_name]}, which this command "
                    f"reads; writing it would destroy the input whatever --overwrite says: choose "
                    f"another {out_name}"
                )
    names = list(real_out)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            relation = _relation(real_out[first], real_out[second])
            if relation:
                raise UsageError(
                    f"{first} {outs[first]} {relation} {second} {outs[second]}; give the outputs separate places"
                )


def _relation(out: Path, other: Path) -> str | None:
    """Return how output `out` overlaps path `other` (both resolved), as the phrase "is", "contains" or "lies
    inside", or None where they do not overlap."""
    if out == other or (out.exists() and other.exists() and os.path.samefile(out, other)):
        return "is"
    if out in other.parents:
        return "contains"
    if other in out.parents:
        return "lies inside"
    return None


def file_kind(mode: int) -> str:
    """Return what a stat mode describes, for error messages: 'a character device', 'a FIFO', ..."""
    for test, name in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def path_kind(path: str | os.PathLike) -> str:
    """Return what `path` is, as a message says it: "a file", "a folder", "a character device", "a FIFO", ..., "a
    symbolic link to a folder", "a symbolic link to nothing", "a symbolic-link loop", or "nothing"."""
    p = Path(path)
    if p.is_symlink():
        try:
            return "a symbolic link to " + file_kind(p.stat().st_mode)
        except FileNotFoundError:
            return "a symbolic link to nothing"
        except OSError:
            return "a symbolic-link loop"
    if p.is_file():
        return "a file"
    return file_kind(os.lstat(p).st_mode) if os.path.lexists(p) else "nothing"


def _existing_kind(path: Path) -> str | None:
    """Return `path_kind(path)` for a symbolic link or for something that is neither a file nor a folder, and None
    otherwise."""
    if path.is_symlink() or (os.path.lexists(path) and not (path.is_file() or path.is_dir())):
        return path_kind(path)
    return None


def _check_parent(path: Path, what: str) -> None:
    """Check that the nearest existing entry above `path` is a folder we may write into, and otherwise raise a
    UsageError naming what is there."""
    for parent in path.absolute().parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise UsageError(f"{what} {path}: {parent} is {path_kind(parent)}, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"{what} {path}: folder {parent} is not writable; check its permissions")
            return


def check_output_file(path: str | os.PathLike, *, overwrite: bool = False, what: str = "output file") -> Path:
    """Check that `path` can be written, and return it: its folder exists, and it is absent or (with `overwrite`) a
    regular file. A problem raises a UsageError naming the path."""
    p = Path(path)
    _loop_check(p, what)
    kind = _existing_kind(p)
    if kind:
        raise UsageError(f"{what} {p} is {kind}; a tool replaces only a regular file it wrote: give a new file name")
    if p.is_dir():
        raise UsageError(f"{what} {p} is a folder; give a file name")
    if not p.parent.is_dir():
        raise UsageError(f"{what} {p}: folder {p.parent} does not exist; create it first")
    _check_parent(p, what)
    if p.exists() and not overwrite:
        raise UsageError(f"{what} {p} exists; pass --overwrite to replace it")
    return p


def mark(folder: str | os.PathLike, kind: str) -> None:
    """Record in `folder` (its MARKER) that this package wrote it as an output of `kind`."""
    (Path(folder) / MARKER).write_text(json.dumps({"written_by": kind}) + "\n", encoding="utf-8")


def written_by(folder: str | os.PathLike) -> str | None:
    """Return the kind of output that this package wrote into `folder`, read from its marker, or None."""
    try:
        return json.loads((Path(folder) / MARKER).read_text(encoding="utf-8")).get("written_by")
    except (OSError, ValueError, AttributeError):
        return None


def check_output_dir(
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    what: str = "output folder",
    kind: str | None = None,
    replaced: bool = True,
) -> Path:
    """Check that `path` can become an output folder, and return it: it is absent or empty, or, with `overwrite`, a
    folder that this package wrote as an output of `kind` (its marker says so). Without `kind`, `overwrite` accepts any
    folder, because the callers that replace only their own files in it (a training run) check those themselves. A
    folder that is written into, rather than `replaced` as a whole, may be a symbolic link to a folder."""
    p = Path(path)
    _loop_check(p, what)
    existing = _existing_kind(p)
    if existing and not (not replaced and p.is_dir()):
        raise UsageError(f"{what} {p} is {existing}; give a folder")
    if p.exists() and not p.is_dir():
        raise UsageError(f"{what} {p} is a file; give a folder")
    _check_parent(p, what)
    check_library_name(p, what, written_into=not replaced)
    if p.is_dir() and any(p.iterdir()):
        if not overwrite:
            raise UsageError(f"{what} {p} exists and is not empty; pass --overwrite to replace it, or choose another")
        if kind is not None and (found := written_by(p)) != kind:
            owner = f"it holds a {found}" if found else "it was not written by this tool"
            raise UsageError(
                f"{what} {p} is not an earlier {kind} ({owner}: {first_entries(p)}); --overwrite "
                "replaces only a folder this tool wrote: choose another folder or remove it yourself"
            )
    return p


def check_library_name(path: str | os.PathLike, what: str, *, written_into: bool) -> None:
    """Raise a UsageError where the libraries that write an output folder could not address it: its absolute name is
    not UTF-8 and either the folder is written into in place (a training run's folder, whose checkpoints the
    transformers Trainer saves and reads back through the tokenizers and safetensors libraries, which take only UTF-8
    paths) or it is published whole but Linux's descriptor names are missing (`library_path`)."""
    if utf8_name(path) or (not written_into and descriptor_names_work()):
        return
    raise UsageError(
        f"{what} {path}: its name is not UTF-8, and the tokenizers and safetensors libraries, which write and read "
        "the files of this folder, take only UTF-8 paths; choose a folder whose path is UTF-8 (or rename the folder "
        "that is not)"
    )


def first_entries(folder: Path, n: int = 3) -> str:
    """Return the first `n` names a folder holds, its MARKER aside, for a message."""
    names = sorted(x.name for x in folder.iterdir() if x.name != MARKER)
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def apply_umask(path: str | os.PathLike) -> None:
    """Give a file, or every file and folder of a tree, the modes a plain `open` or `mkdir` would give (0666 or 0777
    less the umask). Temporary files and folders are created 0600 and 0700, and libraries that write through them
    (transformers saves weights that way) would otherwise leave outputs that only their owner can read."""
    mask, path = os.umask(0), Path(path)
    os.umask(mask)  # the umask can be read only by setting it, so the old one is put back
    trees = os.walk(path) if path.is_dir() and not path.is_symlink() else [(str(path.parent), [], [path.name])]
    for root, folders, files in trees:
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o666 & ~mask)
        for name in folders:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
    if path.is_dir():
        os.chmod(path, 0o777 & ~mask)


def shortened(name: str, limit: int = 100) -> str:
    """Return `name` cut to at most `limit` bytes, dropping whole characters from its end.

    Temporary files and folders carry this part of their output's name, so that an output name of up to 255 bytes,
    the legal maximum, still leaves room for their prefix and suffix.
    """
    while len(os.fsencode(name)) > limit:
        name = name[:-1]
    return name


@contextmanager
def replace_atomically(
    target: str | os.PathLike, *, folder: bool = False, kind: str | None = None, overwrite: bool = True
):
    """Yield a temporary file (or folder) beside `target` to write into; on success it replaces `target` in one
    rename (the old content removed only after), with the umask's modes and, for a folder of `kind`, the marker; on
    failure it is removed and `target` is untouched.

    With `overwrite` False a file is published only if nothing is at `target` yet (`_publish_new_file`): a file that
    another run wrote there after this run's checks is kept, and this run is refused. A folder needs no such care
    here, because `atomic_output_dir` claims and locks it before any work."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        temporary = Path(tempfile.mkdtemp(prefix=f".{shortened(target.name)}.", dir=target.parent))
    else:
        handle, name = tempfile.mkstemp(prefix=f".{shortened(target.name)}.", dir=target.parent)
        os.close(handle)
        temporary = Path(name)
    try:
        if folder:
            with library_path(temporary) as name:
                yield name
        else:
            yield temporary
        if folder and kind is not None:
            mark(temporary, kind)
        apply_umask(temporary)
        fsync_tree(temporary)
        if folder and target.exists():
            old = target.with_name(f".{shortened(target.name)}.old-{os.getpid()}")
            os.rename(target, old)
            os.rename(temporary, target)
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        elif not overwrite and not folder:
            _publish_new_file(temporary, target)
        else:
            os.replace(temporary, target)
        fsync_tree(target.parent, recursive=False)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True) if temporary.is_dir() else temporary.unlink(missing_ok=True)
        raise


def utf8_name(path: str | os.PathLike) -> bool:
    """Return whether the absolute name of `path` is UTF-8, as the libraries that take only UTF-8 paths need."""
    try:
        name = os.path.abspath(path)
    except OSError:  # the working folder is gone: a relative path is refused elsewhere (check_not_relative)
        name = os.fspath(path)
    try:
        os.fsdecode(name).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Linux names every descriptor a process holds /proc/self/fd/N (proc(5)); for a folder's descriptor, a path through
# that name reaches the folder's entries.
_DESCRIPTORS = "/proc/self/fd"


def descriptor_names_work() -> bool:
    """Return whether a folder can be named by its descriptor (`library_path`): on Linux with /proc mounted."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.path.isdir(os.path.join(_DESCRIPTORS, str(fd)))
    finally:
        os.close(fd)


@contextmanager
def library_path(folder: str | os.PathLike):
    """Yield a name of the existing `folder` that every library accepts: `folder` itself where its absolute name is
    UTF-8, and otherwise /proc/self/fd/N, N being a descriptor of the folder held open until the block ends.

    On Linux a file name is bytes, and the libraries written in Rust take only a UTF-8 path: the tokenizers library
    (`Tokenizer.save`, which transformers' `save_pretrained` of a tokenizer calls, and `Tokenizer.from_file`) raises
    UnicodeEncodeError for any other, and safetensors refuses to open one. The descriptor's name is ASCII and reaches
    the same folder, so a folder whose name is not UTF-8 is written in place, by the same libraries, and the file names
    inside it are the ones they choose. Where no such name exists (no /proc), `check_output_dir` has refused the
    folder before any work."""
    folder = Path(folder)
    if utf8_name(folder):
        yield folder
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield Path(_DESCRIPTORS, str(fd))
    finally:
        os.close(fd)


def _publish_new_file(temporary: Path, target: Path) -> None:
    """Give `temporary` the name `target` only if that name is still free. A hard link is created or refused in one
    step by the file system, so two runs that both found the name free cannot both take it: the later one is told
    that its output was written by another run, and that run's file is kept. Where the file system has no hard links
    (some network and FUSE file systems), the name is checked just before the rename, which narrows the window but
    cannot close it."""
    taken = UsageError(
        f"{target} was written by another run while this one worked; it is not replaced: pass --overwrite to "
        "replace it, or choose another file"
    )
    try:
        os.link(temporary, target)
    except FileExistsError:
        raise taken from None
    except OSError:
        if os.path.lexists(target):
            raise taken from None
        os.replace(temporary, target)
        return
    temporary.unlink()


@contextmanager
def atomic_output_dir(target: str | os.PathLike, kind: str | None = None, *, overwrite: bool = False):
    """Write a new output folder in place of `target` in one rename, as `replace_atomically(target, folder=True)`
    does, and let only one run write it. On entry the folder is created empty if needed and locked, so a second run
    into it is refused. If another run filled it between this run's checks of its paths and this call, it is not
    replaced unless `overwrite` is given. If this call created the folder and the run fails, the empty folder is
    removed again."""
    target = Path(target)
    created = not os.path.lexists(target)
    target.mkdir(parents=True, exist_ok=True)
    try:
        with FolderLock(target):
            if not overwrite and any(target.iterdir()):
                raise UsageError(
                    f"output folder {target} was written by another run while this one worked; it is "
                    "not replaced: pass --overwrite to replace it, or choose another folder"
                )
            with replace_atomically(target, folder=True, kind=kind) as temporary:
                yield temporary
    finally:
        if created and target.is_dir() and not any(target.iterdir()):
            target.rmdir()


def fsync_tree(path: str | os.PathLike, recursive: bool = True) -> None:
    """Flush a file, a folder's entries or (recursive) a tree to disk, best effort. Only regular files and folders
    are opened: opening a FIFO would wait for a writer forever."""
    path = Path(path)
    paths = [path]
    if recursive and path.is_dir():
        paths = [Path(root) / name for root, _, files in os.walk(path) for name in files] + [path]
    for p in paths:
        try:
            mode = os.lstat(p).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                continue
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass


class FolderLock:
    """Hold an exclusive `flock` on the folder itself while a run writes into it, so that there is no lock file and a
    killed run leaves no stale lock. A second run into the same folder is refused in one line."""

    def __init__(self, folder: str | os.PathLike, what: str = "output folder"):
        self.folder, self.what, self._fd = Path(folder), what, None

    def acquire(self) -> FolderLock:
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"{self.what} {self.folder} is in use by another run (it holds the folder's lock); "
                "wait for it to finish, or choose another folder"
            ) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def folder_in_use(folder: str | os.PathLike) -> bool:
    """Return whether another run holds `folder`'s lock, found by a read-only probe (for `--check`)."""
    if not Path(folder).is_dir():
        return False
    try:
        FolderLock(folder).acquire().release()
    except UsageError:
        return True
    return False
