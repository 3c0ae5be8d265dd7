"""The process's surroundings, which the error boundary (vaswani_hf.cli.contract.run_cli, vaswani_hf.cli.surroundings)
owns before any command runs, for every command:

- malformed launcher variables (RANK=abc, WORLD_SIZE=0, LOCAL_RANK=-1x, MASTER_PORT=99999, a rank not below its
  count): one line, exit status 2, before any work, nothing written;
- a deleted working folder: a command naming absolute paths runs; one naming a relative path is one line, exit
  status 2, before any work, nothing written;
- standard error closed: a refusal writes nothing anywhere (never onto standard output); a closed standard input is
  refused in one line by the commands that read it (exit status 2), a closed standard output by the commands that
  write to it (exit status 1, as a closed pipe);
- SIGTERM and SIGHUP while writing interrupt as Ctrl-C does: exit status 143 and 129, one line, no partial output.

The users of standard input and output and the writers are generated from the registry: each tool's declared text
inputs (`Cases.reads`), result on standard output (`Cases.stdout`) and writers (`Cases.writers`).

In real processes (slow): the closed descriptors themselves, the deleted folder (torch's import aborts there), RANK=abc,
transformers' LOAD REPORT table (it never precedes the one line), and a signal during tokenizer training (no staged
folder left beside --out_dir).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_contract import (
    GERMAN,
    LINES,
    TOOLS,
    TRANSLATE_OPTIONS,
    changes,
    declared,
    every_tool,
    run_main,
    snapshot,
    stdout_users,
)
from test_cli_os_conditions import WRITER_CASES, assert_one_error_line, console_script, partial_output

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------------------------------
# The process's surroundings, for every command
# ---------------------------------------------------------------------------------------------------------------------

# A command line each tool would run to completion (its test file's `Cases.run`): what refuses it below is the
# surroundings.
RUNS = {tool: case.run for tool, case in every_tool().items()}
BAD_LAUNCHES = {  # the launcher's variables -> what the one line names
    "RANK=abc": ({"RANK": "abc"}, ("RANK='abc'", "whole number >= 0")),
    "RANK=empty": ({"RANK": ""}, ("RANK=''",)),
    "WORLD_SIZE=0": ({"WORLD_SIZE": "0"}, ("WORLD_SIZE='0'", ">= 1")),
    "LOCAL_RANK=-1x": ({"LOCAL_RANK": "-1x"}, ("LOCAL_RANK='-1x'",)),
    "LOCAL_WORLD_SIZE=two": ({"LOCAL_WORLD_SIZE": "two"}, ("LOCAL_WORLD_SIZE='two'",)),
    "MASTER_PORT=99999": ({"MASTER_PORT": "99999"}, ("MASTER_PORT='99999'", "from 1 to 65535")),
    "RANK=2-of-2": ({"RANK": "2", "WORLD_SIZE": "2"}, ("RANK=2 is not below WORLD_SIZE=2",)),
}


def refused_before_any_work(
    tool: str, argv: list, roots: list[Path], capfd, code: int, *fragments: str, output: bool = False
) -> str:
    """Run the tool; assert the exit status, one error line holding `fragments`, and nothing changed under `roots`;
    and, unless `output` (a command interrupted while writing may have printed its results and logged its progress),
    nothing on standard output and nothing else on standard error."""
    before = snapshot(*roots)
    capfd.readouterr()
    status, warned = run_main(tool, argv)
    out, err = capfd.readouterr()
    line = assert_one_error_line(
        err + "".join(f"{w}\n" for w in warned), status, code, *fragments, shown=f"{tool} {' '.join(map(str, argv))}"
    )
    assert output or (len(err.splitlines()) == 1 and out == ""), (out, err)
    assert not changes(before, snapshot(*roots)), sorted(changes(before, snapshot(*roots)))
    return line


@pytest.mark.parametrize("launch", list(BAD_LAUNCHES))
@pytest.mark.parametrize("tool", TOOLS)
def test_malformed_launcher_variables_are_one_line(tool, launch, assets, tmp_path, capfd, monkeypatch):
    environment, fragments = BAD_LAUNCHES[launch]
    monkeypatch.chdir(tmp_path)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    refused_before_any_work(
        tool, RUNS[tool](assets, tmp_path), [assets.root, tmp_path], capfd, 2, *fragments, "environment variable"
    )


def test_well_formed_launcher_variables_pass(assets, tmp_path, monkeypatch, capfd):
    for name, value in (
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("LOCAL_RANK", "0"),
        ("LOCAL_WORLD_SIZE", "1"),
        ("MASTER_PORT", "29500"),
    ):
        monkeypatch.setenv(name, value)
    assert run_main("evaluate", RUNS["evaluate"](assets, tmp_path))[0] == 0
    assert json.loads((tmp_path / "scores.json").read_text())["scores"]


def deleted_working_folder(tmp_path: Path, monkeypatch) -> Path:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)  # and back at the end of the test (the boundary leaves the deleted folder for "/")
    gone.rmdir()
    return gone


@pytest.mark.parametrize("tool", TOOLS)
def test_a_deleted_working_folder_is_no_obstacle_to_absolute_paths(tool, assets, tmp_path, capfd, monkeypatch):
    """A command that names only absolute paths needs no working folder: it runs as anywhere else (as `cat` would)."""
    deleted_working_folder(tmp_path, monkeypatch)
    before = snapshot(assets.root)
    status, _ = run_main(tool, RUNS[tool](assets, tmp_path))
    assert status == 0, capfd.readouterr().err
    assert not changes(before, snapshot(assets.root))


@pytest.mark.parametrize("tool", TOOLS)
def test_a_relative_path_in_a_deleted_working_folder_is_one_line(tool, assets, tmp_path, capfd, monkeypatch):
    """The same command with one of its paths relative (it names nothing: a deleted folder holds nothing and takes
    no new entry, and the command works from "/" instead): one line naming the path, exit status 2, nothing
    written."""
    gone = deleted_working_folder(tmp_path, monkeypatch)
    argv = [str(a) for a in RUNS[tool](assets, tmp_path)]
    paths = [i for root in (tmp_path, assets.root) for i, a in enumerate(argv) if Path(a).is_relative_to(root)]
    where = paths[0]  # an output where the command writes one (in its folder tmp_path), else an input
    argv[where] = "relative-path-of-the-test"
    refused_before_any_work(
        tool,
        argv,
        [assets.root, tmp_path],
        capfd,
        2,
        "relative-path-of-the-test is relative to the working folder, but the working folder "
        f"{gone} was deleted; give an absolute path",
    )
    assert not Path("/relative-path-of-the-test").exists()


def test_a_relative_input_checked_first_in_a_deleted_working_folder_is_one_line(assets, tmp_path, capfd, monkeypatch):
    """translate checks its input file before the relations between paths: a relative one is refused as relative,
    not as absent."""
    gone = deleted_working_folder(tmp_path, monkeypatch)
    argv = ["input.en", "--model", assets.model, *TRANSLATE_OPTIONS, "--output", tmp_path / "out.txt"]
    refused_before_any_work(
        "translate",
        argv,
        [assets.root, tmp_path],
        capfd,
        2,
        f"input.en is relative to the working folder, but the working folder {gone} was deleted",
    )


@pytest.mark.parametrize("tool", TOOLS)
def test_a_refusal_with_standard_error_closed_writes_nothing(tool, assets, tmp_path, capfd, monkeypatch):
    """With `2>&-` (sys.stderr is None) the error line is dropped: the exit status tells. It never goes to standard
    output (`print(file=None)` would write it there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stderr", None)
    capfd.readouterr()
    status, _ = run_main(tool, [*RUNS[tool](assets, tmp_path), "--no-such-flag"])
    out, err = capfd.readouterr()
    assert (status, out, err) == (2, "", "") and sys.stderr is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# The commands reading standard input ("-": each declared text input that may be anywhere, `Cases.reads`) or writing
# their result to standard output (`Cases.stdout`), from every tool's test file.
CLOSED_STREAM_USERS = {
    **{("stdin", r.id): (r.tool, lambda a, t, r=r: r.argv(a, t, "-")) for r in declared("reads") if r.at is None},
    **{("stdout", tool): (tool, use.argv) for tool, use in stdout_users().items()},
}


@pytest.mark.parametrize("stream, user", list(CLOSED_STREAM_USERS))
def test_a_closed_standard_stream_is_refused_by_its_users(stream, user, assets, tmp_path, capfd, monkeypatch):
    """A closed standard input is bad input (2); a closed standard output is a failure of the run (1)."""
    tool, argv = CLOSED_STREAM_USERS[stream, user]
    monkeypatch.chdir(tmp_path)
    argv = argv(assets, tmp_path)  # its other inputs written first: what the command must leave unchanged
    monkeypatch.setattr(sys, stream, None)
    refused_before_any_work(
        tool,
        argv,
        [assets.root, tmp_path],
        capfd,
        2 if stream == "stdin" else 1,
        f"standard {'input' if stream == 'stdin' else 'output'} is closed",
    )
    assert getattr(sys, stream) is None


def test_a_closed_standard_input_does_not_matter_to_a_command_reading_files(assets, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)
    assert run_main("evaluate", RUNS["evaluate"](assets, tmp_path))[0] == 0


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("writer", WRITER_CASES)
def test_sigterm_while_writing_interrupts_as_ctrl_c(writer, name, assets, tmp_path, capfd, monkeypatch):
    """Every writer (`Cases.writers`): the signal arrives at its last step before the output appears
    (`Writer.interrupt`): exit status 128 + the signal's number, one line, no partial output (a training run: its
    complete files only), and the previous handler back afterwards."""
    number = getattr(signal, name)
    handler_before = signal.getsignal(number)
    module, attribute = writer.interrupt.rsplit(".", 1)
    step = getattr(importlib.import_module(module), attribute)

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), number)
        return step(*args, **kwargs)

    monkeypatch.chdir(tmp_path)
    argv = writer.argv(assets, tmp_path, tmp_path)
    monkeypatch.setattr(writer.interrupt, signalled)
    before = snapshot(assets.root, tmp_path)
    capfd.readouterr()
    status, warned = run_main(writer.tool, argv)
    _, err = capfd.readouterr()
    shown = f"{writer.id} {' '.join(map(str, argv))}"
    assert_one_error_line(
        err + "".join(f"{w}\n" for w in warned), status, 128 + number, f"interrupted by {name}", shown=shown
    )
    assert not partial_output(writer, tmp_path, changes(before, snapshot(assets.root, tmp_path)))
    assert signal.getsignal(number) is handler_before


# --- in real processes --------------------------------------------------------------------------------------------


def run_console(
    tool: str, argv: list, cwd: Path, shell: str = "", env: dict | None = None, stdin=subprocess.DEVNULL
) -> tuple[int, str, str]:
    """The console script in a fresh process; `shell`: redirections applied to it (`<&-`, `>&-`, `2>&-`)."""
    command = ["sh", "-c", f'exec "$@" {shell}', "sh", console_script(tool), *map(str, argv)]
    environment = {k: v for k, v in os.environ.items() if k != "VASWANI_DEBUG"}
    result = subprocess.run(
        command, cwd=cwd, env={**environment, **(env or {})}, capture_output=True, stdin=stdin, timeout=300
    )
    return result.returncode, result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace")


@pytest.mark.slow
def test_closed_descriptors_in_real_processes(assets, tmp_path):
    code, out, err = run_console("translate", ["--model", assets.model, *TRANSLATE_OPTIONS], tmp_path, "<&-")
    assert_one_error_line(err, code, 2, "standard input is closed")
    code, out, err = run_console("evaluate", RUNS["evaluate"](assets, tmp_path)[:4], tmp_path, ">&-")
    assert_one_error_line(err, code, 1, "standard output is closed")
    code, out, err = run_console("translate", [tmp_path / "absent.txt", "--model", assets.model], tmp_path, "2>&-")
    assert (code, out) == (2, "")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_surroundings_in_a_real_process(assets, tmp_path):
    """In a deleted working folder (torch's import aborts the process there) a command naming absolute paths runs,
    one naming a relative path is one line, exit status 2; RANK=abc is one line, exit status 2."""
    gone = tmp_path / "gone"
    hypotheses = tmp_path / "hypotheses.txt"
    hypotheses.write_text("a b c\n", encoding="utf-8")
    for references, status in ((hypotheses, 0), ("references.txt", 2)):
        gone.mkdir()
        process = subprocess.Popen(
            [
                "sh",
                "-c",
                'cd "$1" && rmdir "$1" && exec "$2" --hypotheses "$3" --references "$4" --out "$5"',
                "sh",
                str(gone),
                console_script("evaluate"),
                str(hypotheses),
                str(references),
                str(tmp_path / "scores.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        out, err = process.communicate(timeout=300)
        if status == 0:
            assert process.returncode == 0, err.decode()
            assert json.loads((tmp_path / "scores.json").read_text())["scores"]
        else:
            assert_one_error_line(
                err.decode(), process.returncode, 2, f"the working folder {gone} was deleted; give an absolute path"
            )
            assert len(err.decode().splitlines()) == 1 and out == b""
    code, out, err = run_console("translate", RUNS["translate"](assets, tmp_path), tmp_path, env={"RANK": "abc"})
    assert_one_error_line(err, code, 2, "RANK='abc'")
    assert len(err.splitlines()) == 1 and not (tmp_path / "out.txt").exists()


@pytest.mark.slow
def test_a_libraries_load_report_never_precedes_the_one_line(assets, tmp_path):
    """transformers prints a LOAD REPORT table (7-35 lines) when weights miss a layer the config names; the
    refusal is the only line."""
    folder = tmp_path / "model"
    shutil.copytree(assets.model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["num_encoder_layers"] += 1
    (folder / "config.json").write_text(json.dumps(config))
    code, out, err = run_console("translate", [assets.plain, "--model", folder, *TRANSLATE_OPTIONS], tmp_path)
    assert_one_error_line(err, code, 2, "missing from the weights")
    assert len(err.splitlines()) == 1 and "LOAD REPORT" not in err, err


def open_when_read(fifo: Path, process: subprocess.Popen):
    """The FIFO's writing end, once `process` opened it for reading (None if it ended first)."""
    deadline = time.monotonic() + 300  # a wait for the process to start, not a timed assertion
    while process.poll() is None and time.monotonic() < deadline:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return os.fdopen(fd, "w", encoding="utf-8")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_signal_while_training_a_tokenizer_leaves_no_staged_folder(name, tmp_path):
    """The tokenizer learns from a FIFO, which the tokenizers library reads from its own threads: the signal is sent
    once the FIFO is read (its staged folder exists beside --out_dir) and before the text ends; then the text comes."""
    fifo, parent = tmp_path / "corpus", tmp_path / "out"
    os.mkfifo(fifo)
    parent.mkdir()
    process = subprocess.Popen(
        [console_script("train_tokenizer"), "--files", fifo, "--vocab_size", "300", "--out_dir", parent / "tok"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    writer = open_when_read(fifo, process)
    assert writer is not None, process.communicate(timeout=60)
    names = sorted(p.name for p in parent.iterdir())  # staged beside --out_dir, which the run claimed (and locked)
    assert len(names) == 2 and names[0].startswith(".tok.") and names[1] == "tok", names
    process.send_signal(getattr(signal, name))
    try:
        with writer:
            writer.writelines(f"{LINES[i % 3]} {GERMAN[i % 3]}\n" for i in range(20_000))
    except BrokenPipeError:
        pass
    out, err = process.communicate(timeout=300)
    assert_one_error_line(err.decode(), process.returncode, 128 + getattr(signal, name), f"interrupted by {name}")
    assert list(parent.iterdir()) == [] and out == b""
