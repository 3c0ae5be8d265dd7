"""Translating with a trained model: `vaswani_hf.translation.inference` (translate, load_for_inference) and the translate tool
(`vaswani_hf.cli.translate`, run through its thin wrapper scripts/translate.py).

(GNMT scoring, cache and the per-sentence maximum length: tests/test_generation_vaswani.py; the translation
pipeline: tests/test_pipeline.py; the token-budget batcher itself: tests/test_data_batching.py.)
"""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch
from translation_model import LINES, REPO, SUBPROCESS_ENV

from vaswani_hf.data.batching import make_batches
from vaswani_hf.io import InputLineError, UsageError
from vaswani_hf.translation.inference import load_for_inference, position_limit, resolve_dtype, translate

# one torch thread for the module's tiny models (translation_model.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = REPO / "scripts" / "translate.py"


def test_outputs_depend_on_input(model, tokenizer):
    outputs = translate(model, tokenizer, [line for line in LINES if line.strip()], num_beams=1, progress=False)
    assert len(set(outputs)) >= 4, outputs


@pytest.mark.parametrize("num_beams", [1, None])  # greedy, and the paper's beam 4 / GNMT / input+50 defaults
def test_translate_batched_equals_one_by_one(model, tokenizer, num_beams):
    batched = translate(model, tokenizer, LINES, num_beams=num_beams, max_tokens=40, progress=False)
    one_by_one = [translate(model, tokenizer, [line], num_beams=num_beams, progress=False)[0] for line in LINES]
    assert batched == one_by_one
    assert len(batched) == len(LINES)
    assert [out == "" for out in batched] == [not line.strip() for line in LINES]  # the empty-line rule


def test_translate_batches_are_make_batches(model, tokenizer, monkeypatch):
    """translate packs with the package's one batcher: longest first, within the token budget / batch size."""
    texts = [line.strip() for line in LINES if line.strip()]
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    calls = []
    original = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(kw["input_ids"].shape) or original(**kw))
    for max_tokens, batch_size in ((40, None), (None, 3), (25, 2)):
        calls.clear()
        translate(model, tokenizer, LINES, num_beams=1, max_tokens=max_tokens, batch_size=batch_size, progress=False)
        expected = make_batches(lengths, max_tokens, batch_size)
        assert [shape[0] for shape in calls] == [len(b) for b in expected]
        assert [shape[1] for shape in calls] == [max(lengths[i] for i in b) for b in expected]
        if max_tokens is not None:
            assert all(n == 1 or n * width <= max_tokens for n, width in calls)


def test_translate_empty_lines_do_not_call_the_model(model, tokenizer, monkeypatch):
    calls = []
    original = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(kw["input_ids"].shape[0]) or original(**kw))
    assert translate(model, tokenizer, ["", "  ", "\t"], progress=False) == ["", "", ""]
    assert translate(model, tokenizer, [], progress=False) == []
    assert calls == []
    translate(model, tokenizer, ["", "dog", " "], num_beams=1, progress=False)
    assert calls == [1]


def test_translate_outputs_are_single_lines(model, tokenizer, monkeypatch):
    newline_ids = tokenizer("a\nb\u2028c", add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(model, "generate", lambda **kw: torch.tensor([newline_ids] * kw["input_ids"].shape[0]))
    assert translate(model, tokenizer, ["dog", "man"], progress=False) == ["a b c", "a b c"]


def test_translate_refuses_a_single_string_and_non_strings(model, tokenizer):
    with pytest.raises(TypeError, match="not a single string"):
        translate(model, tokenizer, "dog", progress=False)
    with pytest.raises(TypeError, match="sentence 2 is an int, not a str"):
        translate(model, tokenizer, ["a", 3], progress=False)
    with pytest.raises(TypeError, match="`sentences` must be a sequence of strings, not a NoneType"):
        translate(model, tokenizer, None, progress=False)


def test_position_limit_is_the_learned_table_as_generate_caps_it(tokenizer):
    """position_limit reads generate()'s own cap (Table 3, row E); sinusoids and other models have none."""
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.export.marian import to_marian

    settings = dict(
        vocab_size=len(tokenizer),
        d_model=16,
        d_ff=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        max_position_embeddings=12,
    )
    learned = VaswaniForConditionalGeneration(VaswaniConfig(position_encoding="learned", **settings)).eval()
    sinusoidal = VaswaniForConditionalGeneration(VaswaniConfig(**settings)).eval()
    assert position_limit(learned) == 12
    assert position_limit(sinusoidal) is None and position_limit(to_marian(sinusoidal)) is None


def test_translate_refuses_a_line_longer_than_learned_positions_before_decoding(tokenizer, monkeypatch):
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration

    learned = VaswaniForConditionalGeneration(
        VaswaniConfig(
            vocab_size=len(tokenizer),
            d_model=16,
            d_ff=32,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            position_encoding="learned",
            max_position_embeddings=12,
        )
    ).eval()
    calls = []
    monkeypatch.setattr(learned, "generate", lambda **kw: calls.append(kw))
    long_line = " ".join(["water"] * 40)
    with pytest.raises(
        InputLineError,
        match=r"^line 3: \d+ source tokens, but the model's learned position "
        r"embeddings cover 12 positions; shorten or split the line$",
    ):
        translate(learned, tokenizer, ["dog", "", long_line], progress=False)
    assert calls == []


def test_load_for_inference(model, tokenizer, saved_folder, tmp_path):
    loaded, loaded_tokenizer = load_for_inference(saved_folder, device="cpu")
    assert not loaded.training and loaded.dtype == torch.float32
    assert translate(loaded, loaded_tokenizer, LINES, num_beams=1, progress=False) == translate(
        model, tokenizer, LINES, num_beams=1, progress=False
    )
    half, _ = load_for_inference(str(saved_folder), device="cpu", dtype="bf16")
    assert half.dtype == torch.bfloat16
    with pytest.raises(UsageError, match=r"unknown dtype 'int4'; use one of fp32, bf16, fp16, int8, auto"):
        load_for_inference(saved_folder, device="cpu", dtype="int4")
    # a missing or broken folder is a UsageError naming it, before transformers is asked
    with pytest.raises(UsageError, match=r"model folder not found: .*absent"):
        load_for_inference(tmp_path / "absent", device="cpu")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "model.safetensors"):
        (broken / name).write_bytes((saved_folder / name).read_bytes())
    with pytest.raises(UsageError, match=r"broken: no tokenizer\.json"):
        load_for_inference(broken, device="cpu")
    # a device this machine lacks is named as the tools' --device names it, not an error from inside torch
    with pytest.raises(UsageError, match=r"device 'cuda:99': this machine has"):
        load_for_inference(saved_folder, device="cuda:99")
    with pytest.raises(UsageError, match=r"device 'gpu' is not a torch device"):
        load_for_inference(saved_folder, device="gpu")


def test_resolve_dtype():
    assert resolve_dtype(None) is None
    assert resolve_dtype("fp16") is torch.float16 and resolve_dtype("torch.bfloat16") is torch.bfloat16
    assert resolve_dtype(torch.float32) is torch.float32


# ------------------------------------------------------------------------------------------------ the translate tool


def _load_script():
    spec = importlib.util.spec_from_file_location("translate_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_error_line(err: str) -> str:
    """The tool's error: one line on stderr, `prog: error: ...`, no traceback."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert ": error: " in err and "Traceback" not in err, err
    return err


def test_script_keeps_order_and_line_count(model, tokenizer, saved_folder, tmp_path):
    source = tmp_path / "in.txt"
    # CRLF line ends and no final newline: still one output line per input line
    source.write_bytes("\r\n".join(LINES).encode("utf-8"))
    output = tmp_path / "out.txt"
    script = _load_script()
    assert (
        script.main(
            [
                str(source),
                "--model",
                str(saved_folder),
                "--output",
                str(output),
                "--num_beams",
                "1",
                "--max_tokens",
                "30",
                "--no_progress",
            ]
        )
        == 0
    )
    got = output.read_text(encoding="utf-8").split("\n")
    assert got[-1] == ""  # ends with a newline
    assert got[:-1] == translate(model, tokenizer, LINES, num_beams=1, progress=False)


def test_script_refuses_to_overwrite_output(model, tokenizer, saved_folder, tmp_path, capsys):
    """An existing --output is replaced only with --overwrite (checked before any work)."""
    from vaswani_hf.cli import translate as cli

    source = tmp_path / "in.txt"
    source.write_text("dog\nsnow\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    output.write_text("keep me\n", encoding="utf-8")
    args = [str(source), "--model", str(saved_folder), "--output", str(output), "--num_beams", "1", "--no_progress"]
    assert cli.main(args) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert f"--output {output} exists; pass --overwrite to replace it" in err
    assert output.read_text(encoding="utf-8") == "keep me\n"
    assert cli.main(args + ["--overwrite"]) == 0
    capsys.readouterr()
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == translate(
        model, tokenizer, ["dog", "snow"], num_beams=1, progress=False
    )
    (tmp_path / "outputs").mkdir()
    assert cli.main([str(source), "--model", str(saved_folder), "--output", str(tmp_path / "outputs")]) == 2
    assert "is a folder" in _one_error_line(capsys.readouterr().err)
    assert cli.main([str(source), "--model", str(saved_folder), "--output", str(tmp_path), "--overwrite"]) == 2
    assert f"--output {tmp_path} contains input {source}" in _one_error_line(capsys.readouterr().err)
    assert cli.main([str(source), "--model", str(saved_folder), "--output", str(source), "--overwrite"]) == 2
    assert "whatever --overwrite says" in _one_error_line(capsys.readouterr().err)
    assert source.read_text(encoding="utf-8") == "dog\nsnow\n"


def test_script_stdin_to_stdout_subprocess(model, tokenizer, saved_folder):
    text = "\n".join(LINES) + "\n"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(saved_folder), "--device", "cpu"],
        input=text.encode("utf-8"),
        capture_output=True,
        timeout=120,
        env={**os.environ, **SUBPROCESS_ENV},
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode("utf-8").split("\n")
    assert len(lines) == len(LINES) + 1 and lines[-1] == ""
    assert lines[:-1] == translate(model, tokenizer, LINES, progress=False)  # the paper's defaults
    assert "translating" in result.stderr.decode()  # the progress bar goes to stderr


@pytest.mark.parametrize("case", ["missing", "directory", "not_utf8"])
def test_script_unreadable_input_errors_clearly(saved_folder, tmp_path, capsys, case):
    # the messages are vaswani_hf.io's ("file:line: not valid UTF-8", "is a folder")
    script = _load_script()
    if case == "missing":
        path, expected = tmp_path / "nope.en", f"input file not found: {tmp_path / 'nope.en'}"
    elif case == "directory":
        path, expected = tmp_path, f"input file {tmp_path} is a folder"
    else:
        path = tmp_path / "latin1.en"
        path.write_bytes("fine\nstill fine\nGr\xfc\xdfe\n".encode("latin-1"))
        expected = f"{path}:3: not valid UTF-8 (byte 0xfc at byte 3 of the line)"
    output = tmp_path / "out.txt"
    assert script.main([str(path), "--model", str(saved_folder), "--output", str(output)]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert expected in err and str(path) in err
    assert not output.exists()


def test_script_broken_model_folder_errors_before_translating(saved_folder, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("dog\n", encoding="utf-8")
    script = _load_script()
    assert script.main([str(source), "--model", str(tmp_path / "no_model")]) == 2
    assert f"--model not found: {tmp_path / 'no_model'}" in _one_error_line(capsys.readouterr().err)
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (broken / name).write_bytes((saved_folder / name).read_bytes())
    weights = (saved_folder / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # an interrupted copy
    assert script.main([str(source), "--model", str(broken), "--output", str(tmp_path / "out.txt")]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert f"{broken / 'model.safetensors'}: truncated or corrupt safetensors weights" in err
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read any file")
def test_script_permission_denied(saved_folder, tmp_path, capsys):
    path = tmp_path / "secret.en"
    path.write_text("dog\n")
    path.chmod(0)
    assert _load_script().main([str(path), "--model", str(saved_folder)]) == 2
    assert f"input file {path} is not readable" in _one_error_line(capsys.readouterr().err)


def test_script_bad_options(saved_folder, capsys):
    # a bad option is one stderr line and exit status 2 (no usage text, no SystemExit)
    script = _load_script()
    assert script.main(["-", "--model", str(saved_folder), "--max_length_b", "none"]) == 2  # no limit at all
    assert "--max_length_b none turns the per-sentence limit off" in _one_error_line(capsys.readouterr().err)
    assert script.main(["-", "--model", str(saved_folder), "--dtype", "int4"]) == 2
    assert "argument --dtype: invalid choice: 'int4'" in _one_error_line(capsys.readouterr().err)
    assert script.main(["-", "--model", str(saved_folder), "--max_tokens", "0"]) == 2
    assert "argument --max_tokens: must be in [1, 1,000,000,000], got 0" in _one_error_line(capsys.readouterr().err)


def test_tool_help_and_entry_point():
    from vaswani_hf.cli import translate as cli

    help_text = cli.build_parser().format_help()
    assert help_text.startswith("usage: vaswani-translate") and "--overwrite" in help_text
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
