"""vaswani_hf.io.outputs: what a command may write (outputs never replace inputs; only regular files and folders
this package wrote are replaced), atomic writes with the umask's modes, the run folder's lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vaswani_hf import io
from vaswani_hf.io import (
    UsageError,
    check_output_dir,
    check_output_file,
    write_lines,
)


def test_atomic_folder(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with io.atomic_output_dir(target, overwrite=True) as temporary:
            (temporary / "new.txt").write_text("new")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with io.atomic_output_dir(target, overwrite=True) as temporary:
        (temporary / "new.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_two_writers_of_one_output_folder_never_replace_each_other(tmp_path):
    """A writer claims its folder on entry (created, locked): a second writer meanwhile is refused; one that comes
    after the first finished does not replace its folder without overwrite; a failed writer leaves nothing."""
    target = tmp_path / "tok"
    with io.atomic_output_dir(target) as first:
        with pytest.raises(UsageError, match=f"output folder {target} is in use by another run"):
            with io.atomic_output_dir(target):
                pass
        (first / "tokenizer.json").write_text("first")
    with pytest.raises(UsageError, match=f"output folder {target} was written by another run while this one worked"):
        with io.atomic_output_dir(target):
            pass
    assert (target / "tokenizer.json").read_text() == "first"
    with pytest.raises(RuntimeError):
        with io.atomic_output_dir(tmp_path / "other"):
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]


def test_check_output_file(tmp_path):
    assert check_output_file(tmp_path / "new.txt") == tmp_path / "new.txt"
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(UsageError, match="exists; pass --overwrite"):
        check_output_file(tmp_path / "old.txt")
    assert check_output_file(tmp_path / "old.txt", overwrite=True) == tmp_path / "old.txt"


def test_check_output_dir(tmp_path):
    assert check_output_dir(tmp_path / "absent") == tmp_path / "absent"  # absent: fine (created later)
    assert not (tmp_path / "absent").exists()  # a check changes nothing
    (tmp_path / "empty").mkdir()
    assert check_output_dir(tmp_path / "empty") == tmp_path / "empty"
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"--out_dir .*full exists and is not empty; pass --overwrite"):
        check_output_dir(full, what="--out_dir")
    assert check_output_dir(full, overwrite=True) == full
    assert (full / "keep.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"file is a file; give a folder"):
        check_output_dir(tmp_path / "file", overwrite=True)
    with pytest.raises(UsageError, match=r"is a file, not a folder"):
        check_output_dir(tmp_path / "file" / "sub" / "dir")


# ---------------------------------------------------------------------------------------------------------------------
# The one guard: an output never is, contains or lies inside an input
# ---------------------------------------------------------------------------------------------------------------------


def _tree(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.en").write_text("a\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "link.en").symlink_to(tmp_path / "data" / "in.en")
    os.link(tmp_path / "data" / "in.en", tmp_path / "hard.en")
    return {"input": tmp_path / "data" / "in.en", "--model": tmp_path / "model"}


@pytest.mark.parametrize(
    "output, relation",
    [
        ("data/in.en", "is input"),  # the input itself
        ("link.en", "is input"),  # a symbolic link to it
        ("hard.en", "is input"),  # a hard link to it
        ("data", "contains input"),  # its folder
        (".", "contains input"),
        ("model", "is --model"),
        ("model/out", "lies inside --model"),  # writing into the model folder
        ("model/sub/deeper", "lies inside --model"),
    ],
)
def test_an_output_never_overlaps_an_input(tmp_path, output, relation):
    inputs = _tree(tmp_path)
    with pytest.raises(UsageError) as error:
        io.check_paths(inputs, {"--out": tmp_path / output})
    message = str(error.value)
    assert message.startswith(f"--out {tmp_path / output} {relation}") and "whatever --overwrite says" in message


def test_outputs_apart_from_inputs_and_each_other_pass(tmp_path):
    inputs = _tree(tmp_path)
    io.check_paths(inputs, {"--out": tmp_path / "out.de", "--scores": tmp_path / "scores.json", "--stdout": "-"})
    io.check_paths({"--model": "org/hub-id", "input": "-"}, {"--out": tmp_path / "x"})  # nothing local to compare
    with pytest.raises(UsageError, match="--out .* is --scores"):
        io.check_paths(inputs, {"--out": tmp_path / "same", "--scores": tmp_path / "same"})


def test_a_symlink_loop_is_named(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UsageError, match=r"--out .*a: too many levels of symbolic links"):
        io.check_paths({}, {"--out": tmp_path / "a"})
    with pytest.raises(UsageError, match="link loop"):
        check_output_file(tmp_path / "a" / "x.txt")


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "fifo", "char device"])
def test_only_regular_files_are_replaced(tmp_path, kind):
    target = tmp_path / "out.txt"
    if kind == "symlink":
        (tmp_path / "real.txt").write_text("mine")
        target.symlink_to(tmp_path / "real.txt")
    elif kind == "dangling symlink":
        target.symlink_to(tmp_path / "nothing")
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target = Path("/dev/null")
    with pytest.raises(UsageError, match="a tool replaces only a regular file it wrote"):
        check_output_file(target, overwrite=True)
    with pytest.raises(UsageError):
        write_lines(target, ["x"], overwrite=True)
    if kind == "symlink":
        assert (tmp_path / "real.txt").read_text() == "mine" and target.is_symlink()


def test_overwrite_replaces_only_a_folder_of_the_same_kind(tmp_path):
    ours = tmp_path / "export"
    with io.atomic_output_dir(ours, kind="marian export") as temporary:
        (temporary / "config.json").write_text("{}")
    assert io.written_by(ours) == "marian export"
    assert check_output_dir(ours, overwrite=True, kind="marian export") == ours
    with pytest.raises(UsageError, match=r"not an earlier tokenizer folder \(it holds a marian export"):
        check_output_dir(ours, overwrite=True, kind="tokenizer folder")
    foreign = tmp_path / "downloads"
    foreign.mkdir()
    (foreign / "corpus.en").write_text("precious\n")
    with pytest.raises(UsageError, match=r"it was not written by this tool: corpus\.en\); --overwrite replaces only"):
        check_output_dir(foreign, overwrite=True, kind="marian export")
    assert (foreign / "corpus.en").read_text() == "precious\n"


def test_outputs_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_lines(tmp_path / "out.txt", ["x"])
        with io.atomic_output_dir(tmp_path / "folder", kind="test") as temporary:
            (temporary / "sub").mkdir()
            fd, _ = __import__("tempfile").mkstemp(dir=temporary)  # as libraries that save through temp files do
            os.close(fd)
    finally:
        os.umask(old)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "folder").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "folder" / "sub").stat().st_mode & 0o777 == 0o755
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "folder").iterdir() if p.is_file()} == {0o644}


def test_flushing_a_folder_never_opens_a_fifo(tmp_path, monkeypatch):
    """A FIFO inside a written folder would block `open` until a writer comes: the flush opens the folder and its
    regular files, never the FIFO (an attempt fails here at once instead of blocking)."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "file").write_text("x")
    opened, real_open = [], os.open

    def recording_open(path, flags, *args, **kwargs):
        opened.append(Path(path))
        if Path(path) == tmp_path / "pipe":
            raise AssertionError("fsync_tree opened the FIFO")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    io.fsync_tree(tmp_path)
    assert set(opened) == {tmp_path, tmp_path / "file"}


def test_one_run_at_a_time_holds_a_folder(tmp_path):
    with io.FolderLock(tmp_path, "output_dir"):
        assert io.folder_in_use(tmp_path)
        with pytest.raises(UsageError, match=r"output_dir .* is in use by another run"):
            io.FolderLock(tmp_path, "output_dir").acquire()
    assert not io.folder_in_use(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the lock is on the folder itself: no lock file


def test_standard_input_or_output_is_one_stream(tmp_path):
    with pytest.raises(UsageError, match=r"--files \(1\) and --files \(2\) all name standard input \(-\)"):
        io.check_paths({"--files (1)": "-", "--files (2)": "-"}, {"--out_dir": tmp_path / "tok"})
    with pytest.raises(UsageError, match=r"--out and --save_hypotheses all name standard output"):
        io.check_paths({}, {"--out": "-", "--save_hypotheses": "-"})
    io.check_paths({"input": "-", "--references": tmp_path / "ref.txt"}, {"--output": "-"})  # one each is fine
