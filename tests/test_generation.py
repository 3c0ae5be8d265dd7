"""Decoding helpers: `vaswani_hf.generation.translate`, `scripts/translate.py` and the translation pipeline.

(GNMT scoring, cache and the per-sentence maximum length are tested in tests/test_generation_scoring.py.)

The model is tiny (d_model=32, 2+2 layers) and trained for a few seconds on a copy task, so that its translations
depend on the input (random weights translate everything to the same string, which could hide an order bug).
"""

import importlib.util
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.generation import (
    make_batches,
    save_pretrained_with_pipeline,
    translate,
    translation_pipeline,
)
from vaswani_hf.tokenization import train_bpe_tokenizer

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "translate.py"
WORDS = ("man dog woman child ball street red blue green big small runs jumps sits plays "
         "in on the a with near water park snow").split()


def _sentences(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7))) for _ in range(n)]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids oversubscription (10x slower when loaded)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SUBPROCESS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                  "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(_sentences(400, 0), vocab_size=300, show_progress=False)


@pytest.fixture(scope="module")
def model(tokenizer):
    """A tiny Transformer trained ~150 steps to copy its input (enough for input-dependent outputs)."""
    torch.manual_seed(0)
    config = VaswaniConfig(vocab_size=len(tokenizer), d_model=32, d_ff=64, num_heads=4, num_encoder_layers=2,
                           num_decoder_layers=2, dropout=0.0, label_smoothing=0.0)
    model = VaswaniForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    data = _sentences(2000, 1)
    model.train()
    for step in range(150):
        batch = data[(step * 32) % len(data):][:32]
        enc = tokenizer(batch, text_target=batch, padding=True, return_tensors="pt")
        labels = enc["labels"].masked_fill(enc["labels"] == tokenizer.pad_token_id, -100)
        loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def saved_folder(model, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("vaswani_model")
    save_pretrained_with_pipeline(model, tokenizer, folder)
    return folder


# Lines of varied lengths in a non-sorted order, with empty and whitespace-only lines and surrounding spaces.
LINES = ["a man runs in the park", "", "dog", "   ", "the big red ball near water with a child",
         "  woman sits  ", "\t", "snow", "blue green", "a small dog jumps on the street"]


def test_make_batches_budget_and_cover():
    lengths = [5, 1, 9, 3, 3, 7, 2, 30, 4]
    batches = make_batches(lengths, max_tokens=12)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [7]  # longer than the budget: alone, first
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 12
    assert all(len(b) <= 2 for b in make_batches(lengths, max_tokens=None, batch_size=2))


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


def _load_script():
    spec = importlib.util.spec_from_file_location("translate_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_keeps_order_and_line_count(model, tokenizer, saved_folder, tmp_path):
    source = tmp_path / "in.txt"
    # CRLF line ends and no final newline: still one output line per input line
    source.write_bytes("\r\n".join(LINES).encode("utf-8"))
    output = tmp_path / "out.txt"
    script = _load_script()
    assert script.main([str(source), "--model", str(saved_folder), "--output", str(output), "--num_beams", "1",
                        "--max_tokens", "30", "--no_progress"]) == 0
    got = output.read_text(encoding="utf-8").split("\n")
    assert got[-1] == ""  # ends with a newline
    assert got[:-1] == translate(model, tokenizer, LINES, num_beams=1, progress=False)


def test_script_stdin_to_stdout_subprocess(model, tokenizer, saved_folder):
    text = "\n".join(LINES) + "\n"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(saved_folder), "--device", "cpu"],
        input=text.encode("utf-8"), capture_output=True, timeout=120, env={**os.environ, **SUBPROCESS_ENV},
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode("utf-8").split("\n")
    assert len(lines) == len(LINES) + 1 and lines[-1] == ""
    assert lines[:-1] == translate(model, tokenizer, LINES, progress=False)  # the paper's defaults
    assert "translating" in result.stderr.decode()  # the progress bar goes to stderr


@pytest.mark.parametrize("case", ["missing", "directory", "not_utf8"])
def test_script_unreadable_input_errors_clearly(saved_folder, tmp_path, capsys, case):
    script = _load_script()
    if case == "missing":
        path, expected = tmp_path / "nope.en", "input file not found"
    elif case == "directory":
        path, expected = tmp_path, "is a directory"
    else:
        path = tmp_path / "latin1.en"
        path.write_bytes("fine\nstill fine\nGr\xfc\xdfe\n".encode("latin-1"))
        expected = "line 3 is not valid UTF-8"
    output = tmp_path / "out.txt"
    assert script.main([str(path), "--model", str(saved_folder), "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(path) in err
    assert "Traceback" not in err and not output.exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read any file")
def test_script_permission_denied(saved_folder, tmp_path, capsys):
    path = tmp_path / "secret.en"
    path.write_text("dog\n")
    path.chmod(0)
    assert _load_script().main([str(path), "--model", str(saved_folder)]) == 2
    assert "cannot read input file" in capsys.readouterr().err


def test_script_bad_options(saved_folder):
    script = _load_script()
    with pytest.raises(SystemExit):
        script.main(["-", "--model", str(saved_folder), "--max_length_b", "none"])  # no limit at all: refused
    with pytest.raises(SystemExit):
        script.main(["-", "--model", str(saved_folder), "--dtype", "int8"])


def test_translation_pipeline_helper(model, tokenizer):
    pipe = translation_pipeline(model, tokenizer, num_beams=1)
    expected = translate(model, tokenizer, ["dog", "", "a man runs"], num_beams=1, progress=False)
    assert [r["translation_text"] for r in pipe(["dog", "", "a man runs"], batch_size=2)] == expected
    assert pipe("dog") == [{"translation_text": expected[0]}]


def test_pipeline_from_saved_folder_without_the_package(model, tokenizer, saved_folder, tmp_path):
    """`pipeline("translation", model=folder, trust_remote_code=True)` in a fresh process that cannot import
    vaswani_hf: the remote-code pipeline, model (GNMT beam search included) and tokenizer reproduce translate()."""
    config = json.loads((saved_folder / "config.json").read_text())
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_vaswani.VaswaniTranslationPipeline"
    assert (saved_folder / "pipeline_vaswani.py").is_file()
    inputs = ["dog", "", "the big red ball near water with a child", "a man runs in the park"]
    code = textwrap.dedent(f"""
        import json, sys

        class BlockVaswani:
            def find_spec(self, name, path=None, target=None):
                if name == "vaswani_hf" or name.startswith("vaswani_hf."):
                    raise ImportError("vaswani_hf is blocked in this test")

        sys.meta_path.insert(0, BlockVaswani())
        try:
            import vaswani_hf
            raise SystemExit("vaswani_hf should not be importable here")
        except ImportError:
            pass
        from transformers import pipeline

        pipe = pipeline("translation", model={str(saved_folder)!r}, trust_remote_code=True, device="cpu")
        out = {{
            "beam": [r["translation_text"] for r in pipe({inputs!r}, batch_size=3)],
            "greedy": [r["translation_text"] for r in pipe({inputs!r}, num_beams=1)],
            "pipeline_module": type(pipe).__module__,
            "model_module": type(pipe.model).__module__,
            "leaked": sorted(m for m in sys.modules if m.startswith("vaswani_hf")),
        }}
        print("RESULT" + json.dumps(out))
    """)
    env = {**os.environ, **SUBPROCESS_ENV, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("RESULT", 1)[1])
    assert out["leaked"] == []
    assert out["pipeline_module"].startswith("transformers_modules.")
    assert out["model_module"].startswith("transformers_modules.")
    assert out["beam"] == translate(model, tokenizer, inputs, progress=False)
    assert out["greedy"] == translate(model, tokenizer, inputs, num_beams=1, progress=False)
