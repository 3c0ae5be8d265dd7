"""The harness of the command-line contract battery (tests/test_cli_<tool>.py: every tool x every input class that
applies to it).

Each case calls a tool's `main(argv)` in this process (fd-level capture) and asserts:

* the exit status: 2 for bad arguments or input, 1 for a failure of the run itself (an unreachable Hub), 130 for
  Ctrl-C, 0 where the input class must be handled (byte-order mark, CRLF, lone CR, `--overwrite`);
* for a failure: exactly one line on stderr, naming the offending file (and line, where there is one) or the flag or
  recipe key, and no traceback (no Python warning either: in a real process it would be a second line);
* every file and folder under the case's folder and under the shared assets is unchanged afterwards, except what
  the case says the tool may write (a successful run's output). A refused run writes nothing, not even a temporary
  file or an empty folder.

A tool's test file is the one place that states what the batteries need of the tool: `case = Cases("<tool>",
refused=..., run=..., paths=..., writers=...)` (a command line refused before any work, one that runs to completion,
the path battery's and the full-disk battery's command lines), and `@case("<name>")` on a builder `(t, a) -> Call`
(t: the case's folder, a: the shared `Assets`) registers a case with id `<tool>-<name>`; `run_case` runs one. The
batteries that cover every tool read these declarations through `every_tool()`, for each tool of the registry. The
shared assets (a tiny model folder with tokenizer and card, one with learned positions, a CTranslate2 export, a
finished two-checkpoint training run) are the session-scoped fixture `assets` of the plugin cli_assets.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_helpers import truncate

from vaswani_hf.cli.registry import COMMANDS
from vaswani_hf.io import read_lines

TOOLS = tuple(COMMANDS)  # every tool of the registry (vaswani_hf.cli.registry), in its order
LINES = ["a man is riding a horse .", "two dogs play in the snow .", "a woman reads a book in the park ."]
GERMAN = ["ein mann reitet ein pferd .", "zwei hunde spielen im schnee .", "eine frau liest ein buch im park ."]
LATIN1 = b"a man is riding a horse .\nna\xefve caf\xe9 au lait .\n"  # line 2 is latin-1, not UTF-8
LONG = " ".join(["a man is riding a horse ."] * 6)  # ~90 tokens: beyond 32 learned / 24 exported positions
BOM = "\ufeff"
TRANSLATE_OPTIONS = ["--num_beams", "1", "--no_progress", "--device", "cpu"]  # + the saved max_length_b 4
PAGE = 4096
MANY = 600  # lines: their translations (~20 characters each) fill several pages


# ---------------------------------------------------------------------------------------------------------------------
# Files, snapshots, a tool's main
# ---------------------------------------------------------------------------------------------------------------------


def write(path: Path, data: bytes | str | list[str]) -> Path:
    """A file with exactly these bytes (str: UTF-8; a list: lines ending with "\\n")."""
    if isinstance(data, list):
        data = "".join(line + "\n" for line in data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def snapshot(*roots: Path) -> dict[str, str]:
    """{path: sha256 of the file, or "<dir>"} of everything under `roots` (hidden files included)."""
    state = {}
    for root in roots:
        for p in root.rglob("*"):
            state[str(p)] = "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return state


def changes(before: dict, after: dict) -> set[str]:
    """The paths created, removed or changed between two snapshots."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def under(path: str, allowed) -> bool:
    """Whether `path` is one of `allowed` or lies below one of them."""
    return any(path == str(a) or path.startswith(str(a) + os.sep) for a in allowed)


def earlier_output(folder: Path, kind: str, *names: str) -> Path:
    """A folder as a tool of this package left it: some files and the marker naming what it is (`kind`), so that
    `--overwrite` may replace it."""
    from vaswani_hf.io import MARKER

    for name in names or ("mine.txt",):
        write(folder / name, "old")
    write(folder / MARKER, json.dumps({"written_by": kind}))
    return folder


def copy(source: Path, target: Path) -> Path:
    """A copy of a folder, or of a file (its folder created)."""
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return target


def many_lines(t: Path) -> Path:
    return write(t / "in" / "many.txt", [LINES[i % len(LINES)] for i in range(MANY)])


@contextmanager
def fresh_logging():
    """The root logger as in a new process (no handler), whatever pytest or earlier tools attached; restored after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers = handlers
        root.setLevel(level)


def stdout_has(*fragments):
    """A check: every fragment is in the tool's stdout."""

    def check(stdout, stderr):
        for fragment in fragments:
            assert fragment in stdout, (fragment, stdout)

    return check


def translated(out: Path, expected: list[str]):
    """A check: the file `out` holds exactly the lines `expected`."""

    def check(stdout, stderr):
        lines = read_lines(out)
        assert lines == expected, (lines, expected)

    return check


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def run_main(tool: str, argv) -> tuple[int, list]:
    """`main(argv)` of a tool, with the warnings a fresh process would print recorded (they would be stderr lines)."""
    main = importlib.import_module(f"vaswani_hf.cli.{tool}").main
    with fresh_logging(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)  # Python's defaults outside __main__
        code = main([str(a) for a in argv])
    return code, [f"{w.category.__name__}: {w.message}" for w in caught]


# ---------------------------------------------------------------------------------------------------------------------
# The shared assets (built by cli_assets.py)
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Assets:
    root: Path
    model: Path  # tiny model + tokenizer + card + handler (sinusoidal positions)
    learned: Path  # the same with learned positions for 32 positions
    ct2: Path  # CTranslate2 export of `model` with a 24-position table
    corpus: Path  # Moses corpus folder: train.en, train.de
    recipe: Path  # the tiny recipe (moses corpus, 4 steps, checkpoints at 2 and 4)
    run: Path  # a finished run of `recipe`
    plain: Path  # LINES, LF
    translations: list[str] = field(default_factory=list)  # of `plain` with TRANSLATE_OPTIONS


# ---------------------------------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Call:
    argv: list
    code: int = 2
    expect: tuple = ()  # fragments of the one stderr line (failures)
    may_change: tuple = ()  # paths the tool may create, change or remove (and everything under them)
    check: Callable | None = None  # check(stdout, stderr) after the call
    interrupt: str | None = None  # "module.attr" replaced by a function raising KeyboardInterrupt
    env: dict = field(default_factory=dict)
    patch: dict = field(default_factory=dict)  # "module.attr" -> value
    stdin: bytes | None = None  # standard input, as bytes


@dataclass(frozen=True)
class PathCase:
    """A command line with paths, for the path battery (tests/test_cli_path_properties.py): `inputs(folder, assets)`
    copies its inputs into `folder` ({role: path}; the role is how an error may name the input: `roles`);
    `argv(inputs, output, overwrite)` is the command line; `output` names the output in an error (a flag or a recipe
    key; None: the command writes nothing)."""

    id: str
    inputs: Callable[[Path, Assets], dict[str, Path]]
    argv: Callable[[dict[str, Path], str, bool], list]
    output: str | None
    roles: tuple[str, ...] = ("--model_dir",)
    derived: tuple[str, ...] = ()  # roles whose path the command line does not name itself (a corpus file)
    tool: str = ""  # set by `Cases`


# The last step of an atomic write before the output appears (the whole new content is in its temporary file).
BEFORE_THE_RENAME = "vaswani_hf.io.outputs.fsync_tree"


@dataclass(frozen=True)
class Writer:
    """A command line that writes, for the batteries of a full disk, an interruption while writing (Ctrl-C, SIGTERM,
    SIGHUP) (tests/test_cli_os_conditions.py, tests/test_cli_surroundings.py): `argv(assets, case folder, disk)`
    (None: the tool's `run` into the disk); `output` names the output in the error line; `part` bytes free let it
    start and stop part way (measured: its output is larger); `interrupt` ("module.attr") is its last step before
    the output appears, where the interruption batteries stop it."""

    id: str
    argv: Callable[[Assets, Path, Path], list] | None
    output: str
    part: int
    interrupt: str = BEFORE_THE_RENAME
    tool: str = ""  # set by `Cases`


@dataclass(frozen=True)
class Reads:
    """A command line that reads text, for the input-kind battery (tests/test_cli_input_kinds.py), which gives it
    `source` as each kind of input (a file, a named pipe, a process substitution, /dev/stdin, "-", a file removed,
    replaced or changed while read): `argv(assets, folder, source)`; `text(assets)` the lines `source` holds; `at(folder)`
    where the input must lie (a corpus file named by its folder; None: anywhere, "-" included); `outputs(folder)` the
    files whose bytes must not depend on the kind; `stdout`: whether standard output must not either."""

    id: str
    argv: Callable[[Assets, Path, str], list]
    text: Callable[[Assets], list[str]]
    outputs: Callable[[Path], list[Path]] = lambda t: []
    stdout: bool = False
    at: Callable[[Path], Path] | None = None
    tool: str = ""  # set by `Cases`


@dataclass(frozen=True)
class Stdout:
    """A command line whose result goes to standard output, for the closed-stream batteries (a closed standard
    output, a reader that closes the pipe after `read_lines` lines): `argv(assets, folder)`."""

    argv: Callable[[Assets, Path], list]
    read_lines: int = 0


@dataclass(frozen=True)
class Resumable:
    """A command line whose finished units a resume reuses, for the resume battery (tests/test_cli_resume.py):
    `argv(assets, folder)` runs; `stop` ("module.attr") raises KeyboardInterrupt once every unit is written;
    `units(folder)` are the files a resume would reuse (one is damaged); `resume` continues; `output(folder)` is what
    the resumed run must give byte for byte as an uninterrupted one."""

    id: str
    argv: Callable[[Assets, Path], list]
    stop: str
    units: Callable[[Path], list[Path]]
    output: Callable[[Path], Path]
    resume: tuple = ("--resume",)
    tool: str = ""  # set by `Cases`


@dataclass
class Cases:
    """What the batteries need of one tool (see the module docstring), and its cases: `@cases(name, *marks)` registers
    a builder `(t, a) -> Call` as the case `<tool>-<name>`; `params` parametrises ("tool, build")."""

    tool: str
    refused: Callable[[Path], list]  # parses, and is refused (an absent input) before any work
    run: Callable[[Assets, Path], list]  # runs to completion, writing into the case's folder t
    paths: Sequence[PathCase] = ()
    writers: Sequence[Writer] = ()
    reads: Sequence[Reads] = ()  # its text inputs
    stdout: Stdout | None = None  # a result on standard output
    resumes: Sequence[Resumable] = ()  # what its resume reuses
    params: list = field(default_factory=list)

    def __post_init__(self):
        self.paths = [dataclasses.replace(p, tool=self.tool) for p in self.paths]
        self.reads = [dataclasses.replace(r, tool=self.tool) for r in self.reads]
        self.resumes = [dataclasses.replace(r, tool=self.tool) for r in self.resumes]
        run = self.run
        self.writers = [
            dataclasses.replace(w, tool=self.tool, argv=w.argv or (lambda a, t, disk: run(a, disk)))
            for w in self.writers
        ]

    def contract_test(self):
        """The test that runs every case of the tool (assigned to `test_cli_contract` at the end of its file)."""

        @pytest.mark.parametrize("tool, build", self.params)
        def test_cli_contract(tool, build, tmp_path, assets, capfd, monkeypatch):
            run_case(tool, build, tmp_path, assets, capfd, monkeypatch)

        return test_cli_contract

    def __call__(self, name: str, *marks):
        def register(build):
            self.params.append(pytest.param(self.tool, build, id=f"{self.tool}-{name}", marks=marks))
            return build

        return register


def every_tool() -> dict[str, Cases]:
    """{tool: its `Cases`} for every tool of the registry (each declared in tests/test_cli_<tool>.py)."""
    return {tool: importlib.import_module(f"test_cli_{tool}").case for tool in TOOLS}


def declared(kind: str) -> list:
    """Every tool's declarations of one kind ("writers", "reads", "resumes", "paths"), in the registry's order: the
    tables the batteries run, generated from the registry (a new tool's declarations join them)."""
    return [item for case in every_tool().values() for item in getattr(case, kind)]


def stdout_users() -> dict[str, Stdout]:
    """{tool: its command line with a result on standard output}."""
    return {tool: case.stdout for tool, case in every_tool().items() if case.stdout is not None}


def model_classes(case: Cases, flag: str, argv: Callable[[Path, Assets, Path], list]):
    """The five broken-model-folder classes for a tool whose model folder is given by `flag`."""

    @case("model-missing")
    def _(t, a):
        return Call(argv(t, a, t / "absent"), 2, (f"{flag} not found", str(t / "absent")))

    @case("model-is-a-file")
    def _(t, a):
        return Call(argv(t, a, write(t / "model.txt", "x")), 2, (flag, str(t / "model.txt"), "is a file"))

    @case("model-truncated-safetensors")
    def _(t, a):
        folder = copy(a.model, t / "model")
        truncate(folder / "model.safetensors")
        return Call(argv(t, a, folder), 2, (str(folder / "model.safetensors"), "truncated or corrupt"))

    @case("model-invalid-config-json")
    def _(t, a):
        folder = copy(a.model, t / "model")
        write(folder / "config.json", "{not json")
        return Call(argv(t, a, folder), 2, (str(folder / "config.json") + ":1: invalid JSON",))

    @case("model-missing-tokenizer-json")
    def _(t, a):
        folder = copy(a.model, t / "model")
        (folder / "tokenizer.json").unlink()
        return Call(argv(t, a, folder), 2, (str(folder), "no tokenizer.json"))


def model_output_classes(case: Cases, flag: str, argv: Callable[[Path, Path], list]):
    """An output folder that is a file, or the model folder itself (with --overwrite), for a tool that reads a model
    folder and writes the folder `flag`: `argv(model, out)` is its command line."""

    @case("out-is-a-file")
    def _(t, a):
        out = write(t / "out", "x")
        return Call(argv(a.model, out), 2, (flag, str(out), "is a file"))

    @case("out-is-the-model-dir-overwrite")
    def _(t, a):
        folder = copy(a.model, t / "model")
        return Call([*argv(folder, folder), "--overwrite"], 2, (flag, str(folder), "is --model_dir"))


def run_case(tool: str, build, tmp_path: Path, assets: Assets, capfd, monkeypatch) -> None:
    """Build the case in `tmp_path`, run the tool, and assert the contract (see the module docstring)."""
    monkeypatch.chdir(tmp_path)  # anything written to the current folder is caught too
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    call = build(tmp_path, assets)
    for name, value in call.env.items():
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    for target, value in call.patch.items():
        monkeypatch.setattr(target, value)
    if call.interrupt:
        monkeypatch.setattr(call.interrupt, interrupted)
    if call.stdin is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(call.stdin), encoding="utf-8"))
    before = snapshot(tmp_path, assets.root)
    capfd.readouterr()
    code, warned = run_main(tool, call.argv)
    out, err = capfd.readouterr()
    assert code == call.code, (
        f"exit status {code}, expected {call.code}\nSTDOUT:\n{out[-3000:]}\nSTDERR:\n{err[-3000:]}"
    )
    if call.code != 0:
        lines = err.splitlines() + warned
        assert len(lines) == 1 and "Traceback" not in err, f"expected one stderr line, got:\n{err}{warned}"
        for fragment in (*call.expect, "interrupted") if call.code == 130 else call.expect:
            assert fragment in lines[0], f"{fragment!r} not in the error line:\n{lines[0]}"
    changed = changes(before, snapshot(tmp_path, assets.root))
    unexpected = sorted(p for p in changed if not under(p, call.may_change))
    assert not unexpected, f"changed, created or removed although the contract forbids it: {unexpected}"
    if call.check:
        call.check(out, err)
