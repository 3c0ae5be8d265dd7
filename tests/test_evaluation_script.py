"""The evaluate tool (`vaswani_hf.cli.evaluate`) end to end, run through its thin wrapper
scripts/evaluate_translations.py as users run it (no trained model: a stand-in model where one must translate).
A scoring run and a translating run start the script in a fresh process; the refusals and the second scoring run call
what the script calls (`vaswani_commands.evaluate`) in this process, since each process costs seconds of CPU to import
torch and transformers and the fresh process's own guarantees are checked once, here and in
tests/test_cli_every_tool.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_evaluation import HYPOTHESES, REFERENCES, REFERENCES_2

from vaswani_hf.metrics.scores import compute_all

REPO = Path(__file__).resolve().parents[1]

# --- scripts/evaluate_translations.py (vaswani-evaluate), end to end ---------------------------------------------


def _run_script(args, tmp_path):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "evaluate_translations.py"), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _run_entry(args, tmp_path, monkeypatch, capsys) -> tuple[int, str, str]:
    """What the script runs (`vaswani_commands.evaluate(argv)`), in this process: (exit status, stdout, stderr).
    For the cases that check what the tool says, not the fresh process (that one is checked by the runs of
    `_run_script` here and for every script by tests/test_cli_every_tool.py): a process costs an import of torch and
    transformers."""
    from vaswani_commands import evaluate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(REPO / "scripts" / "evaluate_translations.py"), *args])
    capsys.readouterr()
    code = evaluate(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    """The tool's error: one line on stderr, `prog: error: ...`, no traceback."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert ": error: " in err and "Traceback" not in err, err
    return err


def test_script_name_does_not_shadow_the_evaluate_library():
    assert not (REPO / "scripts" / "evaluate.py").exists()
    assert (REPO / "scripts" / "evaluate_translations.py").is_file()


def test_tool_reads_text_as_io_does(tmp_path, monkeypatch, capsys):
    """Hypotheses and references go through vaswani_hf.io's reader: a BOM, CRLF and lone-CR line ends and a missing
    final newline give the same segments (and scores) as a plain file."""
    from vaswani_hf.cli import evaluate as cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hyp.de").write_bytes(("\ufeff" + "\r\n".join(HYPOTHESES)).encode("utf-8"))
    (tmp_path / "ref.de").write_bytes(("\r".join(REFERENCES) + "\r").encode("utf-8"))
    assert cli.main(["--hypotheses", "hyp.de", "--references", "ref.de", "--out", "scores.json"]) == 0
    capsys.readouterr()
    report = json.loads((tmp_path / "scores.json").read_text(encoding="utf-8"))
    expected = compute_all(HYPOTHESES, REFERENCES)
    assert report["meta"]["num_segments"] == 3
    for name in expected:
        assert report["scores"][name]["score"] == pytest.approx(expected[name]["score"])
    (tmp_path / "bad.de").write_bytes(b"ok\r\nStra\xdfe\nok\n")
    assert cli.main(["--hypotheses", "bad.de", "--references", "ref.de"]) == 2
    assert "bad.de:2: not valid UTF-8" in _one_error_line(capsys.readouterr().err)


def test_tool_refuses_to_overwrite_outputs(tmp_path, monkeypatch, capsys):
    """An existing --out (or --save_hypotheses) file is replaced only with --overwrite, and the check runs before
    anything is read or scored."""
    from vaswani_hf.cli import evaluate as cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hyp.de").write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    (tmp_path / "scores.json").write_text("old", encoding="utf-8")
    args = ["--hypotheses", "hyp.de", "--references", "ref.de", "--out", "scores.json"]
    assert cli.main(args) == 2
    assert "--out scores.json exists; pass --overwrite to replace it" in _one_error_line(capsys.readouterr().err)
    assert (tmp_path / "scores.json").read_text(encoding="utf-8") == "old"
    assert cli.main(args + ["--overwrite"]) == 0
    assert json.loads((tmp_path / "scores.json").read_text(encoding="utf-8"))["meta"]["num_segments"] == 3
    capsys.readouterr()
    (tmp_path / "hyp.txt").write_text("old", encoding="utf-8")
    assert (
        cli.main(["--model", "model", "--source", "hyp.de", "--references", "ref.de", "--save_hypotheses", "hyp.txt"])
        == 2
    )  # refused before the (absent) model is looked at
    assert "--save_hypotheses hyp.txt exists; pass --overwrite" in _one_error_line(capsys.readouterr().err)
    assert (
        cli.main(
            [
                "--model",
                "model",
                "--source",
                "hyp.de",
                "--references",
                "ref.de",
                "--out",
                "x.json",
                "--save_hypotheses",
                "x.json",
            ]
        )
        == 2
    )
    assert "--out x.json is --save_hypotheses x.json; give the outputs separate places" in _one_error_line(
        capsys.readouterr().err
    )
    assert cli.main(["--model", "model", "--source", "hyp.de", "--references", "ref.de", "--out", "new.json"]) == 2
    assert "--model not found: model" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "new.json").exists()


@pytest.mark.slow
def test_script_scores_hypotheses_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "hyp.de").write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    (tmp_path / "ref2.de").write_text("\n".join(REFERENCES_2) + "\n", encoding="utf-8")
    # a missing folder for --out is refused before any work, not created (vaswani_hf.io's output guard: one rule for
    # every tool)
    code, _, err = _run_entry(
        ["--hypotheses", "hyp.de", "--references", "ref.de", "--out", "out/scores.json"], tmp_path, monkeypatch, capsys
    )
    assert code == 2
    assert "--out out/scores.json: folder out does not exist; create it first" in _one_error_line(err)
    assert not (tmp_path / "out").exists()
    (tmp_path / "out").mkdir()
    result = _run_script(["--hypotheses", "hyp.de", "--references", "ref.de", "--out", "out/scores.json"], tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "scores.json").read_text(encoding="utf-8"))
    expected = compute_all(HYPOTHESES, REFERENCES)
    for name in expected:
        assert report["scores"][name]["score"] == pytest.approx(expected[name]["score"])
        assert report["scores"][name]["signature"] == expected[name]["signature"]
        assert name in result.stdout and expected[name]["signature"] in result.stdout
    assert report["meta"] == {"references": ["ref.de"], "hypotheses": "hyp.de", "num_segments": 3}

    code, _, err = _run_entry(
        ["--hypotheses", "hyp.de", "--references", "ref.de", "ref2.de", "--out", "m.json"],
        tmp_path,
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    scores = json.loads((tmp_path / "m.json").read_text(encoding="utf-8"))["scores"]
    assert scores["sacrebleu"]["signature"].startswith("nrefs:2|")


def test_script_errors_clearly(tmp_path, monkeypatch, capsys):
    (tmp_path / "hyp.de").write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    (tmp_path / "short.de").write_text("\n".join(REFERENCES[:2]) + "\n", encoding="utf-8")
    code, _, err = _run_entry(["--hypotheses", "hyp.de", "--references", "short.de"], tmp_path, monkeypatch, capsys)
    assert code == 2
    assert "hyp.de has 3 lines but short.de has 2 lines" in _one_error_line(err)

    code, _, err = _run_entry(["--hypotheses", "nope.de", "--references", "short.de"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "file not found: nope.de" in _one_error_line(err)

    code, _, err = _run_entry(["--references", "short.de"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "--hypotheses" in _one_error_line(err)


@pytest.mark.slow
def test_script_translates_with_a_stand_in_model(tmp_path):
    """The --model/--source path with a tiny random MarianMTModel (not our model, which is tested elsewhere)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from tokenizers.processors import TemplateProcessing
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate("a b c d e f g".split())}}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    backend.post_processor = TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    config = MarianConfig(
        vocab_size=len(vocab),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(
        num_beams=3, max_length=12, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0
    )
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "src.txt").write_text("a b c\n\nd e f g\nb\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("a b c\n\nd e f g\nb\n", encoding="utf-8")
    result = _run_script(
        [
            "--model",
            "model",
            "--source",
            "src.txt",
            "--references",
            "ref.txt",
            "--out",
            "s.json",
            "--save_hypotheses",
            "hyp.txt",
            "--batch_size",
            "2",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert report["meta"]["num_beams"] == 3  # from the model's generation_config
    hypotheses = (tmp_path / "hyp.txt").read_text(encoding="utf-8").split("\n")
    assert len(hypotheses) == 5 and hypotheses[1] == "" and hypotheses[4] == ""  # 4 lines, the empty one kept
    assert set(report["scores"]) == {"sacrebleu", "chrf", "bleu_tok_compound_split", "bleu_tok_none"}
