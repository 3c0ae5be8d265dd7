"""vaswani_hf.io.progress: every tool's progress report. On a terminal tqdm's bar; anywhere else plain lines, no
carriage return, a line only when the work crossed another 5% or a minute passed since the last one, and one at the
end; the training loop (transformers' progress callback replaced) and the libraries' own bars follow the same rule."""

from __future__ import annotations

import io as std_io
import re
import sys

import pytest
from cli_contract import run_main, write
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani_hf.io import progress
from vaswani_hf.io.progress import PERCENT, SECONDS, LineProgress

pytest_plugins = ["cli_assets"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _report(total, steps, unit="line"):
    """The lines a LineProgress writes for `steps` [(items, seconds before them)]: [(time, count)] and the text."""
    clock, stream, written = Clock(), std_io.StringIO(), []
    bar = LineProgress(total, "translating", unit, file=stream, clock=clock)
    for items, seconds in steps:
        clock.now += seconds
        before = stream.tell()
        bar.update(items)
        if stream.tell() != before:
            written.append((clock.now, bar.n))
    bar.close()
    if stream.getvalue().count("\n") > len(written):
        written.append((clock.now, bar.n))
    return written, stream.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    total=st.one_of(st.none(), st.integers(1, 5000)),
    steps=st.lists(st.tuples(st.integers(0, 400), st.floats(0, 200)), max_size=80),
)
def test_a_line_only_when_due_and_one_at_the_end(total, steps):
    written, text = _report(total, steps)
    assert "\r" not in text and text.count("\n") == len(written)
    last_time, last_count = 0.0, 0
    for now, count in written[:-1] if written else []:
        crossed = total is not None and int(count * 100 / PERCENT / total) > int(last_count * 100 / PERCENT / total)
        assert crossed or now - last_time >= SECONDS, (now, count, last_time, last_count)
        last_time, last_count = now, count
    done = sum(items for items, _ in steps)
    assert (written[-1][1] if written else 0) == done  # the end is always reported (nothing: nothing to say)


def test_the_lines_read_as_a_log():
    written, text = _report(1000, [(10, 0.5)] * 100)
    lines = text.splitlines()
    assert len(lines) == 100 // PERCENT and lines[0].startswith("translating: 50/1,000 lines (5%), 20.0 lines/s,")
    assert lines[0].endswith("0:02 elapsed, 0:47 left") and lines[-1].endswith("(100%), 20.0 lines/s, 0:50 elapsed")
    written, text = _report(None, [(1, 30.0)] * 10, unit="update")  # unknown size: every minute
    assert [count for _, count in written] == [2, 4, 6, 8, 10] and text.startswith("translating: 2 updates, ")
    _, text = _report(20, [(1, 0.5)] * 20, unit="batch")  # "batches", not "batchs"
    assert text.splitlines()[-1].startswith("translating: 20/20 batches (100%), 2.0 batches/s,")


def test_a_bar_on_a_terminal_and_lines_elsewhere(monkeypatch):
    from tqdm.auto import tqdm

    monkeypatch.setattr(progress, "interactive", lambda stream=None: True)
    with progress.progress_bar(total=3, desc="x", disable=True) as bar:
        assert isinstance(bar, tqdm)
    monkeypatch.setattr(progress, "interactive", lambda stream=None: False)
    with progress.progress_bar(total=3, desc="x", leave=False) as bar:
        assert isinstance(bar, LineProgress)


def test_a_notebook_is_a_terminal(monkeypatch):
    """A Jupyter kernel's standard error is no terminal, but tqdm draws its widget there."""
    import types

    class ZMQInteractiveShell:
        pass

    assert not progress.interactive(std_io.StringIO())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=ZMQInteractiveShell))
    assert progress.interactive(std_io.StringIO())


@pytest.mark.usefixtures("one_torch_thread")
def test_translate_and_training_write_no_carriage_return_into_a_log(assets, tmp_path, capfd, monkeypatch):
    """The tools as they run with standard error captured (not a terminal): the translation's and the training
    loop's reports are plain lines, at most one per 5% (and the last), and no library draws a bar."""
    monkeypatch.chdir(tmp_path)
    source = write(tmp_path / "in.txt", [f"a man is riding a horse {i} ." for i in range(200)])
    capfd.readouterr()
    code, _ = run_main(
        "translate",
        [
            source,
            "--model",
            assets.model,
            "--num_beams",
            "1",
            "--device",
            "cpu",
            "--buffer_lines",
            "10",
            "--output",
            tmp_path / "out.txt",
        ],
    )
    out, err = capfd.readouterr()
    assert code == 0 and "\r" not in err, err
    reports = [line for line in err.splitlines() if line.startswith("translating: ")]
    assert 1 <= len(reports) <= 100 // PERCENT and reports[-1].startswith("translating: 200/200 lines (100%)")
    code, _ = run_main(
        "train",
        [
            "--recipe",
            assets.recipe,
            "--data_dir",
            assets.corpus,
            "--output_dir",
            tmp_path / "run",
            "--disable_tqdm",
            "false",
        ],
    )
    out, err = capfd.readouterr()
    assert code == 0 and "\r" not in err + out, err[-2000:]
    reports = [line for line in err.splitlines() if re.match(r"training: \d+/4 updates", line)]
    assert reports and reports[-1].startswith("training: 4/4 updates (100%)"), err[-2000:]
    assert "{'loss': " in out  # the loop's log lines stay on standard output, each a line
