"""Two runs of a command into the same output, for every command that writes. The table is generated from the
registry: every tool's declared writers (`Cases.writers`), as the other batteries of tests/test_cli_os_conditions.py.

A second run cannot be started at a chosen moment of the first, so the moment is made: each writer's last step before
its output appears (`Writer.interrupt`, where the interruption batteries stop it) is where this run looks at its
output as another run would.

- An output file: another run's file appears there at that moment (two runs that both found the name free). The run
  keeps the other run's file byte for byte and is refused in one line naming the file (exit status 2), since
  replacing it would lose work this run did not create.
- An output folder: at that moment the folder is held by this run (its lock), so a second run into it would be
  refused, not mixed in; the run then finishes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_contract import declared, run_main
from test_cli_os_conditions import WRITER_CASES, assert_one_error_line

from vaswani_hf import io

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

OTHER_RUN = b"written by another run\n"


def output_path(argv: list, flag: str) -> Path:
    """The path a writer's command line gives its output (`flag`: "--out", or a recipe key such as "output_dir")."""
    words = [str(a) for a in argv]
    return Path(words[words.index("--" + flag.lstrip("-")) + 1])


def test_the_table_holds_every_writer():
    """A tool that declares a writer joins this battery without a case written by hand."""
    assert len(WRITER_CASES) == len(declared("writers")) > 0


@pytest.mark.parametrize("writer", WRITER_CASES)
def test_a_second_run_never_replaces_or_mixes_into_the_first_runs_output(writer, assets, tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = writer.argv(assets, tmp_path, tmp_path)
    output = output_path(argv, writer.output)
    module, attribute = writer.interrupt.rsplit(".", 1)
    last_step = getattr(__import__(module, fromlist=[attribute]), attribute)
    held = []

    def another_run_looks(*args, **kwargs):
        # The first call is the one before the output appears; the later ones flush what was already published.
        if output.is_dir() and not held:
            held.append(io.folder_in_use(output))
        elif not output.exists() and output.parent.is_dir():
            output.write_bytes(OTHER_RUN)
        return last_step(*args, **kwargs)

    monkeypatch.setattr(writer.interrupt, another_run_looks)
    capfd.readouterr()
    code, warned = run_main(writer.tool, argv)
    _, err = capfd.readouterr()
    shown = f"{writer.id}: {output}"
    if output.is_file() or not held:
        assert_one_error_line(err + "".join(f"{w}\n" for w in warned), code, 2, str(output), shown=shown)
        assert output.read_bytes() == OTHER_RUN, f"{shown}: the other run's file was replaced"
    else:
        assert code == 0, f"{shown}\n{err[-3000:]}"
        assert held == [True], f"{shown}: the output folder was not held while the run wrote it"
