"""Tests of vaswani_hf.metrics.scores and its evaluate metric modules (no trained model); the evaluate tool end to end:
tests/test_evaluation_script.py."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from sacrebleu.metrics import BLEU, CHRF

from vaswani_hf.io import UsageError
from vaswani_hf.metrics.scores import (
    METRIC_NAMES,
    METRICS_DIR,
    check_line_counts,
    compute_all,
    format_table,
    load_metric,
    make_compute_metrics,
)
from vaswani_hf.metrics.tok_bleu.tok_bleu import moses_tokenize, split_compounds
from vaswani_hf.translation.inference import translate

REPO = Path(__file__).resolve().parents[1]

HYPOTHESES = [
    "Das ist ein rich-text Dokument.",
    'Der Mann, der "Hallo" sagt, ist 3-4 Jahre alt.',
    "Eine Frau geht über die Straße.",
]
REFERENCES = [
    "Das ist ein rich-text Format.",
    'Der Mann, der "Hallo" sagte, ist drei Jahre alt.',
    "Eine Frau überquert die Straße.",
]
REFERENCES_2 = [
    "Dies ist ein rich-text Dokument.",
    'Ein Mann sagt "Hallo", er ist 3-4 Jahre alt.',
    "Eine Frau läuft über die Straße.",
]


# --- paper-style tokenized BLEU (t2t get_ende_bleu.sh): worked examples ---------------------------------------


def test_split_compounds_is_the_t2t_regex():
    # perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g': matches don't overlap, so in "a-b-c" only the first
    # hyphen is split; a hyphen with a space on either side is left alone.
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("a-b-c x -y z- 3-4") == "a ##AT##-##AT## b-c x -y z- 3 ##AT##-##AT## 4"
    assert split_compounds("Baden-Württemberg") == "Baden ##AT##-##AT## Württemberg"


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl not installed")
def test_split_compounds_matches_perl():
    text = "a-b-c x -y z- rich-text 3-4 --a a--b &-x Baden-Württemberg über-alles\n"
    perl = subprocess.run(
        ["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"],
        input=text.encode("utf-8"),
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")
    assert split_compounds(text.rstrip("\n")) == perl.rstrip("\n")


def test_moses_tokenization_is_tokenizer_perl_style():
    # tokenizer.perl -l de: punctuation split off, hyphenated words kept (no -a), XML escaping of & and ".
    assert moses_tokenize(['Das ist ein "rich-text" Format, z.B. 3.000 Euro & mehr.']) == [
        "Das ist ein &quot; rich-text &quot; Format , z.B. 3.000 Euro &amp; mehr ."
    ]
    # replace-unicode-punctuation.perl runs first (t2t's get_ende_bleu.sh): "…" -> "..."
    assert moses_tokenize(["Na ja…"]) == ["Na ja ..."]


def test_tok_bleu_worked_example_compound_split_changes_score():
    hyp, ref = ["Das ist ein rich-text Dokument."], ["Das ist ein rich-text Format."]
    metric = load_metric("tok_bleu")

    # Moses tokenization: hyp "Das ist ein rich-text Dokument ."  ref "Das ist ein rich-text Format ."
    # Without compound splitting (6 tokens each, BP = 1):
    #   1-grams 5/6 (all but "Dokument"); 2-grams 3/5 (Das ist, ist ein, ein rich-text);
    #   3-grams 2/4 (Das ist ein, ist ein rich-text); 4-grams 1/3 (Das ist ein rich-text)
    #   BLEU = (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = (1/12) ** 0.25 = 0.53728
    plain = metric.compute(predictions=hyp, references=ref, split_compounds=False)
    assert plain["counts"] == [5, 3, 2, 1] and plain["totals"] == [6, 5, 4, 3]
    assert plain["bp"] == 1.0
    assert plain["score"] == pytest.approx(100 * (1 / 12) ** 0.25)
    assert round(plain["score"], 2) == 53.73

    # With compound splitting: "Das ist ein rich ##AT##-##AT## text Dokument ." (8 tokens each, BP = 1):
    #   1-grams 7/8; 2-grams 5/7 (Das ist, ist ein, ein rich, rich ##AT##-##AT##, ##AT##-##AT## text);
    #   3-grams 4/6; 4-grams 3/5
    #   BLEU = (7/8 * 5/7 * 4/6 * 3/5) ** (1/4) = (1/4) ** 0.25 = 0.70711
    # The split turns one matched token into three matched ones, so the score goes up (53.73 -> 70.71).
    split = metric.compute(predictions=hyp, references=ref)
    assert split["counts"] == [7, 5, 4, 3] and split["totals"] == [8, 7, 6, 5]
    assert split["score"] == pytest.approx(100 * 0.25**0.25)
    assert round(split["score"], 2) == 70.71
    assert split["score"] > plain["score"]
    assert split["signature"].startswith("pretok:moses-tok(de,sacremoses-")
    assert "atat-compound-split" in split["signature"] and "tok:none|smooth:none" in split["signature"]


def test_tok_bleu_worked_example_brevity_penalty_and_corpus():
    metric = load_metric("tok_bleu")
    # A short hypothesis: "Das ist ein rich ##AT##-##AT## text" (6 tokens) against the 8-token reference above.
    # All n-grams match (6/6, 5/5, 4/4, 3/3), so BLEU = BP = exp(1 - 8/6) = exp(-1/3) = 0.71653.
    short = metric.compute(predictions=["Das ist ein rich-text"], references=["Das ist ein rich-text Format."])
    assert short["precisions"] == [100.0] * 4
    assert short["score"] == pytest.approx(100 * math.exp(1 - 8 / 6))
    # Corpus BLEU of both sentences sums the counts (not the sentence scores):
    #   (7+6)/(8+6), (5+5)/(7+5), (4+4)/(6+4), (3+3)/(5+3); hyp length 14, ref length 16
    #   BLEU = exp(1 - 16/14) * (13/14 * 10/12 * 8/10 * 6/8) ** (1/4) = 0.86688 * 0.82548 = 0.71557
    corpus = metric.compute(
        predictions=["Das ist ein rich-text Dokument.", "Das ist ein rich-text"],
        references=["Das ist ein rich-text Format.", "Das ist ein rich-text Format."],
    )
    expected = math.exp(1 - 16 / 14) * (13 / 14 * 10 / 12 * 8 / 10 * 6 / 8) ** 0.25
    assert corpus["score"] == pytest.approx(100 * expected)
    assert (corpus["sys_len"], corpus["ref_len"]) == (14, 16)


def test_tok_bleu_is_multi_bleu_unsmoothed_and_case_sensitive():
    metric = load_metric("tok_bleu")
    # no 4-gram in common: multi-bleu.perl gives 0 (no smoothing)
    assert metric.compute(predictions=["a b c"], references=["a b c"])["score"] == 0.0
    cased = metric.compute(predictions=["Das ist gut ja"], references=["das ist gut ja"])
    assert cased["counts"][0] == 3
    lower = metric.compute(predictions=["Das ist gut ja"], references=["das ist gut ja"], lowercase=True)
    assert lower["score"] == pytest.approx(100.0)


def test_tok_bleu_pretokenized_references():
    # t2t's reference file was already Moses-tokenized: don't tokenize (and escape) it a second time.
    metric = load_metric("tok_bleu")
    result = metric.compute(
        predictions=['Er sagt "ja" & geht.'],
        references=["Er sagt &quot; ja &quot; &amp; geht ."],
        tokenize_references=False,
    )
    assert result["score"] == pytest.approx(100.0)
    assert "[hyp-only]" in result["signature"]


# --- sacreBLEU and chrF through our modules equal the sacrebleu package -----------------------------------------


@pytest.mark.parametrize("tokenize,lowercase", [("13a", False), ("intl", True), ("none", False)])
def test_sacrebleu_module_equals_sacrebleu(tokenize, lowercase):
    direct = BLEU(tokenize=tokenize, lowercase=lowercase)
    expected = direct.corpus_score(HYPOTHESES, [REFERENCES])
    ours = load_metric("sacrebleu_local").compute(
        predictions=HYPOTHESES, references=REFERENCES, tokenize=tokenize, lowercase=lowercase
    )
    assert ours["score"] == pytest.approx(expected.score, abs=1e-12)
    assert ours["signature"] == str(direct.get_signature())
    assert ours["counts"] == expected.counts and ours["totals"] == expected.totals
    assert ours["score"] == pytest.approx(
        sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize=tokenize, lowercase=lowercase).score, abs=1e-12
    )


def test_sacrebleu_and_chrf_multi_reference():
    per_segment = [list(refs) for refs in zip(REFERENCES, REFERENCES_2)]
    bleu = BLEU()
    chrf = CHRF()
    expected_bleu = bleu.corpus_score(HYPOTHESES, [REFERENCES, REFERENCES_2])
    expected_chrf = chrf.corpus_score(HYPOTHESES, [REFERENCES, REFERENCES_2])
    ours_bleu = load_metric("sacrebleu_local").compute(predictions=HYPOTHESES, references=per_segment)
    ours_chrf = load_metric("chrf_local").compute(predictions=HYPOTHESES, references=per_segment)
    assert ours_bleu["score"] == pytest.approx(expected_bleu.score, abs=1e-12)
    assert ours_bleu["signature"] == str(bleu.get_signature()) and ours_bleu["signature"].startswith("nrefs:2|")
    assert ours_chrf["score"] == pytest.approx(expected_chrf.score, abs=1e-12)
    assert ours_chrf["signature"] == str(chrf.get_signature())
    # compute_all takes sacreBLEU's layout (a list of reference streams)
    scores = compute_all(HYPOTHESES, [REFERENCES, REFERENCES_2])
    assert scores["sacrebleu"]["score"] == pytest.approx(expected_bleu.score, abs=1e-12)


@pytest.mark.parametrize("word_order", [0, 2])
def test_chrf_module_equals_sacrebleu(word_order):
    direct = CHRF(word_order=word_order)
    expected = direct.corpus_score(HYPOTHESES, [REFERENCES])
    ours = load_metric("chrf_local").compute(predictions=HYPOTHESES, references=REFERENCES, word_order=word_order)
    assert ours["score"] == pytest.approx(expected.score, abs=1e-12)
    assert ours["signature"] == str(direct.get_signature())
    assert ours["score"] == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES], word_order=word_order).score, abs=1e-12
    )


def test_compute_all_and_table():
    scores = compute_all(HYPOTHESES, REFERENCES)
    assert list(scores) == ["sacrebleu", "chrf", "bleu_tok_compound_split", "bleu_tok_none"]
    assert scores["sacrebleu"]["score"] == pytest.approx(BLEU().corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert scores["chrf"]["score"] == pytest.approx(CHRF().corpus_score(HYPOTHESES, [REFERENCES]).score)
    tok_none = BLEU(tokenize="none")
    assert scores["bleu_tok_none"]["score"] == pytest.approx(tok_none.corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert scores["bleu_tok_none"]["signature"] == str(tok_none.get_signature())
    assert "tok:none" in scores["bleu_tok_none"]["signature"]
    assert "atat-compound-split" in scores["bleu_tok_compound_split"]["signature"]
    for result in scores.values():
        assert result["description"] and result["signature"] and 0 <= result["score"] <= 100
    json.dumps(scores)  # serialisable as it is
    table = format_table(scores)
    for name, result in scores.items():
        assert name in table and f"{result['score']:.2f}" in table and result["signature"] in table


def test_line_count_mismatch_errors_clearly():
    # a UsageError (still a ValueError): the tools report it in one line with exit status 2
    with pytest.raises(UsageError, match=r"hypotheses has 3 lines but references\[0\] has 2 lines"):
        compute_all(HYPOTHESES, REFERENCES[:2])
    with pytest.raises(UsageError, match=r"hyp\.de has 3 lines but ref\.de has 2 lines"):
        check_line_counts(("hyp.de", HYPOTHESES), [("ref.de", REFERENCES[:2])])
    assert issubclass(UsageError, ValueError)
    check_line_counts(("hyp.de", HYPOTHESES), [("ref.de", REFERENCES), ("ref2.de", REFERENCES_2)])  # equal: fine


# --- evaluate.load by path, offline -------------------------------------------------------------------------------


def test_metric_dirs_follow_evaluates_naming_rule():
    for name in METRIC_NAMES:
        assert (METRICS_DIR / name / f"{name}.py").is_file()
    with pytest.raises(ValueError, match="available"):
        load_metric("sacrebleu")


@pytest.mark.slow
def test_evaluate_load_by_path_offline(tmp_path):
    code = f"""
import json, evaluate
from vaswani_hf.metrics.scores import load_metric, METRICS_DIR
out = {{}}
for name in ("sacrebleu_local", "chrf_local", "tok_bleu"):
    metric = evaluate.load(str(METRICS_DIR / name))  # plain evaluate.load of the folder, cache files on disk
    out[name] = metric.compute(predictions={HYPOTHESES!r}, references={REFERENCES!r})["score"]
    assert load_metric(name).compute(predictions={HYPOTHESES!r}, references={REFERENCES!r})["score"] == out[name]
print(json.dumps(out))
"""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf_home"),  # empty caches: nothing can come from a previous download
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert scores["sacrebleu_local"] == pytest.approx(BLEU().corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert scores["chrf_local"] == pytest.approx(CHRF().corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert scores["tok_bleu"] > 0


# --- compute_metrics for Seq2SeqTrainer and the translation seam, with a tiny word-level tokenizer -------------


@pytest.fixture
def word_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for line in HYPOTHESES + REFERENCES for w in line.split()})
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def test_make_compute_metrics(word_tokenizer):
    from transformers import EvalPrediction

    def ids(lines, fill):
        encoded = [word_tokenizer(line)["input_ids"] + [word_tokenizer.eos_token_id] for line in lines]
        width = max(map(len, encoded)) + 2
        return np.array([row + [fill] * (width - len(row)) for row in encoded])

    predictions = np.concatenate([np.zeros((3, 1), dtype=int), ids(HYPOTHESES, 0)], axis=1)  # start token = pad
    labels = ids(REFERENCES, -100)
    compute_metrics = make_compute_metrics(word_tokenizer)
    assert compute_metrics.signatures == {}  # nothing computed yet
    metrics = compute_metrics(EvalPrediction(predictions=(predictions,), label_ids=labels))
    assert set(metrics) == {"bleu", "chrf", "gen_len"}
    assert metrics["bleu"] == pytest.approx(BLEU().corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert metrics["chrf"] == pytest.approx(CHRF().corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert metrics["gen_len"] == pytest.approx(np.mean([len(h.split()) + 1 for h in HYPOTHESES]))
    # the Trainer keeps numbers only; the signatures of the last computation stay on the callable
    bleu, chrf = BLEU(), CHRF()
    bleu.corpus_score(HYPOTHESES, [REFERENCES])
    chrf.corpus_score(HYPOTHESES, [REFERENCES])
    assert compute_metrics.signatures == {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())}
    # -100 in the predictions (padding of gathered generations) is read as padding too
    padded = np.where(predictions == 0, -100, predictions)
    assert compute_metrics(EvalPrediction(predictions=padded, label_ids=labels)) == metrics
    tokenized = make_compute_metrics(word_tokenizer, tokenize="none")
    assert tokenized(EvalPrediction(predictions=predictions, label_ids=labels))["bleu"] == pytest.approx(
        BLEU(tokenize="none").corpus_score(HYPOTHESES, [REFERENCES]).score
    )
    assert "tok:none" in tokenized.signatures["bleu"]


class _EchoModel(torch.nn.Module):
    """Stand-in for a seq2seq model: generate() returns its input (with a start token), records its kwargs."""

    def __init__(self):
        from transformers import GenerationConfig

        super().__init__()
        self.calls = []
        self.device = torch.device("cpu")
        self.generation_config = GenerationConfig(num_beams=1)

    def generate(self, input_ids, attention_mask, **kwargs):
        self.calls.append({"batch": len(input_ids), **kwargs})
        start = torch.zeros((len(input_ids), 1), dtype=input_ids.dtype)
        return torch.cat([start, input_ids * attention_mask], dim=1)


def test_translate_for_scoring_keeps_order_and_empty_lines(word_tokenizer):
    lines = [HYPOTHESES[0], "", REFERENCES[1], "   ", HYPOTHESES[2]]
    model = _EchoModel()
    out = translate(model, word_tokenizer, lines, batch_size=2, num_beams=4, device="cpu")
    assert out == [HYPOTHESES[0], "", REFERENCES[1], "", HYPOTHESES[2]]
    batches = [call["batch"] for call in model.calls]
    assert sum(batches) == 3 and max(batches) <= 2  # empty lines never reach the model; batch_size respected
    assert all(call["num_beams"] == 4 for call in model.calls)
