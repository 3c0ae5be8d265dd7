"""Marian export (vaswani_hf.export.marian): the exact conversion both ways (an independent implementation of the same
architecture to check ours against), the native MarianMTModel folder, and vaswani-export-marian's refusals."""

import json

import pytest
import torch
from cli_helpers import assert_one_line_error, break_model_folder
from conftest import padded_batch, randomize_norms_and_biases, tiny_config
from decoding_checks import assert_same_generations_or_near_ties, assert_same_or_near_tie
from hub_helpers import DECODER_INPUT_IDS, SOURCES, copy_folder
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, MarianMTModel

from vaswani_hf import VaswaniForConditionalGeneration, hub
from vaswani_hf.cli import export_marian as cli
from vaswani_hf.export.marian import from_marian, interleaved_to_concatenated, to_marian
from vaswani_hf.modeling_vaswani import shift_tokens_right, sinusoid_table
from vaswani_hf.tokenization import train_bpe_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_two_layouts_differ_by_the_permutation():
    perm = interleaved_to_concatenated(16)
    interleaved, concatenated = sinusoid_table(30, 16, "interleaved"), sinusoid_table(30, 16, "concatenated")
    assert torch.equal(concatenated[:, perm], interleaved)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.parametrize("tied", [True, False])
def test_marian_with_identical_weights_gives_the_same_logits(layout, attention_bias, tied):
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        tiny_config(sinusoid_layout=layout, attention_bias=attention_bias, tie_word_embeddings=tied)
    )
    model = randomize_norms_and_biases(model).eval()
    marian = to_marian(model)
    assert isinstance(marian, MarianMTModel) and not marian.training
    ids, mask = padded_batch([9, 4, 6])
    labels, label_mask = padded_batch([5, 7, 2], seed=3)
    dec = shift_tokens_right(labels.masked_fill(label_mask == 0, -100), 0, 0)
    dec_mask = torch.cat([torch.ones_like(label_mask[:, :1]), label_mask[:, :-1]], dim=1)
    kwargs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask)
    ours, theirs = model(**kwargs).logits, marian(**kwargs).logits
    valid = dec_mask.bool()
    assert (ours[valid] - theirs[valid]).abs().max() <= 1e-4

    back = from_marian(marian, sinusoid_layout=layout)
    assert back.config.attention_bias == attention_bias and back.config.tie_word_embeddings == tied
    original, restored = model.state_dict(), back.state_dict()
    assert original.keys() == restored.keys()
    assert all(torch.equal(original[k], restored[k]) for k in original)  # exact round trip


def test_marian_greedy_generation_agrees(tmp_path):
    torch.manual_seed(1)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config())).eval()
    marian = to_marian(model)
    ids, mask = padded_batch([7, 3, 5])
    ours = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_new_tokens=12, max_length_b=None)
    theirs = marian.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_new_tokens=12)
    assert_same_generations_or_near_ties(model, ids, mask, ours, theirs)  # identical up to rounding-order ties


def test_unsupported_settings_are_refused_clearly():
    with pytest.raises(ValueError, match="learned"):
        to_marian(VaswaniForConditionalGeneration(tiny_config(position_encoding="learned")))
    with pytest.raises(ValueError, match="d_k = d_v = d_model / num_heads"):
        to_marian(VaswaniForConditionalGeneration(tiny_config(d_k=4)))
    marian = to_marian(VaswaniForConditionalGeneration(tiny_config()))
    with torch.no_grad():
        marian.final_logits_bias.fill_(0.5)
    with pytest.raises(ValueError, match="final_logits_bias"):
        from_marian(marian)


# ----------------------------------------------------------------------------------------------------------------------
# the native MarianMTModel folder
# ----------------------------------------------------------------------------------------------------------------------


def test_marian_export_loads_natively_and_matches(tiny, tmp_path):
    out = tmp_path / "marian"
    argv = ["--model_dir", str(tiny["folder"]), "--out", str(out), "--repo_id", "org/vaswani-base-marian"]
    assert cli.main(argv) == 0
    marian = MarianMTModel.from_pretrained(out).eval()
    assert type(marian) is MarianMTModel and marian.config.model_type == "marian"
    tokenizer = AutoTokenizer.from_pretrained(out)  # our tokenizer.json, not Marian's SentencePiece tokenizer
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    # Marian's token order: <pad> last, every other token one id down (weights and tokenizer relabelled together)
    V = marian.config.vocab_size
    new_of_old = torch.tensor([(i - 1) % V for i in range(V)])
    assert tokenizer.convert_ids_to_tokens(V - 1) == "<pad>" == tiny["tokenizer"].convert_ids_to_tokens(0)
    assert tokenizer.get_vocab() == {token: (i - 1) % V for token, i in tiny["tokenizer"].get_vocab().items()}
    config = marian.config
    assert (config.pad_token_id, config.decoder_start_token_id, config.bos_token_id, config.eos_token_id) == (
        V - 1,
        V - 1,
        0,
        1,
    )
    assert marian.generation_config.decoder_start_token_id == V - 1 and marian.generation_config.eos_token_id == 1
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    ours_batch = tiny["tokenizer"](SOURCES, return_tensors="pt", padding=True)
    assert torch.equal(batch["input_ids"], new_of_old[ours_batch["input_ids"]])
    with torch.no_grad():
        logits = marian(**batch, decoder_input_ids=new_of_old[torch.tensor(DECODER_INPUT_IDS)]).logits
        # the same function: Marian's logits are ours with the vocabulary axis relabelled. Marian reloads its
        # LayerNorms with eps 1e-5 (ours 1e-6): differences ~1e-5
        torch.testing.assert_close(logits[..., new_of_old], tiny["logits"], atol=1e-4, rtol=1e-4)
        greedy_marian = marian.generate(**batch, num_beams=1, max_new_tokens=12)
        greedy_ours = tiny["model"].generate(**ours_batch, num_beams=1, max_new_tokens=12, max_length_b=None)
    old_of_new = torch.argsort(new_of_old)
    assert_same_generations_or_near_ties(
        tiny["model"], ours_batch["input_ids"], ours_batch["attention_mask"], greedy_ours, old_of_new[greedy_marian]
    )
    card = ModelCard((out / "README.md").read_text(encoding="utf-8"))
    assert card.data.pipeline_tag == "translation" and card.data.library_name == "transformers"
    assert "marian" in card.data.tags and "custom_code" not in card.data.tags
    # scores were measured with GNMT-penalty decoding, which built-in generate lacks: body only, no model-index
    assert card.data.eval_results is None and "| sacreBLEU | 12.35 |" in card.text
    assert f"| Parameters | {hub.count_parameters(tiny['model']):,} |" in card.text
    assert 'MarianMTModel.from_pretrained("org/vaswani-base-marian")' in card.text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written beside, renamed into place


def test_an_untied_model_exports_with_its_three_matrices(tiny, tmp_path):
    """`tie_word_embeddings=False` (separate encoder, decoder and output embeddings) is MarianMTModel's
    `share_encoder_decoder_embeddings=False`: the export reloads untied and gives the same logits (the relabelling
    once failed on the untied model's missing `shared` matrix, exit 1)."""
    torch.manual_seed(2)
    config = tiny["model"].config.to_dict()
    config.update(tie_word_embeddings=False)
    model = VaswaniForConditionalGeneration(type(tiny["model"].config).from_dict(config)).eval()
    folder = tmp_path / "untied"
    model.save_pretrained(folder)
    tiny["tokenizer"].save_pretrained(folder)
    out = tmp_path / "marian"
    assert cli.main(["--model_dir", str(folder), "--out", str(out)]) == 0
    marian = MarianMTModel.from_pretrained(out).eval()
    assert not marian.config.share_encoder_decoder_embeddings and not marian.config.tie_word_embeddings
    embeddings = (
        marian.model.encoder.embed_tokens.weight,
        marian.model.decoder.embed_tokens.weight,
        marian.lm_head.weight,
    )
    assert len({w.data_ptr() for w in embeddings}) == 3 and not torch.equal(embeddings[1], embeddings[2])
    V = marian.config.vocab_size
    new_of_old = torch.tensor([(i - 1) % V for i in range(V)])
    batch = tiny["tokenizer"](SOURCES, return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor(DECODER_INPUT_IDS)
    with torch.no_grad():
        ours = model(**batch, decoder_input_ids=decoder_input_ids).logits
        theirs = marian(
            input_ids=new_of_old[batch["input_ids"]],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=new_of_old[decoder_input_ids],
        ).logits
    torch.testing.assert_close(theirs[..., new_of_old], ours, atol=1e-4, rtol=1e-4)  # Marian reloads eps 1e-5


def test_marian_export_without_card_inputs_and_with_languages(tiny, tmp_path, capsys):
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    (folder / "metrics.json").unlink()
    assert cli.main(["--model_dir", str(folder), "--out", str(tmp_path / "bare")]) == 0
    assert not (tmp_path / "bare" / "README.md").exists() and "without card" in capsys.readouterr().out
    assert (
        cli.main(
            [
                "--model_dir",
                str(folder),
                "--out",
                str(tmp_path / "carded"),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
            ]
        )
        == 0
    )
    assert ModelCard.load(tmp_path / "carded" / "README.md").data.eval_results is None


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "file",
        "truncated",
        "config",
        "tokenizer",
        "vocabulary",
        "metrics",
        "existing",
        "out_is_file",
        "same",
        "one_language",
    ],
)
def test_cli_refusals_are_one_line_exit_2_and_change_nothing(tiny, tmp_path, capsys, case):
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    out, extra = tmp_path / "out", []
    expected = {
        "missing": ["--model_dir not found"],
        "file": ["is a file"],
        "truncated": ["model.safetensors: truncated or corrupt safetensors weights"],
        "config": ["config.json:1: invalid JSON"],
        "tokenizer": ["no tokenizer.json"],
        "vocabulary": [
            f"the tokenizer in {folder} has 260 tokens but the model in {folder} has vocab_size "
            f"{tiny['model'].config.vocab_size}"
        ],
        "metrics": ["metrics.json:1: invalid JSON"],
        "existing": ["--out", "exists and is not empty", "--overwrite"],
        "out_is_file": ["--out", "is a file"],
        "same": ["is --model_dir", "whatever --overwrite says"],
        "one_language": ["--source_lang and --target_lang"],
    }[case]
    folder = break_model_folder(folder, case, tmp_path)
    if case == "vocabulary":  # a tokenizer of another vocabulary: exit 0 with a useless export before
        train_bpe_tokenizer(["a b"], vocab_size=300, show_progress=False).save_pretrained(tmp_path / "other")
        (folder / "tokenizer.json").write_bytes((tmp_path / "other" / "tokenizer.json").read_bytes())
    elif case == "metrics":
        (folder / "metrics.json").write_text("{", encoding="utf-8")
    elif case == "existing":
        out.mkdir()
        (out / "mine.txt").write_text("keep", encoding="utf-8")
    elif case == "out_is_file":
        out.write_text("keep", encoding="utf-8")
    elif case == "same":
        out, extra = folder, ["--overwrite"]  # even with --overwrite the model folder is never replaced
    elif case == "one_language":
        extra = ["--source_lang", "en"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert_one_line_error(cli.main, ["--model_dir", str(folder), "--out", str(out), *extra], capsys, 2, *expected)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_existing_output_is_replaced_only_with_overwrite(tiny, tmp_path):
    """An earlier export is replaced with --overwrite; a folder the tool did not write is not, whatever --overwrite
    says."""
    out = tmp_path / "out"
    assert cli.main(["--model_dir", str(tiny["folder"]), "--out", str(out)]) == 0
    (out / "config.json").write_text("{}", encoding="utf-8")
    assert cli.main(["--model_dir", str(tiny["folder"]), "--out", str(out)]) == 2
    assert cli.main(["--model_dir", str(tiny["folder"]), "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "marian"
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "old.txt").write_text("old", encoding="utf-8")
    assert cli.main(["--model_dir", str(tiny["folder"]), "--out", str(foreign), "--overwrite"]) == 2
    assert (foreign / "old.txt").read_text(encoding="utf-8") == "old"


def test_a_greedy_generation_config_exports(tiny, tmp_path):
    """num_beams=1 with the paper's alpha and early stopping: beam-only settings transformers refuses to save with
    greedy search are left out of the Marian generation config (the card still shows the original's decoding)."""
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    generation = json.loads((folder / "generation_config.json").read_text())
    generation["num_beams"] = 1
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    assert cli.main(["--model_dir", str(folder), "--out", str(tmp_path / "marian")]) == 0
    saved = json.loads((tmp_path / "marian" / "generation_config.json").read_text())
    assert saved.get("num_beams", 1) == 1 and "length_penalty" not in saved and "early_stopping" not in saved
    assert "| Beam size | 1 |" in (tmp_path / "marian" / "README.md").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------------------------------------
# the OPUS-MT tool chain: CTranslate2's own converter (`ct2-transformers-converter`) on the export
# ----------------------------------------------------------------------------------------------------------------------

CT2_SOURCES = [
    "a man is riding a horse .",
    "two dogs play in the snow .",
    "a woman reads a book .",
    "the dog",
    "two men ride a horse in the park .",
]


@pytest.fixture(scope="module")
def trained_export(tmp_path_factory):
    """A tiny model trained for 60 steps on three pairs (it translates them, ends sentences and varies its output, so
    that beam and greedy search differ and </s> matters), saved and exported; with its Marian folder."""
    from hub_helpers import TRAIN_TEXT, make_tiny_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = make_tiny_model(seed=0)
    batch = tokenizer(TRAIN_TEXT[0:6:2], return_tensors="pt", padding=True)
    labels = tokenizer(TRAIN_TEXT[1:6:2], return_tensors="pt", padding=True)["input_ids"]
    labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(60):
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    folder, out = tmp_path_factory.mktemp("trained") / "model", tmp_path_factory.mktemp("trained") / "marian"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert cli.main(["--model_dir", str(folder), "--out", str(out)]) == 0
    yield {"model": model, "tokenizer": tokenizer, "out": out}
    torch.set_num_threads(threads)


def test_ctranslate2s_own_converter_takes_the_export_and_translates_as_ours(trained_export, tmp_path):
    """`ctranslate2.converters.TransformersConverter` (what `ct2-transformers-converter --model EXPORT` runs) needs
    Marian's layout, <pad> last: it drops the last vocabulary entry and embedding row and starts the decoder from a
    zero vector, which is our <pad> row. Its model gives our log-probabilities (renormalised without <pad>, which it
    never emits) and our greedy and beam-search tokens, and the exported MarianMTModel's."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    model, tokenizer, out = trained_export["model"], trained_export["tokenizer"], trained_export["out"]
    ctranslate2.converters.TransformersConverter(str(out)).convert(str(tmp_path / "ct2"))
    vocabulary = json.loads((tmp_path / "ct2" / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert vocabulary == tokenizer.convert_ids_to_tokens(list(range(1, len(tokenizer))))  # ours without <pad>
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    marian, marian_tokenizer = MarianMTModel.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    sources = [tokenizer(text)["input_ids"] for text in CT2_SOURCES]
    source_tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in sources]  # with </s>, as Marian's tokenizer

    # the same function: CTranslate2's log-probabilities of our greedy output are ours without <pad>
    targets = [
        [
            t
            for t in model.generate(input_ids=torch.tensor([ids]), num_beams=1, max_new_tokens=20, max_length_b=None)[
                0, 1:
            ].tolist()
            if t != eos
        ]
        for ids in sources
    ]
    scored = translator.score_batch(source_tokens, [tokenizer.convert_ids_to_tokens(t) for t in targets])
    for ids, target, result in zip(sources, targets, scored):  # CTranslate2 scores the target and </s>
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([[pad, *target]])).logits[0]
        ours = logits.index_fill(-1, torch.tensor([pad]), float("-inf")).log_softmax(-1)
        expected = ours.gather(-1, torch.tensor([*target, eos])[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, atol=1e-4, rtol=1e-4)

    # the same tokens: CTranslate2 stops a beam search once `beam_size` hypotheses finished (early_stopping=True)
    varied = set()
    for beams in (1, 4):
        options = dict(num_beams=beams, max_new_tokens=20, length_penalty=1.0, early_stopping=True)
        results = translator.translate_batch(
            source_tokens, beam_size=beams, length_penalty=1.0, max_decoding_length=20, min_decoding_length=0
        )
        for ids, result in zip(sources, results):
            theirs = tokenizer.convert_tokens_to_ids(result.hypotheses[0])
            theirs += [eos] if len(theirs) < 20 else []  # CTranslate2 leaves </s> out; a cut output has none
            generated = model.generate(
                input_ids=torch.tensor([ids]),
                suppress_tokens=[pad],
                max_length_b=None,
                length_penalty_type="hf",
                **options,
            )[0, 1:].tolist()
            exported = marian.generate(
                input_ids=torch.tensor([[(i - 1) % len(tokenizer) for i in ids]]),
                suppress_tokens=[marian.config.pad_token_id],
                **options,
            )[0, 1:].tolist()
            assert marian_tokenizer.convert_ids_to_tokens(exported) == tokenizer.convert_ids_to_tokens(generated)
            assert_same_or_near_tie(model, ids, generated, theirs)
            varied.add((beams, tuple(theirs)))
    assert len(varied) >= 2 * 4 and any(len(tokens) < 20 for _, tokens in varied)  # a test that can fail


# ----------------------------------------------------------------------------------------------------------------------
# what MarianMTModel cannot express: refused by vaswani-export-marian in one line (vaswani_hf.export.marian_limits)
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"position_encoding": "learned"}, "position_encoding is 'learned'"),
        ({"d_k": 4}, "d_k is 4: MarianMTModel needs d_k = d_v = d_model / num_heads"),
        ({"d_v": 4}, "d_v is 4"),
        ({"layer_norm_eps": 1e-3}, "layer_norm_eps is 0.001: a MarianMTModel's LayerNorms reload with 1e-05"),
        ({"layer_norm_eps": 1e-4}, "layer_norm_eps is 0.0001"),
    ],
)
def test_cli_refuses_a_model_marian_cannot_express(tiny, tmp_path, capsys, change, expected):
    """Learned positions, d_k != d_model / h, and a LayerNorm epsilon a reloaded Marian would not keep: one line
    naming config.json and the field, exit 2, nothing written (the conversion's own ValueError was a traceback)."""
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    out = tmp_path / "out"
    assert_one_line_error(
        cli.main,
        ["--model_dir", str(folder), "--out", str(out)],
        capsys,
        2,
        str(folder / "config.json"),
        "cannot be exported to MarianMTModel",
        expected,
    )
    assert not out.exists()


def test_marian_keeps_epsilons_near_its_own():
    from vaswani_hf.export.marian_limits import marian_layer_norm_eps, marian_refusals

    assert marian_layer_norm_eps() == 1e-5
    for eps in (1e-5, 1e-6, 1e-12, 2e-5):  # our default 1e-6 reloads within the conversion's accuracy
        assert marian_refusals(tiny_config(layer_norm_eps=eps)) == [], eps
    assert len(marian_refusals(tiny_config(layer_norm_eps=1e-3, position_encoding="learned"))) == 2
