"""CTranslate2 export (issue 8): the exported network computes our function, and decoding reproduces `generate()`.

A tiny model is trained for a few seconds on a toy task (reverse a sequence of words) so that it produces
non-trivial, input-dependent outputs; a random model would emit one repeated token and hide decoding mismatches.
"""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="ctranslate2 is not installed (optional extra: pip install 'vaswani_hf[ct2]')"
)

from tokenizers import Tokenizer, models, pre_tokenizers, processors  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration  # noqa: E402
from vaswani_hf.convert import from_marian, to_ctranslate2, to_marian  # noqa: E402
from vaswani_hf.ctranslate2_backend import CTranslate2Translator, gnmt_length_penalty  # noqa: E402

WORDS = [f"w{i}" for i in range(24)]
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def make_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS[:20]) for _ in range(rng.randint(3, 9))]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = make_tokenizer()
    config = VaswaniConfig(vocab_size=len(SPECIALS) + len(WORDS), d_model=64, d_ff=128, num_heads=4,
                           num_encoder_layers=2, num_decoder_layers=2, dropout=0.0, label_smoothing=0.0,
                           sinusoid_layout="interleaved")
    model = VaswaniForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    train = toy_pairs(6000, seed=1)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is as fast, and far faster on a loaded machine
    for step in range(220):  # ~10 s of CPU
        batch = train[(step * 48) % len(train):][:48]
        inputs = tokenizer([s for s, _ in batch], padding=True, return_tensors="pt")
        labels = tokenizer([t for _, t in batch], padding=True, return_tensors="pt")["input_ids"]
        labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)
        loss = model(**inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    model.eval()
    root = tmp_path_factory.mktemp("ct2")
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    export = to_ctranslate2(model, root / "fp32", tokenizer=tokenizer)
    export_int8 = to_ctranslate2(model, root / "int8", quantization="int8", tokenizer=tokenizer)
    # CTranslate2 quantizes numpy views in place: the export must work on copies and leave the model untouched
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    test = [s for s, _ in toy_pairs(64, seed=2)]
    return dict(model=model, tokenizer=tokenizer, root=root, fp32=export, int8=export_int8, test=test,
                final_loss=float(loss.detach()))


def our_generate(model, tokenizer, sentences, **kwargs) -> list[str]:
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, **kwargs)
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def our_token_log_probs(model, tokenizer, source: str, target: str) -> np.ndarray:
    """log p(y_t | y_<t, x) of every target token, </s> included, from our model."""
    inputs = tokenizer([source], return_tensors="pt")
    labels = tokenizer([target], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        log_probs = model(**inputs, labels=labels).logits.float().log_softmax(-1)[0]
    return log_probs.gather(-1, labels[0][:, None])[:, 0].numpy()


def ct2_token_log_probs(translator: CTranslate2Translator, sources, targets) -> list[np.ndarray]:
    source_tokens = translator.encode(sources)
    target_tokens = [t[:-1] for t in translator.encode(targets)]  # CTranslate2 adds the start token and </s> itself
    results = translator.translator.score_batch(source_tokens, target_tokens, max_input_length=0)
    return [np.asarray(r.log_probs) for r in results]


def test_model_learned_the_toy_task(trained):
    """Guards the other tests: the outputs must be non-trivial."""
    outputs = our_generate(trained["model"], trained["tokenizer"], trained["test"], num_beams=1)
    correct = sum(out == " ".join(reversed(src.split())) for src, out in zip(trained["test"], outputs))
    assert correct >= 0.5 * len(outputs), (trained["final_loss"], outputs[:5])
    assert len(set(outputs)) > 0.8 * len(outputs)


def test_export_keeps_vocabulary_and_special_tokens(trained):
    folder = trained["fp32"]
    vocabulary = json.loads((folder / "shared_vocabulary.json").read_text())
    assert vocabulary == SPECIALS + WORDS  # our ids, <pad> first, nothing removed or moved
    config = json.loads((folder / "config.json").read_text())
    assert config["decoder_start_token"] == "<pad>"
    assert (config["eos_token"], config["bos_token"], config["unk_token"]) == ("</s>", "<s>", "<unk>")
    assert config["add_source_eos"] is False and config["add_source_bos"] is False
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    assert (folder / "tokenizer.json").is_file()
    metadata = json.loads((folder / "vaswani_ctranslate2.json").read_text())
    assert metadata["max_positions"] >= 1024 and metadata["sinusoid_layout"] == "interleaved"


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_both_sinusoid_layouts_export_exactly(trained, layout):
    """Per-token log-probabilities from CTranslate2's scorer equal our model's log-softmax (1e-4)."""
    model = trained["model"]
    if layout == "concatenated":  # the same function with the model dimension permuted
        model = from_marian(to_marian(model), sinusoid_layout="concatenated").eval()
        assert model.config.sinusoid_layout == "concatenated"
    folder = to_ctranslate2(model, trained["root"] / f"layout_{layout}", tokenizer=trained["tokenizer"], force=True)
    translator = CTranslate2Translator(folder)
    sources = trained["test"][:16]
    targets = [" ".join(reversed(s.split())) for s in sources]
    targets[::3] = [" ".join(s.split()[:2]) for s in sources[::3]]  # also off-distribution targets
    ct2 = ct2_token_log_probs(translator, sources, targets)
    worst = 0.0
    for source, target, theirs in zip(sources, targets, ct2):
        ours = our_token_log_probs(model, trained["tokenizer"], source, target)
        assert ours.shape == theirs.shape
        worst = max(worst, float(np.abs(ours - theirs).max()))
    assert worst < 1e-4, worst


def test_full_distributions_match_along_greedy_path(trained):
    """All V logits at every greedy step (not only the chosen token's) agree with our model's."""
    model, tokenizer = trained["model"], trained["tokenizer"]
    translator = CTranslate2Translator(trained["fp32"])
    sources = trained["test"][:4]
    results = translator.translator.translate_batch(
        translator.encode(sources), beam_size=1, max_decoding_length=20, min_decoding_length=0,
        return_logits_vocab=True, return_end_token=True, max_input_length=0,
    )
    for source, result in zip(sources, results):
        theirs = np.stack([np.asarray(step) for step in result.logits[0]])  # (T, V)
        ids = [tokenizer.convert_tokens_to_ids(t) for t in result.hypotheses[0]]
        decoder_input = torch.tensor([[model.config.decoder_start_token_id] + ids[:-1]])
        with torch.no_grad():
            ours = model(**tokenizer([source], return_tensors="pt"), decoder_input_ids=decoder_input).logits[0]
        np.testing.assert_allclose(theirs, ours.numpy(), atol=1e-4, rtol=0)


def test_greedy_translations_identical(trained):
    model, tokenizer = trained["model"], trained["tokenizer"]
    ours = our_generate(model, tokenizer, trained["test"], num_beams=1)
    theirs = CTranslate2Translator(trained["fp32"]).translate(trained["test"], num_beams=1, batch_size=16)
    assert theirs == ours


def agreement(a, b) -> float:
    return float(np.mean([x == y for x, y in zip(a, b)]))


@pytest.mark.parametrize("penalty_type", ["hf", "gnmt"])
def test_beam4_same_as_generate_with_early_stopping(trained, penalty_type):
    """Same candidate set as transformers' early_stopping=True, re-ranked with our formula: same translations."""
    model, tokenizer = trained["model"], trained["tokenizer"]
    ours = our_generate(model, tokenizer, trained["test"], num_beams=4, length_penalty=0.6,
                        length_penalty_type=penalty_type, early_stopping=True)
    theirs = CTranslate2Translator(trained["fp32"]).translate(
        trained["test"], num_beams=4, length_penalty=0.6, length_penalty_type=penalty_type)
    assert agreement(ours, theirs) >= 0.95, [(a, b) for a, b in zip(ours, theirs) if a != b]


def test_beam4_paper_defaults_near_identical(trained):
    """Our default search (GNMT, early_stopping="never") may outlast CTranslate2's; near-identical outputs."""
    model, tokenizer = trained["model"], trained["tokenizer"]
    ours = our_generate(model, tokenizer, trained["test"])  # generation_config: beam 4, GNMT 0.6, input + 50
    theirs = CTranslate2Translator(trained["fp32"]).translate(trained["test"])  # same defaults from the export
    assert agreement(ours, theirs) >= 0.9
    assert gnmt_length_penalty(1, 0.6) == pytest.approx(1.0) and gnmt_length_penalty(7, 0.0) == 1.0


@pytest.mark.parametrize("num_beams", [1, 4])
def test_per_sentence_max_length_rule(trained, num_beams):
    """floor(a * source_length + b) tokens per sentence (</s> forced last), batched, as our generate() does."""
    model, tokenizer = trained["model"], trained["tokenizer"]
    sentences = trained["test"][:16]
    options = dict(num_beams=num_beams, max_length_a=0.5, max_length_b=1)
    ours = our_generate(model, tokenizer, sentences, early_stopping=True, **options)
    theirs = CTranslate2Translator(trained["fp32"]).translate(sentences, **options)
    lengths = [len(tokenizer(s)["input_ids"]) for s in sentences]
    assert all(len(t.split()) <= int(0.5 * n + 1) - 1 for t, n in zip(theirs, lengths))
    assert any(len(t.split()) == int(0.5 * n + 1) - 1 for t, n in zip(theirs, lengths))  # the limit did bind
    assert agreement(ours, theirs) >= (1.0 if num_beams == 1 else 0.9)


def test_empty_lines_rule(trained):
    out = CTranslate2Translator(trained["fp32"]).translate(["", "  ", " w1 w2 w3 "], num_beams=1)
    assert out[:2] == ["", ""] and out[2] == our_generate(trained["model"], trained["tokenizer"], ["w1 w2 w3"],
                                                            num_beams=1)[0]


def test_int8_close_to_float32(trained):
    fp32 = CTranslate2Translator(trained["fp32"]).translate(trained["test"], return_tokens=True)
    int8 = CTranslate2Translator(trained["int8"]).translate(trained["test"], return_tokens=True)
    sentence_agreement = np.mean([a == b for a, b in zip(fp32, int8)])
    same = sum(x == y for a, b in zip(fp32, int8) for x, y in zip(a, b))
    token_agreement = same / max(sum(max(len(a), len(b)) for a, b in zip(fp32, int8)), 1)
    print(f"int8 vs float32: sentence agreement {sentence_agreement:.3f}, token agreement {token_agreement:.3f}")
    assert sentence_agreement >= 0.9 and token_agreement >= 0.95


def test_source_longer_than_position_table_is_an_error(trained):
    folder = to_ctranslate2(trained["model"], trained["root"] / "short", tokenizer=trained["tokenizer"],
                            max_positions=8, force=True)
    with pytest.raises(ValueError, match="position"):
        CTranslate2Translator(folder).translate(["w1 " * 12], num_beams=1)


def test_existing_output_folder_needs_force(trained):
    with pytest.raises(FileExistsError):
        to_ctranslate2(trained["model"], trained["fp32"], tokenizer=trained["tokenizer"])


def test_translate_script_ctranslate2_engine_matches_pytorch_engine(trained, tmp_path):
    """scripts/translate.py --engine ctranslate2 on an exported folder: same lines, same order, greedy == ours."""
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("translate_script", repo / "scripts" / "translate.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    lines = trained["test"][:10]
    lines.insert(3, "")
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = script.main([str(tmp_path / "in.txt"), "--model", str(trained["fp32"]), "--engine", "ctranslate2",
                        "--num_beams", "1", "--output", str(tmp_path / "out.txt"), "--no_progress"])
    assert code in (0, None)
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1]
    expected = our_generate(trained["model"], trained["tokenizer"], [line for line in lines if line], num_beams=1)
    assert out[3] == "" and [line for i, line in enumerate(out) if i != 3] == expected
