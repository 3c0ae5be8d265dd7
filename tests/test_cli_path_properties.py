"""Property tests of the output guard, for every command that reads or writes paths: whatever the relation between an
output and an input, a command refuses it before any work, in one line naming the output's flag (or recipe key), with
exit status 2, and every file that existed before is unchanged.

The relations are generated (hypothesis), not listed, and each example checks every one for every input of the
command: the output is the input (spelled as given, relative to the current folder, with `./` and `d/..`, with a
trailing slash), a hard link to it, a symbolic link to it (absolute or relative target, or a chain of links), a folder
that contains it (its folder, any ancestor), a path inside it (any depth, also through a link to its folder), the
input given through a link whose target is the output; or the output is a device (/dev/null), a FIFO, a dangling
link, a link loop, or lies below one of them; each with and without --overwrite. The folders the inputs lie in have
generated names (spaces, dots, non-ASCII letters); a training recipe lies in its own folder as `recipe.yaml`, as a
run folder keeps it. Inputs are copies of the shared assets in a temporary folder of each example, so a command that
wrongly writes cannot spoil the next example. The input side too: an input replaced by a link to /dev/null, a
dangling link or a link loop is named in one line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_contract import PathCase, changes, every_tool, run_main, snapshot
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Each example checks every relation of a family; a failing one is reported as found (not shrunk: each shrinking step
# would run every relation again, a training run among them).
PROPERTY_SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    print_blob=True,
    phases=(Phase.explicit, Phase.generate),
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ---------------------------------------------------------------------------------------------------------------------
# The commands: each tool's test file declares its command lines with paths (`Cases.paths`)
# ---------------------------------------------------------------------------------------------------------------------


COMMANDS = [path_case for case in every_tool().values() for path_case in case.paths]  # each tool's test file
WRITERS = [c for c in COMMANDS if c.output is not None]


# ---------------------------------------------------------------------------------------------------------------------
# The relations, generated
# ---------------------------------------------------------------------------------------------------------------------

OVERLAPS = (
    "is",
    "hard-link",
    "symlink",
    "symlink-chain",
    "parent",
    "ancestor",
    "symlink-to-ancestor",
    "inside",
    "inside-through-symlink",
    "input-given-through-symlink",
)  # the output overlaps an input
NOT_WRITABLE = (
    "dev-null",
    "fifo",
    "dangling-symlink",
    "symlink-loop",
    "self-loop",
    "below-dangling-symlink",
    "below-dev-null",
    "below-fifo",
)  # the output is no file or folder a tool may replace
SPELLINGS = ("absolute", "relative", "dotted", "trailing-slash")
NAME = st.text(st.sampled_from("abcxyzÄé019 _-.+"), min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..") and not s.startswith("-")
)


@dataclass(frozen=True)
class Example:
    """One generated example; a test checks it with every relation of a family, for every input of the command
    (`role` and `relation` set in turn)."""

    layout: tuple[str, ...]  # generated folder names the inputs lie in
    role: str  # the input the output relates to
    name: str  # a generated name (links, paths inside)
    depth: int  # which ancestor, how deep inside
    relative_link: bool  # a link's target relative to its folder
    spelling: str  # how the output path is written on the command line
    overwrite: bool
    relation: str = ""


@st.composite
def examples(draw, command: PathCase) -> Example:
    return Example(
        tuple(draw(st.lists(NAME, min_size=1, max_size=2))),
        draw(st.sampled_from(command.roles)),
        draw(NAME),
        draw(st.integers(0, 3)),
        draw(st.booleans()),
        draw(st.sampled_from(SPELLINGS)),
        draw(st.booleans()),
    )


def each_relation(command: PathCase, e: Example, family: tuple[str, ...], every_input: bool = True) -> list[Example]:
    """`e` for every input of the command (or its own), with every relation of `family` that applies to the input: a
    folder has no hard link, and an input the command line does not name itself (a corpus file found in --data_dir)
    cannot be given through a link."""
    cases = []
    for role in command.roles if every_input else [e.role]:
        skip = {"hard-link"} if role in FOLDER_ROLES else set()
        skip |= {"input-given-through-symlink"} if role in command.derived else set()
        cases += [dataclasses.replace(e, role=role, relation=r) for r in family if r not in skip]
    return cases


FOLDER_ROLES = ("--model", "--model_dir", "--tokenizer", "tokenizer_path", "checkpoint-2", "checkpoint-4")


def link(at: Path, target: Path, relative: bool) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, at.parent) if relative else target, at)
    return at


def ancestors(x: Path, work: Path) -> list[Path]:
    """The folders from `x`'s folder up to the example's folder (never above it)."""
    return [p for p in x.parents if p == work or work in p.parents]


def overlapping_output(work: Path, x: Path, e: Example, inputs: dict[str, Path]) -> Path:
    """An output path that overlaps input `x` as `e.relation` says (links are created)."""
    links, rel = work / "links", e.relative_link
    if e.relation == "is":
        return x
    if e.relation == "hard-link":
        return hard_link(work, x, e)
    if e.relation == "symlink":
        return link(links / e.name, x, rel)
    if e.relation == "symlink-chain":
        return link(work / "chain" / e.name, link(links / e.name, x, rel), not rel)
    if e.relation == "parent":
        return x.parent
    if e.relation == "ancestor":
        return ancestors(x, work)[e.depth % len(ancestors(x, work))]
    if e.relation == "symlink-to-ancestor":
        return link(links / e.name, ancestors(x, work)[e.depth % len(ancestors(x, work))], rel)
    if e.relation == "inside":
        return x.joinpath(*[e.name] * (1 + e.depth % 2))
    if e.relation == "inside-through-symlink":
        return link(links / e.name, x, rel) / e.name if x.is_dir() else link(links / e.name, x.parent, rel) / x.name
    assert e.relation == "input-given-through-symlink"
    inputs[e.role] = link(links / e.name, x, rel)  # the command line names the link; the output is its target
    return x


def hard_link(work: Path, x: Path, e: Example) -> Path:
    """A second name of the input file `x`. (A hard link to a file inside an input folder is no input: an output file
    written there replaces that name by rename, and the folder's file stays as it was.)"""
    (work / "links").mkdir(exist_ok=True)
    os.link(x, work / "links" / e.name)
    return work / "links" / e.name


def unwritable_output(work: Path, e: Example) -> Path:
    """An output that no tool may replace: a device, a FIFO, a dangling link, a link loop, or a path below one."""
    links, rel = work / "links", e.relative_link
    if e.relation == "dev-null":
        return Path(os.devnull)
    if e.relation in ("fifo", "below-fifo"):
        links.mkdir(exist_ok=True)
        os.mkfifo(links / e.name)
        return links / e.name / (e.name if e.relation == "below-fifo" else "")
    if e.relation in ("dangling-symlink", "below-dangling-symlink"):
        dangling = link(links / e.name, work / "missing" / e.name, rel)
        return dangling / e.name if e.relation == "below-dangling-symlink" else dangling
    if e.relation == "symlink-loop":
        link(links / f"{e.name}~", links / e.name, rel)
        return link(links / e.name, links / f"{e.name}~", rel)
    if e.relation == "self-loop":
        return link(links / e.name, links / e.name, rel)
    assert e.relation == "below-dev-null"
    return Path(os.devnull) / e.name


def spelled(path: Path, work: Path, e: Example, is_dir: bool) -> str:
    """`path` as the command line writes it (the current folder is `work`)."""
    text = str(path)
    if e.spelling == "relative":
        return os.path.relpath(text, work)
    if e.spelling == "dotted" and work in path.parents:
        (work / "d").mkdir(exist_ok=True)
        return str(work / "." / "d" / ".." / path.relative_to(work))
    if e.spelling == "trailing-slash" and (is_dir or e.relation.startswith("below")):
        return text.rstrip(os.sep) + os.sep
    return text


# ---------------------------------------------------------------------------------------------------------------------
# The property
# ---------------------------------------------------------------------------------------------------------------------


def tree_state(root: Path) -> dict[str, str]:
    """{path: sha256, "<dir>", "-> target" for a link, or the kind of a special file} of everything under `root`,
    links not followed (the harness's `snapshot` would read a FIFO or follow a loop)."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder, name)
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode):
                state[str(p)] = "-> " + os.readlink(p)
            elif stat.S_ISREG(mode):
                state[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                state[str(p)] = "<dir>" if stat.S_ISDIR(mode) else f"<mode {stat.S_IFMT(mode):o}>"
    return state


@contextmanager
def example_folder(tmp_path: Path):
    """A fresh folder for one generated example (function-scoped fixtures are not reset between examples), which is
    also the current folder meanwhile."""
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(dir=tmp_path) as name:
        os.chdir(name)
        try:
            yield Path(name)
        finally:
            os.chdir(previous)


def assert_refused(
    command: PathCase,
    argv: list,
    e: Example,
    names: tuple[str, ...],
    roots: tuple[Path, ...],
    capfd,
    forbid: tuple[str, ...] = (),
) -> None:
    """The contract for a refused command line: exit status 2, one stderr line holding one of `names`, no traceback,
    nothing under `roots` created, changed or removed."""
    before, assets_before = tree_state(roots[0]), snapshot(*roots[1:])
    capfd.readouterr()
    try:
        code, warned = run_main(command.tool, argv)
    except Exception as error:  # in a real process: a traceback
        _, err = capfd.readouterr()
        raise AssertionError(
            f"{e}\n{command.tool} {' '.join(map(str, argv))}\nraised {error!r} (in a process: a "
            f"traceback)\nSTDERR:\n{err[-2000:]}"
        ) from error
    _, err = capfd.readouterr()
    shown = f"{e}\n{command.tool} {' '.join(map(str, argv))}\nexit status {code}\nSTDERR:\n{err[-3000:]}{warned}"
    assert code == 2, shown
    lines = err.splitlines() + warned
    assert len(lines) == 1 and "Traceback" not in err, shown
    assert any(name in lines[0] for name in names), f"none of {names} named in the line\n{shown}"
    for phrase in forbid:
        assert phrase not in lines[0], f"{phrase!r} must not be suggested here\n{shown}"
    changed = sorted(changes(before, tree_state(roots[0])) | changes(assets_before, snapshot(*roots[1:])))
    assert not changed, f"changed, created or removed: {changed}\n{shown}"


def test_the_roles_are_the_inputs(assets, tmp_path):
    for command in COMMANDS:
        inputs = command.inputs(tmp_path / command.id, assets)
        assert sorted(inputs) == sorted(command.roles), command.id
        assert all(inputs[role].is_dir() == (role in FOLDER_ROLES) for role in inputs), command.id


@pytest.mark.parametrize("command", WRITERS, ids=lambda c: c.id)
@settings(PROPERTY_SETTINGS, max_examples=4)
@given(example=st.data())
def test_an_output_that_overlaps_an_input_is_refused(command, example, assets, tmp_path, capfd):
    """The output is, holds or lies inside an input (however spelled or linked): refused, naming the output, without
    suggesting --overwrite (which would destroy the input); nothing changes."""
    for e in each_relation(command, example.draw(examples(command)), OVERLAPS):
        with example_folder(tmp_path) as work:
            inputs = command.inputs(work.joinpath(*e.layout), assets)
            output = overlapping_output(work, inputs[e.role], e, inputs)
            argv = command.argv(inputs, spelled(output, work, e, output.is_dir()), e.overwrite)
            assert_refused(
                command, argv, e, (command.output,), (work, assets.root), capfd, forbid=("--overwrite to replace",)
            )


@pytest.mark.parametrize("command", WRITERS, ids=lambda c: c.id)
@PROPERTY_SETTINGS
@given(example=st.data())
def test_an_output_that_no_tool_may_replace_is_refused(command, example, assets, tmp_path, capfd):
    """The output is /dev/null, a FIFO, a dangling link, a link loop, or lies below one: refused, naming the output;
    nothing changes (a FIFO is not opened: the command would hang)."""
    for e in each_relation(command, example.draw(examples(command)), NOT_WRITABLE, every_input=False):
        with example_folder(tmp_path) as work:
            inputs = command.inputs(work.joinpath(*e.layout), assets)
            output = unwritable_output(work, e)
            argv = command.argv(inputs, spelled(output, work, e, False), e.overwrite)
            assert_refused(command, argv, e, (command.output,), (work, assets.root), capfd)


INPUT_REPLACEMENTS = ("link-to-dev-null", "dangling-symlink", "symlink-loop")


def replace_input(x: Path, work: Path, e: Example) -> None:
    """Input `x` replaced, at its own path, by a link to /dev/null, a dangling link or a link loop."""
    shutil.rmtree(x) if x.is_dir() else x.unlink()
    if e.relation == "link-to-dev-null":
        link(x, Path(os.devnull), False)
    elif e.relation == "dangling-symlink":
        link(x, work / "missing", e.relative_link)
    else:
        link(x.with_name(f"{x.name}~"), x, e.relative_link)
        link(x, x.with_name(f"{x.name}~"), e.relative_link)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.id)
@settings(PROPERTY_SETTINGS, max_examples=4)
@given(example=st.data())
def test_an_input_that_is_no_file_or_folder_is_named(command, example, assets, tmp_path, capfd):
    """An input replaced by a dangling link or a link loop: refused in one line naming the input (its flag or its
    path); nothing changes. A file input replaced by a link to /dev/null reads as an empty file: the tool answers
    exactly as it does to an empty regular file there (a folder input is still refused)."""
    for e in each_relation(command, example.draw(examples(command)), INPUT_REPLACEMENTS):
        with example_folder(tmp_path) as work:
            inputs = command.inputs(work.joinpath(*e.layout), assets)
            if e.relation == "link-to-dev-null" and e.role not in FOLDER_ROLES:
                assert_dev_null_reads_as_empty(command, inputs, e, work, capfd)
                continue
            replace_input(inputs[e.role], work, e)
            argv = command.argv(inputs, str(work / "fresh-output"), e.overwrite)
            names = (e.role.split(" ")[0], str(inputs[e.role]), str(inputs[e.role].parent))
            assert_refused(command, argv, e, names, (work, assets.root), capfd)


def assert_dev_null_reads_as_empty(command: PathCase, inputs: dict[str, Path], e: Example, work: Path, capfd) -> None:
    """The same command line with the input an empty regular file, then a link to /dev/null: the same exit status,
    and where refused, one line (no traceback) either way."""
    outcomes = []
    for attempt in ("empty-file", "dev-null"):
        x = inputs[e.role]
        x.unlink()
        if attempt == "empty-file":
            x.write_bytes(b"")
        else:
            link(x, Path(os.devnull), False)
        argv = command.argv(inputs, str(work / f"output-{attempt}"), e.overwrite)
        capfd.readouterr()
        code, warned = run_main(command.tool, argv)
        _, err = capfd.readouterr()
        lines = err.splitlines() + warned
        shown = f"{e}\n{command.tool} {' '.join(map(str, argv))}\nexit status {code}\nSTDERR:\n{err[-3000:]}"
        assert "Traceback" not in err and (code == 0 or len(lines) == 1), shown
        outcomes.append(code)
    assert outcomes[0] == outcomes[1], f"an empty file gives exit {outcomes[0]}, /dev/null {outcomes[1]}"
