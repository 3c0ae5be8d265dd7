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


@pytest.mark.parametrize("error, code, line", [
    (OSError(errno.ENOSPC, "No space left on device"), 1, "--output out.de: no space left on device"),
    (OSError(errno.EACCES, "Permission denied", "/x/secret"), 2, "/x/secret: permission denied"),
    (OSError(errno.ELOOP, "Too many levels", "/x/loop"), 2, "/x/loop: too many levels of symbolic links"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/f"), 2, "/ro/f: read-only file system"),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), 1, "standard output was closed"),
    (RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file data/0: "
                  "file write failed"), 1, "--output out.de: writing failed, no space left on device"),
    (Exception("No space left on device (os error 28)"), 1, "--output out.de: writing failed"),
])
def test_operating_system_conditions_are_one_line(capsys, monkeypatch, error, code, line):
    """What the system reports for a full disk, a refused permission, a link loop, a read-only file system or a
    closed output pipe is one line naming the file (or the declared outputs, when the system does not name it), never
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
