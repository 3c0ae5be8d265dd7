"""Run the commands: every vaswani-* console script and `scripts/*.py` starts here, before vaswani_hf is imported.

The package leaves the process alone. What a command must do to the process before importing the package (and
torch and transformers), and what can fail during that import, is handled here with the standard library only:

- A closed standard descriptor (0, 1, 2) gets /dev/null, so that no file opened later takes its number.
- A deleted working folder is left for "/", because torch's import aborts the process without one. A command naming
  only absolute paths then runs, and one naming a relative path is refused in one line by the path check.
- Too little memory (`ulimit -v`) or too few descriptors (`ulimit -n`) for the import is one line with exit status 1.
- A cache folder that cannot be written (a read-only HOME or ~/.cache, a HOME that is no folder) is moved to a folder
  of this user's under the temporary folder, by the variable each library reads when it is imported (`CACHES`), and
  one line on standard error names it. Otherwise datasets, evaluate and huggingface_hub fail part way (a training run
  refuses its corpus cache), and matplotlib prints its own warning.

Then the tool's module (`TOOLS`) runs its `main` under `vaswani_hf.cli.contract.run_cli`. The console script
`vaswani-<tool>` is `vaswani_commands:<tool>`, a function this module makes for each tool on request (`__getattr__`);
`python -m vaswani_commands <tool> ARGS` runs it too.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import tempfile
import traceback
from functools import partial
from importlib import import_module
from pathlib import Path

STREAMS = ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY))

# The one list of the tools: each tool, by the name of its console script's function, maps to the module whose
# `main(argv)` runs it. Everything else follows from it: the function `vaswani_commands.<name>` (`__getattr__`), the
# commands of vaswani_hf/cli/registry.py (the tools whose module is a vaswani_hf.cli command), and what packaging needs
# written out, which tests/test_cli_registry.py checks against this table: pyproject.toml's
# `vaswani-<name> = "vaswani_commands:<name>"` (`console_scripts()`, dashes for underscores) and the scripts/*.py
# shims that `accelerate launch scripts/train.py` runs.
TOOLS = {
    "train": "vaswani_hf.cli.train",
    "translate": "vaswani_hf.cli.translate",
    "evaluate": "vaswani_hf.cli.evaluate",
    "train_tokenizer": "vaswani_hf.cli.train_tokenizer",
    "average_checkpoints": "vaswani_hf.cli.average_checkpoints",
    "export_marian": "vaswani_hf.cli.export_marian",
    "export_ctranslate2": "vaswani_hf.cli.export_ctranslate2",
    "visualize_attention": "vaswani_hf.cli.visualize_attention",
    "push_to_hub": "vaswani_hf.cli.push_to_hub",
    "space": "vaswani_hf.space.page",  # The Space's page is a Gradio server, not a vaswani_hf.cli command.
}


def occupy_closed_descriptors() -> None:
    """Put /dev/null on each standard descriptor (0, 1, 2) that is closed, so that no file opened later takes its
    number.

    Python's `sys.stdin`, `sys.stdout` and `sys.stderr` stay as they are (None), and
    `vaswani_hf.cli.surroundings.own_streams` gives the tool its stand-ins for them."""
    for fd, mode in STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            # open() takes the lowest free number, which is `fd` itself unless a lower one is free too.
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            else:
                os.set_inheritable(fd, True)


def working_folder_state() -> str | None:
    """Return what is wrong with the working folder, or None when nothing is.

    The answer reads "the working folder /x/y was deleted" or "the working folder cannot be read (...)".
    """
    try:
        os.getcwd()
        return None
    except FileNotFoundError:
        # Linux names the deleted folder ("/x/y (deleted)"); $PWD is not used, since it may be a parent process's.
        try:
            where = " " + os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
        except OSError:
            where = ""
        return f"the working folder{where} was deleted"
    except OSError as error:
        return f"the working folder cannot be read ({os.strerror(error.errno) if error.errno else error})"


def working_folder_problem() -> str | None:
    """Return one line saying what is wrong with the working folder and what to do, or None when nothing is."""
    state = working_folder_state()
    return None if state is None else f"{state}; cd into an existing folder and run the command again"


_left = {"state": None}  # What was wrong with the working folder this process left for "/".


def leave_an_unusable_working_folder() -> str | None:
    """Move to "/" if the working folder was deleted or cannot be read, and return what was wrong with it, or None.

    torch's import aborts the process without a working folder, yet a command that names only absolute paths needs
    none, so it runs. A relative path would now mean a place under "/", and the path check
    (`vaswani_hf.io.check_paths`) refuses it in one line. The answer holds while the process stays in "/"."""
    state = working_folder_state()
    if state is not None:
        os.chdir(os.sep)
        sys.path[:] = [entry for entry in sys.path if entry not in ("", ".")]  # They meant the folder that was left.
        _left["state"] = state
    elif _left["state"] is not None and os.getcwd() != os.sep:
        _left["state"] = None  # The process has moved on, because an in-process caller changed folders.
    return _left["state"]


def _below_home(env, *parts: str) -> Path | None:
    if env.get("HOME"):
        return Path(env["HOME"], *parts)
    try:
        return Path.home().joinpath(*parts)  # the password entry's
    except RuntimeError:  # No HOME and no password entry.
        return None


def _below(base: Path | None, *parts: str) -> Path | None:
    return base.joinpath(*parts) if base is not None else None


def cache_location(variable: str, environ=os.environ) -> Path | None:
    """Return the folder that the cache variable `variable` of `CACHES` (or a folder one depends on) stands for: its
    value, or where the library puts it when it is unset. None means it cannot be known (no home folder)."""
    if environ.get(variable):
        return Path(environ[variable])
    return dict(CACHES + _BASES)[variable](environ)


# The cache folders that the libraries write, each by the variable that moves it and the folder the library uses when
# it is unset. They are resolved in this order, so that a moved XDG_CACHE_HOME carries the caches below it:
# huggingface_hub's HF_HOME (the Hub cache, the token), datasets' corpora and maps (below HF_HOME, as evaluate's metric
# modules are), torch's hub, matplotlib's font cache. Triton's kernels, matplotlib's configuration and sacrebleu's test
# sets lie outside it.
CACHES = (
    ("XDG_CACHE_HOME", lambda env: _below_home(env, ".cache")),
    ("HF_HOME", lambda env: _below(cache_location("XDG_CACHE_HOME", env), "huggingface")),
    ("HF_DATASETS_CACHE", lambda env: _below(cache_location("HF_HOME", env), "datasets")),
    ("TORCH_HOME", lambda env: _below(cache_location("XDG_CACHE_HOME", env), "torch")),
    ("TRITON_CACHE_DIR", lambda env: _below(cache_location("TRITON_HOME", env), ".triton", "cache")),
    ("MPLCONFIGDIR", lambda env: _below(cache_location("XDG_CONFIG_HOME", env), "matplotlib")),
    ("SACREBLEU", lambda env: _below_home(env, ".sacrebleu")),
)
_BASES = (  # folders that the caches lie below, which no library writes itself
    ("TRITON_HOME", lambda env: _below_home(env)),
    ("XDG_CONFIG_HOME", lambda env: _below_home(env, ".config")),
)


def writable(folder: Path | None) -> bool:
    """Return whether `folder` is a folder this process can write into, or can be created: its nearest existing
    ancestor is a folder it can write into. A part of the path that is a file, or a read-only file system, makes it
    unwritable for the superuser too."""
    if folder is None:
        return False
    for place in (folder, *folder.absolute().parents):
        if os.path.lexists(place):
            return place.is_dir() and os.access(place, os.W_OK | os.X_OK)
    return False


def private_folder() -> Path | None:
    """Return this user's cache folder under the temporary folder (TMPDIR), made if need be: one folder for every
    process and every run of this user, so that a launch's processes share their caches. One that another user could
    have made or changed (not this user's, a link, open to others) is not used; a fresh one is made instead."""
    folder = Path(tempfile.gettempdir(), f"vaswani_hf-caches-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return folder
        return Path(tempfile.mkdtemp(prefix="vaswani_hf-caches-"))
    except OSError:
        return None


def move_unwritable_caches(environ=os.environ) -> str | None:
    """Point every cache of `CACHES` that cannot be written at a folder of `private_folder()`, by setting its variable
    before the libraries are imported (they read it then), and return the line that says so, or None when every cache
    can be written (or no temporary folder can be made either: then the libraries report it as before)."""
    moved, folder = [], None
    for variable, _ in CACHES:
        current = cache_location(variable, environ)
        if writable(current):
            continue
        folder = folder or private_folder()
        if folder is None:
            return None
        if variable == "HF_HOME" and current is not None:
            keep_the_hub_files(current, environ)
        environ[variable] = str(folder / variable.lower())
        moved.append(f"{variable} {current}" if current is not None else f"{variable} (no home folder)")
    if not moved:
        return None
    return f"caches in {folder}, since these cannot be written: {', '.join(moved)}"


def keep_the_hub_files(hf_home: Path, environ) -> None:
    """Keep reading what an unwritable HF_HOME holds: the models of its Hub cache and the token of `hf auth login`
    (huggingface_hub reads both through their own variables, HF_HUB_CACHE and HF_TOKEN_PATH, where they are set)."""
    for variable, path in (("HF_HUB_CACHE", hf_home / "hub"), ("HF_TOKEN_PATH", hf_home / "token")):
        if not environ.get(variable) and path.exists():
            environ[variable] = str(path)


def _main_process() -> bool:
    return all(os.environ.get(name, "0") == "0" for name in ("RANK", "LOCAL_RANK"))


def _file_size_limited() -> bool:
    try:
        import resource  # The resource module exists on Unix only.
    except ImportError:
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def limit_problem(error: BaseException) -> str | None:
    """Return which operating-system limit (memory, descriptors, file size) stopped the command and what to do.

    None means no such limit was the cause.
    """
    text, number = str(error).lower(), getattr(error, "errno", None)
    if isinstance(error, MemoryError) or number == errno.ENOMEM or "failed to map segment" in text:
        return "out of memory (the memory limit, ulimit -v, or the machine's); raise the limit or free memory"
    if number in (errno.EMFILE, errno.ENFILE) or "too many open files" in text:
        return "too many open files (the limit on open descriptors, ulimit -n); raise it, e.g. ulimit -n 4096"
    if number == errno.EFBIG or "file too large" in text or (_file_size_limited() and "unexpected pos" in text):
        return "file too large for the file-size limit (ulimit -f); raise it (ulimit -f unlimited)"
    return None


def debug_requested(argv) -> bool:
    """Return whether every traceback is to be shown: --debug is among the arguments, or VASWANI_DEBUG=1 (or true)."""
    return "--debug" in argv or os.environ.get("VASWANI_DEBUG", "").lower() in ("1", "true", "yes")


def _program() -> str:
    return Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "vaswani"


def _refuse(line: str, code: int) -> int:
    if sys.stderr is not None:
        print(f"{_program()}: error: {line}", file=sys.stderr)
    return code


def _interrupted() -> int:
    """Print "<program>: interrupted" on stderr and return Ctrl-C's exit status (128 + SIGINT), as `run_cli` does."""
    if sys.stderr is not None:
        print(f"{_program()}: interrupted", file=sys.stderr)
    return 128 + signal.SIGINT


def run(tool: str, argv=None) -> int:
    """Prepare the process, import the tool's module, run its `main(argv)` and return its exit status.

    The module docstring describes the preparation. A module that cannot be imported for a missing package or an
    operating-system limit is reported in one line with exit status 1, and an unknown tool with exit status 2."""
    occupy_closed_descriptors()
    leave_an_unusable_working_folder()
    moved = move_unwritable_caches()
    if moved and _main_process() and sys.stderr is not None:
        print(f"{_program()}: {moved}", file=sys.stderr)
    if tool not in TOOLS:
        return _refuse(f"no tool {tool!r}; the tools: {', '.join(tools())}", 2)
    module = TOOLS[tool]
    try:
        main = import_module(module).main
    except KeyboardInterrupt:
        # Ctrl-C while the tool's libraries load (torch alone takes seconds on a busy machine) comes before the tool's
        # own boundary exists; it ends the command as an interruption anywhere later would: one line, status 130.
        if debug_requested(sys.argv):
            raise
        return _interrupted()
    except (MemoryError, ImportError, OSError) as error:
        missing = getattr(error, "name", None) or ""
        if debug_requested(sys.argv):
            raise
        if isinstance(error, ModuleNotFoundError) and not missing.startswith("vaswani_hf"):
            return _refuse(
                f"the package {missing!r} that vaswani_hf needs is not installed ({sys.executable}); "
                "install vaswani_hf with its dependencies (pip install vaswani_hf, or pip install -e .)",
                1,
            )
        if limit_problem(error) is None:
            raise
        return _refuse(limit_problem(error), 1)
    try:
        return main(argv)
    # --debug let the error through: print its traceback, then return the status its one line would have had.
    except Exception as error:
        traceback.print_exc()
        return getattr(error, "exit_status", 1)  # The boundary (cli.contract) sets it on an expected failure.


def tools() -> list[str]:
    """Return the tools' names (the keys of `TOOLS`), sorted."""
    return sorted(TOOLS)


def console_scripts() -> dict[str, str]:
    """Return what pyproject.toml's [project.scripts] must say, mapping each program to "module:function"."""
    return {f"vaswani-{name.replace('_', '-')}": f"vaswani_commands:{name}" for name in TOOLS}


def __getattr__(name: str):
    """Return the console-script function of the tool `name` (`run` with that tool), which pyproject.toml's
    [project.scripts] and scripts/*.py import as `vaswani_commands.<name>`.

    The functions are made on request (PEP 562), so that `TOOLS` stays the only place a tool's name is written."""
    if name in TOOLS:
        return partial(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(
            f"usage: python -m vaswani_commands <tool> [arguments]; the tools: {', '.join(tools())}", file=sys.stderr
        )
        sys.exit(2)
    sys.argv = [f"vaswani-{sys.argv[1].replace('_', '-')}", *sys.argv[2:]]
    sys.exit(run(sys.argv[0].removeprefix("vaswani-").replace("-", "_")))
