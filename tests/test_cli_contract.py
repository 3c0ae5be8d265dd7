"""vaswani_hf.cli.contract: the one error boundary of every tool (one stderr line, exit 2 for bad input, 1 for a
failed run, 130 for Ctrl-C; the operating system's conditions mapped to one line), its parser and `declare_paths`."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from vaswani_hf.cli.contract import ArgumentParser, declare_paths, run_cli
from vaswani_hf.errors import RunFailure, UsageError

# ---------------------------------------------------------------------------------------------------------------------
# The command-line contract
# ---------------------------------------------------------------------------------------------------------------------


def _tool(error: BaseException | None = None, code=None):
    def main(argv):
        parser = ArgumentParser(prog="tool")  # has --debug, as every tool's parser
        parser.add_argument("--n", type=int, default=1)
        parser.parse_args(argv)
        if error is not None:
            raise error
        return code

    return main


def test_run_cli_exit_codes_and_one_line(capsys, monkeypatch):
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    assert run_cli(_tool(), [], prog="tool") == 0
    assert run_cli(_tool(code=3), [], prog="tool") == 3
    assert capsys.readouterr().err == ""

    assert run_cli(_tool(UsageError("bad.txt:3: not valid UTF-8\n  re-encode it")), [], prog="tool") == 2
    err = capsys.readouterr().err
    assert err == "tool: error: bad.txt:3: not valid UTF-8 re-encode it\n"  # one line, no traceback

    assert run_cli(_tool(RunFailure("upload refused")), [], prog="tool") == 1
    assert capsys.readouterr().err == "tool: error: upload refused\n"

    assert run_cli(_tool(KeyboardInterrupt()), [], prog="tool") == 130
    assert capsys.readouterr().err == "tool: interrupted\n"

    assert run_cli(_tool(), ["--n", "x"], prog="tool") == 2  # argparse errors follow the same contract
    err = capsys.readouterr().err
    assert err.startswith("tool: error: argument --n: invalid int value: 'x'") and err.count("\n") == 1
    assert "usage:" not in err

    with pytest.raises(ZeroDivisionError):  # an unexpected error keeps its traceback
        run_cli(_tool(ZeroDivisionError("bug")), [], prog="tool")


def test_run_cli_debug_reraises(monkeypatch):
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    with pytest.raises(UsageError, match="bad"):
        run_cli(_tool(UsageError("bad")), ["--debug"], prog="tool")
    with pytest.raises(KeyboardInterrupt):
        run_cli(_tool(KeyboardInterrupt()), ["--debug"], prog="tool")
    monkeypatch.setenv("VASWANI_DEBUG", "1")
    with pytest.raises(RunFailure, match="net"):
        run_cli(_tool(RunFailure("net")), [], prog="tool")


def test_usage_error_is_a_value_error():
    assert issubclass(UsageError, ValueError) and UsageError.exit_code == 2
    assert issubclass(RunFailure, RuntimeError) and RunFailure.exit_code == 1


@pytest.mark.parametrize(
    "error, code, line",
    [
        (OSError(errno.ENOSPC, "No space left on device"), 1, "--output out.de: no space left on device"),
        (OSError(errno.EACCES, "Permission denied", "/x/secret"), 2, "/x/secret: permission denied"),
        (OSError(errno.ELOOP, "Too many levels", "/x/loop"), 2, "/x/loop: too many levels of symbolic links"),
        (OSError(errno.EROFS, "Read-only file system", "/ro/f"), 2, "/ro/f: read-only file system"),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 1, "standard output was closed"),
        (
            RuntimeError(
                "[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file data/0: "
                "file write failed"
            ),
            1,
            "--output out.de: writing failed, no space left on device",
        ),
        (Exception("No space left on device (os error 28)"), 1, "--output out.de: writing failed"),
        (MemoryError(), 1, "out of memory (the memory limit, ulimit -v"),
        (
            OSError(errno.EMFILE, "Too many open files", "/x/f"),
            1,
            "too many open files (the limit on open descriptors",
        ),
        (
            OSError(errno.EFBIG, "File too large", "/x/f"),
            1,
            "/x/f: file too large for the file-size limit (ulimit -f)",
        ),
        (
            Exception("Error while serializing: I/O error: File too large (os error 27)"),
            1,
            "--output out.de: file too large for the file-size limit (ulimit -f)",
        ),
    ],
)
def test_operating_system_conditions_are_one_line(capsys, monkeypatch, error, code, line):
    """What the system reports for a full disk, a refused permission, a link loop, a read-only file system, a closed
    output pipe or an exhausted limit (memory, descriptors, file size: Python ignores SIGXFSZ) is one line naming the file (or the declared outputs, when the system does not name it), never
    a traceback; with --debug the error propagates."""
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)

    def main(argv):
        declare_paths(inputs={"input": "in.en"}, outputs={"--output": "out.de"})
        raise error

    assert run_cli(main, [], prog="tool") == code
    err = capsys.readouterr().err
    assert err.startswith(f"tool: error: {line}") and err.count("\n") == 1, err
    with pytest.raises(type(error)):
        run_cli(main, ["--debug"], prog="tool")


def test_an_unexpected_os_error_keeps_its_traceback():
    def main(argv):
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError):
        run_cli(main, [], prog="tool")


def test_declare_paths_refuses_an_output_over_an_input(tmp_path):
    (tmp_path / "in.en").write_text("a\n")
    with pytest.raises(UsageError, match=r"--output .*in\.en is input .*in\.en"):
        declare_paths(inputs={"input": tmp_path / "in.en"}, outputs={"--output": tmp_path / "in.en"})


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    """A real full file system (a 64 KiB tmpfs): the atomic writer's temporary file is removed and the error is one
    line naming the output."""
    from vaswani_hf import io

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        monkeypatch.delenv("VASWANI_DEBUG", raising=False)

        def main(argv):
            declare_paths(inputs={}, outputs={"--output": disk / "out.txt"})
            io.write_lines(disk / "out.txt", ["x" * 1000] * 1000)

        assert run_cli(main, [], prog="tool") == 1
        err = capsys.readouterr().err
        assert err.startswith("tool: error: ") and "no space left on device" in err and err.count("\n") == 1
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ---------------------------------------------------------------------------------------------------------------------
# Refusals declared outside vaswani_hf.errors; the surroundings; libraries that speak first
# ---------------------------------------------------------------------------------------------------------------------


def _declared(module: str, code):
    """An exception class defined in `module` whose class attribute `exit_code` is `code`."""
    return type("SettingRefused", (ValueError,), {"exit_code": code, "__module__": module})


@pytest.mark.parametrize(
    "module, code, expected",
    [
        ("vaswani_hf.configuration_vaswani", 2, 2),  # a Hub file's refusal, which cannot import vaswani_hf.errors
        ("transformers_modules.org.repo.generation_vaswani", 2, 2),  # the same file loaded as remote code
        ("vaswani_hf.export.marian", 1, 1),
        ("click.exceptions", 2, None),  # another library's exit_code is not our declaration
        ("vaswani_hf.configuration_vaswani", 3, None),  # only 1 and 2 are refusals
        ("vaswani_hf.configuration_vaswani", "2", None),
    ],
)
def test_refusals_are_declared_by_exit_code(module, code, expected, capsys, monkeypatch):
    from vaswani_hf.errors import refusal_exit_code

    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    error = _declared(module, code)("num_beams: 0 is not >= 1; give a positive beam size")
    assert refusal_exit_code(error) == expected
    assert refusal_exit_code(type("Sub", (type(error),), {})("x")) == expected  # a subclass inherits it
    if expected is None:
        with pytest.raises(type(error)):
            run_cli(_tool(error), [], prog="tool")
    else:
        assert run_cli(_tool(error), [], prog="tool") == expected
        assert capsys.readouterr().err == "tool: error: num_beams: 0 is not >= 1; give a positive beam size\n"


def test_plain_value_and_type_errors_stay_bugs():
    from vaswani_hf.errors import refusal_exit_code

    assert refusal_exit_code(ValueError("x")) is None and refusal_exit_code(TypeError("x")) is None
    with pytest.raises(ValueError):
        run_cli(_tool(ValueError("bug")), [], prog="tool")


@pytest.mark.parametrize(
    "environment, fragment",
    [
        ({"RANK": "abc"}, "RANK='abc'"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
        ({"LOCAL_RANK": "-1x"}, "LOCAL_RANK"),
        ({"MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
        ({"MASTER_PORT": "0"}, "MASTER_PORT"),
        ({"RANK": " 1 ", "WORLD_SIZE": "1"}, "RANK=1 is not below WORLD_SIZE=1"),
        ({"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"),
    ],
)
def test_malformed_launcher_variables(environment, fragment):
    from vaswani_hf.cli.surroundings import check_distributed_environment

    with pytest.raises(UsageError, match="environment variable") as refused:
        check_distributed_environment(environment)
    assert fragment in str(refused.value)


def test_well_formed_launcher_variables():
    from vaswani_hf.cli.surroundings import check_distributed_environment

    check_distributed_environment({})
    check_distributed_environment(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_PORT": "29500",
            "NODE_RANK": "1",
            "MASTER_ADDR": "10.0.0.1",
        }
    )


def test_a_malformed_rank_is_reported_by_every_process(capsys, monkeypatch):
    """The reporter says rank 0 alone speaks; a rank it cannot trust (RANK=abc, or one beyond WORLD_SIZE) does not
    silence the line."""
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    for environment in ({"RANK": "abc"}, {"RANK": "5", "WORLD_SIZE": "2"}):
        with monkeypatch.context() as m:
            for name, value in environment.items():
                m.setenv(name, value)
            assert run_cli(_tool(), [], prog="tool") == 2
        assert capsys.readouterr().err.startswith("tool: error: environment variable RANK")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert run_cli(_tool(UsageError("bad")), [], prog="tool") == 2
    assert capsys.readouterr().err == ""  # a well-formed rank 1 leaves the line to rank 0


def test_closed_streams_are_stand_ins_while_the_tool_runs(capsys, monkeypatch):
    from vaswani_hf.errors import StandardInputClosed

    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    monkeypatch.setattr("sys.stdin", None)
    monkeypatch.setattr("sys.stdout", None)
    seen = {}

    def main(argv):
        import sys

        seen["stdin"], seen["stdout"] = type(sys.stdin).__name__, type(sys.stdout).__name__
        with pytest.raises(StandardInputClosed, match="standard input is closed"):
            sys.stdin.buffer.read()
        sys.stdout.flush()  # flushing nothing is fine
        print("result")

    assert run_cli(main, [], prog="tool") == 1
    assert seen == {"stdin": "ClosedInput", "stdout": "ClosedOutput"}
    assert (
        capsys.readouterr().err == "tool: error: standard output is closed (the command ran with >&-); write "
        "the output to a file instead, or leave standard output open\n"
    )
    import sys

    assert sys.stdin is None and sys.stdout is None  # put back


def test_a_deleted_working_folder_during_the_run_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)

    def main(argv):
        gone.rmdir()
        os.getcwd()

    assert run_cli(main, [], prog="tool") == 2
    assert "the working folder" in capsys.readouterr().err


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_stop_signal_interrupts_and_cleanup_runs(name, code, capsys, monkeypatch):
    import signal

    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    cleaned = []

    def main(argv):
        try:
            os.kill(os.getpid(), getattr(signal, name))
            os.kill(os.getpid(), getattr(signal, name))  # a second signal does not interrupt the cleanup
            raise AssertionError("not interrupted")
        finally:
            os.kill(os.getpid(), getattr(signal, name))
            cleaned.append(True)

    before = signal.getsignal(getattr(signal, name))
    assert run_cli(main, [], prog="tool") == code
    assert cleaned == [True] and capsys.readouterr().err == f"tool: interrupted by {name}\n"
    assert signal.getsignal(getattr(signal, name)) is before


def test_an_ignored_signal_stays_ignored(monkeypatch):
    import signal

    monkeypatch.setattr(signal, "getsignal", lambda number: signal.SIG_IGN)  # as under nohup
    installed = []
    monkeypatch.setattr(signal, "signal", lambda *args: installed.append(args))
    from vaswani_hf.cli.surroundings import signals_as_interrupts

    with signals_as_interrupts():
        pass
    assert installed == []


def test_library_reports_are_dropped_with_a_refusal_and_shown_after_success(capsys, monkeypatch):
    """transformers' own log records (e.g. its LOAD REPORT) and Python warnings: held while the tool runs, dropped
    when it refuses, shown after it succeeds, and shown before a bug's traceback."""
    import logging
    import warnings

    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    shown = []
    handler = logging.Handler()
    handler.emit = lambda record: shown.append(record.getMessage())
    logging.getLogger("transformers").addHandler(handler)
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
    try:

        def speaking(error=None):
            def main(argv):
                logging.getLogger("transformers.modeling_utils").warning("LOAD REPORT ...")
                warnings.warn("a library's warning", UserWarning)
                if error is not None:
                    raise error

            return main

        assert run_cli(speaking(UsageError("refused")), [], prog="tool") == 2
        assert shown == [] and capsys.readouterr().err == "tool: error: refused\n"
        assert run_cli(speaking(), [], prog="tool") == 0
        assert shown == ["LOAD REPORT ...", "a library's warning"]
        shown.clear()
        with pytest.raises(ZeroDivisionError):
            run_cli(speaking(ZeroDivisionError("bug")), [], prog="tool")
        assert shown == ["LOAD REPORT ...", "a library's warning"]
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert handler not in logging.getLogger("transformers").handlers


def test_a_long_run_releases_what_libraries_said(monkeypatch):
    import logging

    from vaswani_hf.cli.contract import release_library_reports

    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    shown = []
    handler = logging.Handler()
    handler.emit = lambda record: shown.append(record.getMessage())
    logging.getLogger("datasets").addHandler(handler)
    try:

        def main(argv):
            logging.getLogger("datasets.builder").warning("before")
            release_library_reports()
            assert shown == ["before"]
            logging.getLogger("datasets.builder").warning("during")
            assert shown == ["before", "during"]  # shown when said
            raise UsageError("refused later")

        assert run_cli(main, [], prog="tool") == 2
    finally:
        logging.getLogger("datasets").removeHandler(handler)


def test_a_path_that_cannot_be_created_is_one_line_but_an_unnamed_enoent_stays_a_bug():
    """`--out /proc/x`: the folder's parent exists, but the system answers "no such file" when the tool creates its
    staging folder there: one line naming the path, exit 2. The same error without a file name is no user's input."""
    from vaswani_hf.cli.contract import expected_os_failure

    code, line = expected_os_failure(FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/.x.tmp"))
    assert code == 2 and line.startswith("/proc/.x.tmp: no such file or folder")
    assert expected_os_failure(FileNotFoundError(errno.ENOENT, "No such file or directory")) is None
