"""Translation at corpus scale (vaswani_hf.translation.stream, `vaswani-translate --buffer_lines/--resume`): windows
give the bytes of one whole-file pass, a bad last line is named before anything is decoded, an interrupted run
continues with --resume to the same bytes (and only with the same input and settings), several processes give the
bytes of one, and `inference.translate_batch_fn` translates a `datasets.Dataset` column.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_contract import LONG, TRANSLATE_OPTIONS, run_main, snapshot, write
from test_cli_resume import one_byte_changed

import vaswani_hf.translation.inference

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]
WORDS = "a man dog woman child ball street red blue runs jumps sits in on the with near water park".split()


def corpus(n: int, seed: int = 0, words: int = 9) -> list[str]:
    """`n` lines of 1 to `words` words, some empty or only spaces."""
    rng = random.Random(seed)
    return [
        ""
        if rng.random() < 0.1
        else "  "
        if rng.random() < 0.05
        else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, words)))
        for _ in range(n)
    ]


def translate(source, output, model, *extra) -> tuple[int, list]:
    return run_main("translate", [source, "--model", model, *TRANSLATE_OPTIONS, "--output", output, *extra])


@pytest.fixture(scope="module")
def reference(assets, tmp_path_factory):
    """53 lines translated in one window larger than the file: (input, output bytes)."""
    folder = tmp_path_factory.mktemp("reference")
    source = write(folder / "in.txt", corpus(53))
    assert translate(source, folder / "out.txt", assets.model, "--buffer_lines", "1000")[0] == 0
    return source, (folder / "out.txt").read_bytes()


def test_windows_smaller_than_the_file_give_the_same_bytes(assets, reference, tmp_path, capfd):
    source, expected = reference
    assert translate(source, tmp_path / "out.txt", assets.model, "--buffer_lines", "7")[0] == 0
    assert (tmp_path / "out.txt").read_bytes() == expected
    assert expected.count(b"\n") == 53
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # the staging folder is gone
    capfd.readouterr()
    assert run_main("translate", [source, "--model", assets.model, *TRANSLATE_OPTIONS, "--buffer_lines", "5"])[0] == 0
    assert capfd.readouterr().out.encode() == expected  # standard output, window by window


def test_bad_last_line_is_named_before_anything_is_decoded(assets, tmp_path, capfd, monkeypatch):
    source = write(tmp_path / "in.txt", [*corpus(40, words=3), LONG])

    def decoded(*args, **kwargs):
        raise AssertionError("decoding started before the bad line was named")

    monkeypatch.setattr(vaswani_hf.translation.inference, "translate", decoded)
    before = snapshot(tmp_path)
    capfd.readouterr()
    assert translate(source, tmp_path / "out.txt", assets.learned, "--buffer_lines", "6")[0] == 2
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1 and f"{source}:41: " in lines[0], lines
    assert snapshot(tmp_path) == before  # nothing written, no staging folder


def _interrupt_at_call(monkeypatch, call: int) -> None:
    """`inference.translate` raises KeyboardInterrupt (as SIGTERM and Ctrl-C do) at its `call`-th window."""
    real, calls = vaswani_hf.translation.inference.translate, []

    def translate_or_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(vaswani_hf.translation.inference, "translate", translate_or_stop)


def test_interrupted_run_resumes_to_the_same_bytes(assets, reference, tmp_path, monkeypatch, capfd):
    source, expected = reference
    out, partial = tmp_path / "out.txt", tmp_path / "out.txt.partial"
    _interrupt_at_call(monkeypatch, 4)
    assert translate(source, out, assets.model, "--buffer_lines", "7")[0] == 130
    monkeypatch.undo()
    assert not out.exists() and len(list(partial.glob("window-*.txt"))) == 3
    capfd.readouterr()
    # without --resume, the interrupted run is neither continued nor destroyed
    assert translate(source, out, assets.model, "--buffer_lines", "7")[0] == 2
    assert "--resume" in capfd.readouterr().err and len(list(partial.glob("window-*.txt"))) == 3
    # another setting, another window or another input: refused in one line, nothing changed
    for extra, name in (
        (["--num_beams", "2", "--buffer_lines", "7"], "settings.num_beams"),
        (["--buffer_lines", "8"], "buffer_lines"),
    ):
        assert translate(source, out, assets.model, *extra, "--resume")[0] == 2
        err = capfd.readouterr().err.splitlines()
        assert len(err) == 1 and "--resume" in err[0] and name in err[0], err
    other = write(tmp_path / "other.txt", corpus(53, seed=1))
    assert translate(other, out, assets.model, "--buffer_lines", "7", "--resume")[0] == 2
    assert "input" in capfd.readouterr().err
    assert len(list(partial.glob("window-*.txt"))) == 3 and not out.exists()
    assert translate(source, out, assets.model, "--buffer_lines", "7", "--resume")[0] == 0
    assert out.read_bytes() == expected and not partial.exists()


def test_overwrite_replaces_an_interrupted_run_and_says_so(assets, reference, tmp_path, monkeypatch, capfd):
    source, expected = reference
    out = tmp_path / "out.txt"
    _interrupt_at_call(monkeypatch, 2)
    assert translate(source, out, assets.model, "--buffer_lines", "10")[0] == 130
    monkeypatch.undo()
    capfd.readouterr()
    assert translate(source, out, assets.model, "--buffer_lines", "9", "--overwrite")[0] == 0
    assert "replacing the interrupted translation" in capfd.readouterr().err
    assert out.read_bytes() == expected


def test_a_folder_not_ours_at_the_staging_path_is_never_replaced(assets, reference, tmp_path, capfd):
    source, _ = reference
    write(tmp_path / "out.txt.partial" / "mine.txt", "keep me\n")
    assert translate(source, tmp_path / "out.txt", assets.model, "--overwrite")[0] == 2
    assert "not written by this tool" in capfd.readouterr().err
    assert (tmp_path / "out.txt.partial" / "mine.txt").read_text() == "keep me\n"


def test_a_running_translation_is_never_replaced_nor_a_file_put_in_its_staging_folder(
    assets, reference, tmp_path, monkeypatch, capfd
):
    """A second translation into the same --output is refused while the first holds the staging folder's lock, even
    with --overwrite; a user's file later put into an interrupted run's staging folder survives its --resume."""
    from vaswani_hf.io import FolderLock

    source, expected = reference
    out, partial = tmp_path / "out.txt", tmp_path / "out.txt.partial"
    _interrupt_at_call(monkeypatch, 2)
    assert translate(source, out, assets.model, "--buffer_lines", "10")[0] == 130
    monkeypatch.undo()
    capfd.readouterr()
    with FolderLock(partial):  # as the running translation holds it
        for extra in ((), ("--overwrite",), ("--resume",)):
            assert translate(source, out, assets.model, "--buffer_lines", "10", *extra)[0] == 2
            assert "in use by another translation" in capfd.readouterr().err
    write(partial / "x.de", "mine\n")
    assert translate(source, out, assets.model, "--buffer_lines", "10", "--resume")[0] == 2
    assert "did not write (x.de)" in capfd.readouterr().err
    (partial / "x.de").rename(tmp_path / "x.de")
    assert translate(source, out, assets.model, "--buffer_lines", "10", "--resume")[0] == 0
    assert out.read_bytes() == expected and not partial.exists() and (tmp_path / "x.de").read_text() == "mine\n"


def test_a_part_without_its_record_is_translated_again(assets, reference, tmp_path, monkeypatch, capfd):
    """A run stopped between writing a window's part and its record (SIGKILL) leaves a part that proves nothing: the
    resume translates it again and says so."""
    source, expected = reference
    out, partial = tmp_path / "out.txt", tmp_path / "out.txt.partial"
    _interrupt_at_call(monkeypatch, 4)
    assert translate(source, out, assets.model, "--buffer_lines", "7")[0] == 130
    monkeypatch.undo()
    (partial / "window-00000001.json").unlink()
    capfd.readouterr()
    assert translate(source, out, assets.model, "--buffer_lines", "7", "--resume")[0] == 0
    err = capfd.readouterr().err
    assert f"{partial / 'window-00000001.txt'} is translated again: it has no readable record" in err, err
    assert "window-00000000" not in err and "window-00000002" not in err  # the proven parts are reused
    assert out.read_bytes() == expected


def test_the_join_refuses_a_part_changed_after_its_check(assets, reference, tmp_path, monkeypatch, capfd):
    """Nothing unverified reaches --output: a part edited after the resume's check (its line count kept) is found by
    the join, which writes nothing, removes that part and fails in one line; --resume then completes."""
    import vaswani_hf.translation.staging as staging

    source, expected = reference
    out, partial = tmp_path / "out.txt", tmp_path / "out.txt.partial"
    publish = staging.publish

    def edited_then_joined(folder, *args, **kwargs):
        one_byte_changed(folder / "window-00000002.txt")
        return publish(folder, *args, **kwargs)

    monkeypatch.setattr(staging, "publish", edited_then_joined)
    capfd.readouterr()
    assert translate(source, out, assets.model, "--buffer_lines", "7")[0] == 1
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and f"{partial / 'window-00000002.txt'} changed after it was written" in err[0], err
    assert not out.exists() and not (partial / "window-00000002.txt").exists()
    monkeypatch.undo()
    assert translate(source, out, assets.model, "--buffer_lines", "7", "--resume")[0] == 0
    assert out.read_bytes() == expected and not partial.exists()


@pytest.mark.timeout(120)
def test_several_processes_refuse_an_input_read_only_once(assets, tmp_path, monkeypatch, capfd):
    """Each of N processes reads the whole input: a named pipe (it would be shared out among them, or wait forever)
    is refused in one line before it is opened."""
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    capfd.readouterr()
    assert translate(tmp_path / "fifo", tmp_path / "out.txt", assets.model)[0] == 2
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and "2 processes (WORLD_SIZE)" in err[0] and "read only once" in err[0], err


def test_a_pipe_beyond_the_spool_bound_is_one_line(assets, tmp_path, monkeypatch, capfd):
    """The copy of an input read only once is bounded (vaswani_hf.io.text.SPOOL_SHARE of TMPDIR's free space): more is
    refused in one line naming the input, nothing written, the copy removed."""
    import tempfile

    import vaswani_hf.io.text

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(vaswani_hf.io.text, "SPOOL_SHARE", 1e-15)
    read_end, write_end = os.pipe()
    os.write(write_end, b"a man\n" * 100)
    os.close(write_end)
    capfd.readouterr()
    try:
        assert translate(f"/dev/fd/{read_end}", tmp_path / "out.txt", assets.model)[0] == 2
    finally:
        os.close(read_end)
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and f"/dev/fd/{read_end}: more than " in err[0] and "TMPDIR" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"] and not list((tmp_path / "tmp").iterdir())


def _env() -> dict:
    return dict(
        os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1"
    )


@pytest.mark.slow
def test_sigterm_keeps_finished_windows_and_resume_gives_the_same_bytes(assets, tmp_path):
    """A scheduler's stop (SIGTERM) of a real process: exit 143, finished windows kept, --resume completes."""
    source = write(tmp_path / "in.txt", corpus(400, seed=2))
    command = [
        sys.executable,
        str(REPO / "scripts" / "translate.py"),
        str(source),
        "--model",
        str(assets.model),
        *TRANSLATE_OPTIONS,
        "--buffer_lines",
        "20",
        "--output",
        str(tmp_path / "out.txt"),
    ]
    process = subprocess.Popen(command, env=_env(), stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    partial = tmp_path / "out.txt.partial"
    deadline = time.monotonic() + 300
    while not list(partial.glob("window-*.txt")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert not (tmp_path / "out.txt").exists() and 1 <= len(list(partial.glob("window-*.txt"))) < 20
    resumed = subprocess.run(
        command + ["--resume"], env=_env(), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert resumed.returncode == 0, resumed.stderr
    assert translate(source, tmp_path / "whole.txt", assets.model, "--buffer_lines", "1000")[0] == 0
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()


@pytest.mark.slow
def test_two_processes_give_the_bytes_of_one_and_resume_across_processes(assets, reference, tmp_path, monkeypatch):
    """`accelerate launch --num_processes 2` (CPU, gloo) on 53 lines in 8 windows of 7 (shares 4 and 4, the last
    window short), then a run interrupted in one process resumed by two."""
    source, expected = reference
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--main_process_port",
        str(29500 + os.getpid() % 1000),
        str(REPO / "scripts" / "translate.py"),
        str(source),
        "--model",
        str(assets.model),
        *TRANSLATE_OPTIONS,
        "--buffer_lines",
        "7",
    ]
    env = dict(_env(), ACCELERATE_USE_CPU="1")
    result = subprocess.run(
        launch + ["--output", str(tmp_path / "two.txt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "two.txt").read_bytes() == expected
    _interrupt_at_call(monkeypatch, 3)
    assert translate(source, tmp_path / "resumed.txt", assets.model, "--buffer_lines", "7")[0] == 130
    result = subprocess.run(
        launch + ["--output", str(tmp_path / "resumed.txt"), "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "resumed.txt").read_bytes() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumed.txt", "two.txt"]


def test_translate_batch_fn_translates_a_dataset_column(assets, reference):
    import datasets

    from vaswani_hf.translation.inference import load_for_inference, translate, translate_batch_fn

    source, _ = reference
    lines = source.read_text().splitlines()[:12]
    model, tokenizer = load_for_inference(assets.model, device="cpu")
    expected = translate(model, tokenizer, lines, num_beams=1, progress=False)
    dataset = datasets.Dataset.from_dict({"en": lines, "id": list(range(len(lines)))})
    fn = translate_batch_fn(assets.model, column="en", output_column="de", device="cpu", num_beams=1)
    mapped = dataset.map(fn, batched=True, batch_size=5)
    assert mapped["de"] == expected and mapped["id"] == list(range(len(lines)))
    assert len(set(expected)) > 1  # input-dependent outputs: an order bug would show


def test_front_end_ids_are_the_tokenizers_even_after_a_padded_call(assets):
    """The fast path (the tokenizers backend) gives `tokenizer(texts)`'s ids, also after a call with padding=True left
    padding set on the backend."""
    from transformers import AutoTokenizer

    from vaswani_hf.translation.inference import front_end

    tokenizer = AutoTokenizer.from_pretrained(assets.model)
    texts = ["a man", "a red ball near the water with a dog"]
    encode, table = front_end(object(), tokenizer)
    expected = tokenizer(texts)["input_ids"]
    assert encode(texts) == expected and table is None and len(expected[0]) < len(expected[1])
    tokenizer(texts, padding=True)
    assert encode(texts) == expected


@pytest.mark.parametrize("normalization", ["NFC", "NFKC", None])
@pytest.mark.parametrize("lowercase", [False, True])
def test_the_check_pass_token_bound_is_never_below_the_token_count(normalization, lowercase):
    """The check pass tokenises only lines whose bound (`inference.token_bound`: UTF-8 length of the normalised text
    + special tokens) exceeds the limit: the bound must hold for every text, expansions under NFKC included."""
    from vaswani_hf.tokenization import train_bpe_tokenizer

    texts = corpus(300, seed=1) + [
        "ﷺ ﬁ ½ Ⅻ ㎏ ＡＢＣ",
        "İstanbul ǅ ß",
        "x" * 500,
        "\u0301e\u0301",
        "日本語の文",
        "🙂 " * 20,
        "\ufeffbom",
        "tab\there",
        "a\u200bb",
        "ÅÅ" * 40,
    ]
    tokenizer = train_bpe_tokenizer(
        corpus(300, seed=2) + texts, vocab_size=300, lowercase=lowercase, normalization=normalization
    )
    bound = vaswani_hf.translation.inference.token_bound(tokenizer)
    assert bound is not None
    for text in texts:
        assert len(tokenizer(text)["input_ids"]) <= bound(text), text


def test_the_batch_function_names_a_missing_column(assets):
    fn = vaswani_hf.translation.inference.translate_batch_fn(assets.model, column="en", output_column="de")
    with pytest.raises(KeyError, match=r"no column 'en' in the batch \(its columns: \['fr'\]\)"):
        fn({"fr": ["x"]})
