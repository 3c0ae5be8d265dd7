"""Attention visualisation (vaswani_hf.visualize): the plotted matrices are the model's attention weights, padding
gets no attention, figures have the expected panels, everything works on a `trust_remote_code` model in a process
that cannot import vaswani_hf, and vaswani-visualize-attention refuses bad input before any work."""

import json
import math
import shutil

import pytest
import torch
from cli_helpers import assert_one_line_error, break_model_folder
from conftest import REPO, run_python

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf import visualize as V

SENTENCES = [
    "A man is riding a bicycle.",
    "Ein Mann fährt Fahrrad.",
    "Two children are playing in the park.",
    "Zwei Kinder spielen im Park.",
    "The old woman reads a letter.",
    "Die alte Frau liest einen Brief.",
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tokenizer():
    from vaswani_hf.tokenization import train_bpe_tokenizer

    return train_bpe_tokenizer(SENTENCES * 3, vocab_size=300, min_frequency=1, show_progress=False)


@pytest.fixture(scope="module")
def model(tokenizer):
    # Different encoder and decoder depths, so that swapped layer lists would fail. (num_decoder_layers >
    # num_encoder_layers is avoided: generate() then fails in the core model's cache, reported separately.)
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        d_ff=32,
        num_heads=4,
        num_encoder_layers=3,
        num_decoder_layers=2,
        dropout=0.1,
        max_position_embeddings=64,
    )
    model = VaswaniForConditionalGeneration(config)  # left in training mode and sdpa: visualize must switch
    model.generation_config.max_length_b = None  # no source-length limit: a short greedy translation
    model.generation_config.max_new_tokens = 6
    return model


def reference_forward(model, tokenizer, source, target):
    """The model's own eager attention outputs, computed here without vaswani_hf.visualize."""
    src = tokenizer(source, return_tensors="pt")
    labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"]
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    eager = VaswaniForConditionalGeneration(model.config)
    eager.load_state_dict(model.state_dict())
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        return eager.eval()(**src, decoder_input_ids=decoder_input_ids, output_attentions=True)


def test_plotted_matrices_are_the_models_attention_weights(model, tokenizer):
    source, target = SENTENCES[2], SENTENCES[3]
    attn = V.collect_attentions(model, tokenizer, source, target)
    assert model.training and model.config._attn_implementation == "sdpa"  # restored
    out = reference_forward(model, tokenizer, source, target)
    s, t = len(attn.source_tokens), len(attn.target_tokens)
    assert attn.encoder.shape == (3, 4, s, s) and attn.decoder.shape == (2, 4, t, t)
    assert attn.cross.shape == (2, 4, t, s)
    assert attn.target_tokens[-1] == "</s>" and attn.decoder_input_tokens[0] == V.START_LABEL
    assert attn.decoder_input_tokens[1:] == attn.target_tokens[:-1]
    for kind, expected in zip(V.KINDS, (out.encoder_attentions, out.decoder_attentions, out.cross_attentions)):
        weights = attn.weights(kind)
        torch.testing.assert_close(weights, torch.stack([w[0] for w in expected]))
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))  # softmax rows
        for layer in range(weights.shape[0]):
            fig = V.plot_layer_heads(attn, kind, layer)
            panels = [ax for ax in fig.axes if ax.images]
            assert len(panels) == 4
            for head, ax in enumerate(panels):  # the image drawn is exactly the weight matrix
                drawn = torch.from_numpy(ax.images[0].get_array().data.copy())
                torch.testing.assert_close(drawn, weights[layer, head], rtol=0, atol=0)
            rows, cols = attn.axis_labels(kind)
            assert [x.get_text() for x in panels[0].get_yticklabels()] == rows
            assert [x.get_text() for x in panels[-1].get_xticklabels()] == cols
    upper = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert (attn.decoder[..., upper] == 0).all()  # causal mask (Section 3.2.3)


def test_padding_columns_get_exactly_zero_attention_in_a_padded_batch(model, tokenizer):
    sources, targets = [SENTENCES[0], SENTENCES[2], "A man."], [SENTENCES[1], "Zwei Kinder.", SENTENCES[5]]
    batch = V.batch_attentions(model, tokenizer, sources, targets, extra_padding=2)
    source_mask, target_mask = batch["attention_mask"].bool(), batch["decoder_attention_mask"].bool()
    assert (~source_mask).sum(-1).min() == 2 and (~target_mask).sum(-1).min() == 2  # every row is padded
    assert (~source_mask[2]).sum() > 2  # and padding of different lengths
    for kind in V.KINDS:
        weights = batch[kind]  # (L, B, H, Tq, Tk)
        query_mask, key_mask = {
            "encoder": (source_mask, source_mask),
            "decoder": (target_mask, target_mask),
            "cross": (target_mask, source_mask),
        }[kind]
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        for b in range(len(sources)):
            on_padding = weights[:, b][:, :, query_mask[b]][..., ~key_mask[b]]  # real queries x padding keys
            assert on_padding.numel() > 0 and (on_padding == 0).all()
            assert (weights[:, b][..., ~key_mask[b]] == 0).all()  # padded query rows too
        assert (V.padding_mass(weights, query_mask, key_mask) == 0).all()

    diagnostics = V.attention_diagnostics(model, tokenizer, sources, targets)
    for kind in V.KINDS:
        assert diagnostics["padding_mass"][kind].shape == (3 if kind == "encoder" else 2, 4)
        assert (diagnostics["padding_mass"][kind] == 0).all()
        assert diagnostics["padding_invariance"][kind] < 1e-5  # padding does not change the weights
    assert "(OK)" in V.format_diagnostics(diagnostics) and "NONZERO" not in V.format_diagnostics(diagnostics)

    # Negative control: attention spread over all keys, as with a missing padding mask, is detected.
    leaky = torch.full((1, 1, 1, 3, 5), 0.2)
    mass = V.padding_mass(leaky, torch.ones(1, 3), torch.tensor([[1, 1, 1, 0, 0]]))
    assert mass.item() == pytest.approx(0.4)


def test_entropy_and_alignment_share_by_hand():
    uniform = torch.full((1, 1, 1, 2, 4), 0.25)
    one_hot = torch.eye(4)[:2].reshape(1, 1, 1, 2, 4)
    ones_q, ones_k = torch.ones(1, 2), torch.ones(1, 4)
    assert V.head_entropy(uniform, ones_q, ones_k, "cross").item() == pytest.approx(math.log(4))
    assert V.head_entropy(uniform, ones_q, ones_k, "cross", normalize=True).item() == pytest.approx(1.0)
    assert V.head_entropy(one_hot, ones_q, ones_k, "cross", normalize=True).item() == pytest.approx(0.0)
    # decoder row i sees i+1 keys: a causal-uniform row is uniform (1); the first row (one key) is left out
    causal = torch.tril(torch.ones(3, 3)) / torch.arange(1, 4).unsqueeze(1)
    assert V.head_entropy(
        causal.reshape(1, 1, 1, 3, 3), torch.ones(1, 3), torch.ones(1, 3), "decoder", normalize=True
    ).item() == pytest.approx(1.0)

    cross = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])  # (T=2, S=3)
    share = V.alignment_share(cross, [(0, 0), (1, 1)])
    assert share == pytest.approx({"mass": (0.7 + 0.3) / 2, "argmax": 0.5, "uniform": 1 / 3, "num_aligned_targets": 2})
    assert V.diagonal_alignment(3, 5, window=0) == [(0, 0), (1, 2), (2, 4)]
    assert V.diagonal_alignment(2, 2, window=1) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_word_alignment_maps_to_subword_positions(tokenizer):
    source, target = "A man is riding.", "Ein Mann fährt."
    pairs = V.token_alignment_from_words(tokenizer, source, target, "0-0 1-1 3-2")
    src_ids = tokenizer(source)["input_ids"]
    tgt_ids = tokenizer(target)["input_ids"]
    src_tok, tgt_tok = tokenizer.convert_ids_to_tokens(src_ids), tokenizer.convert_ids_to_tokens(tgt_ids)
    sources_of = lambda ts: {s for t, s in pairs if t in ts}  # noqa: E731
    targets_of = lambda ss: {t for t, s in pairs if s in ss}  # noqa: E731
    ein = targets_of(sources_of({0}))  # the target tokens linked to what the first target token is linked to
    assert "".join(tgt_tok[t] for t in sorted(ein)) == "ĠEin"
    assert "".join(src_tok[s] for s in sorted(sources_of(ein))) == "ĠA"
    assert "".join(src_tok[s] for s in sorted(sources_of(targets_of({len(src_tok) - 2})))) == "Ġriding."
    assert all(tgt_tok[t] != "</s>" and src_tok[s] != "</s>" for t, s in pairs)  # special tokens are no words
    last_target_word = {t for t, s in pairs if src_tok[s] == "."}  # "riding." holds the full stop
    assert last_target_word and all(t >= 2 for t in last_target_word)


def test_panels_and_files_for_the_models_own_translation(model, tokenizer, tmp_path):
    result = V.visualize(model, tokenizer, SENTENCES[0], None, tmp_path / "png", num_beams=1, max_new_tokens=6)
    attn = result["attentions"]
    assert attn.target_origin == "greedy" and 1 <= len(attn.target_tokens) <= 6
    images = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    layer_files = [
        f"{k}_layer{i}.png" for k, n in (("encoder", 3), ("decoder", 2), ("cross", 2)) for i in range(1, n + 1)
    ]
    assert images == sorted(layer_files + ["cross_alignment.png", "diagnostics.png"])
    for name in images:
        assert (tmp_path / "png" / name).read_bytes()[:8] == PNG_SIGNATURE
    assert (tmp_path / "png" / "diagnostics.txt").read_text().count("max attention mass on padding = 0 (OK)") == 3

    # panels: one axes per heatmap + one colorbar axes
    assert len(V.plot_attention_head(attn, "cross", 1, 3, tmp_path / "head.png").axes) == 2
    assert (tmp_path / "head.png").read_bytes()[:8] == PNG_SIGNATURE
    assert len(V.plot_layer_heads(attn, "encoder", 2).axes) == 4 + 1
    three_heads = V.Attentions(
        attn.source_tokens,
        attn.target_tokens,
        attn.decoder_input_tokens,
        attn.encoder[:, :3],
        attn.decoder[:, :3],
        attn.cross[:, :3],
    )
    assert len(V.plot_layer_heads(three_heads, "decoder", 0, ncols=2).axes) == 3 + 1  # the empty cell is removed
    assert len(V.plot_cross_alignment(attn).axes) == 2 + 1 + 1  # per decoder layer, all layers, colorbar
    assert len(V.plot_diagnostics(result["diagnostics"]).axes) == 4 + 1

    svg = V.plot_cross_alignment(attn, tmp_path / "svg" / "alignment.svg")
    assert svg is not None and "<svg" in (tmp_path / "svg" / "alignment.svg").read_text()[:1000]


def test_scripts_on_a_saved_tiny_model(model, tokenizer, tmp_path, capsys):
    import importlib.util

    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")

    def load(name):
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    rc = load("visualize_attention").main(
        [
            "--model_dir",
            str(tmp_path / "model"),
            "--source",
            SENTENCES[0],
            "--target",
            SENTENCES[1],
            "--alignment",
            "0-0 1-1 3-2 4-3",
            "--out",
            str(tmp_path / "vis"),
            "--format",
            "svg",
        ]
    )
    assert rc == 0
    assert len(list((tmp_path / "vis").glob("*.svg"))) == 3 + 2 + 2 + 2
    assert "given alignment" in capsys.readouterr().out

    out = tmp_path / "docs" / "attention_example.png"
    assert load("make_readme_attention_plot").main(["--model_dir", str(tmp_path / "model"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_works_on_a_trust_remote_code_model_without_the_package(model, tokenizer, tmp_path):
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    code = f"""
import importlib.util, json, sys
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
package = {str(REPO / "vaswani_hf" / "visualize")!r}
spec = importlib.util.spec_from_file_location("visualize_standalone", package + "/__init__.py",
                                              submodule_search_locations=[package])
V = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = V
spec.loader.exec_module(V)
try:
    import vaswani_hf
    raise SystemExit("vaswani_hf should not be importable here")
except ImportError:
    pass
folder = {str(tmp_path / "model")!r}
tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # the config has an auto_map
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
model.generation_config.max_length_b = None
attn = V.collect_attentions(model, tok, {SENTENCES[2]!r}, None, max_new_tokens=5)
diagnostics = V.attention_diagnostics(model, tok, {SENTENCES[:3]!r}, None, max_new_tokens=5)
batch = V.batch_attentions(model, tok, {SENTENCES[:3]!r}, None, max_new_tokens=5, extra_padding=1)
out = {str(tmp_path / "out")!r}
grid = V.plot_layer_heads(attn, "cross", 0, out + "/cross_layer1.png")
V.plot_cross_alignment(attn, out + "/cross_alignment.svg")
print(json.dumps(dict(
    model_module=type(model).__module__,
    attn_implementation=model.config._attn_implementation,
    encoder=list(attn.encoder.shape), cross=list(attn.cross.shape),
    rows_sum_to_one=all(torch.allclose(attn.weights(k).sum(-1), torch.tensor(1.0)) for k in V.KINDS),
    causal=bool((attn.decoder.triu(1) == 0).all()),
    padding=max(diagnostics["padding_mass"][k].max().item() for k in V.KINDS),
    invariance=max(diagnostics["padding_invariance"].values()),
    batch_padding=max(V.padding_mass(batch[k], *V._masks(batch, k)).max().item() for k in V.KINDS),
    grid_axes=len(grid.axes),
    png=open(out + "/cross_layer1.png", "rb").read(8) == {PNG_SIGNATURE!r},
)))
"""
    stdout = run_python(code, cwd=tmp_path, block_package=True)
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["model_module"].startswith("transformers_modules")  # the remote-code class, not vaswani_hf's
    assert report["attn_implementation"] == "sdpa"  # switched to eager for the plots and restored
    assert report["encoder"][:2] == [3, 4] and report["cross"][:2] == [2, 4]
    assert report["rows_sum_to_one"] and report["causal"]
    assert report["padding"] == 0.0 and report["batch_padding"] == 0.0 and report["invariance"] < 1e-5
    assert report["grid_axes"] == 4 + 1 and report["png"]
    assert "<svg" in (tmp_path / "out" / "cross_alignment.svg").read_text()[:1000]


# ----------------------------------------------------------------------------------------------------------------------
# vaswani-visualize-attention
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(model, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "file",
        "truncated",
        "config",
        "tokenizer",
        "existing",
        "out_is_file",
        "alignment_without_target",
        "bad_alignment",
        "num_beams",
    ],
)
def test_cli_refusals_are_one_line_exit_2_and_change_nothing(saved, tmp_path, capsys, case):
    from vaswani_hf.cli import visualize_attention as cli

    folder = shutil.copytree(saved, tmp_path / "model")
    out, extra = tmp_path / "out", []
    expected = {
        "missing": ["--model_dir not found"],
        "file": ["is a file"],
        "truncated": ["model.safetensors: truncated or corrupt safetensors weights"],
        "config": ["config.json:1: invalid JSON"],
        "tokenizer": ["no tokenizer.json"],
        "existing": ["--out", "exists and is not empty", "--overwrite"],
        "out_is_file": ["--out", "is a file"],
        "alignment_without_target": ["--alignment", "--target"],
        "bad_alignment": ["--alignment", "'0:0'", "i-j"],
        "num_beams": ["--num_beams"],
    }[case]
    folder = break_model_folder(folder, case, tmp_path)
    if case == "existing":
        out.mkdir()
        (out / "mine.txt").write_text("keep", encoding="utf-8")
    elif case == "out_is_file":
        out.write_text("keep", encoding="utf-8")
    elif case == "alignment_without_target":
        extra = ["--alignment", "0-0"]
    elif case == "bad_alignment":
        extra = ["--target", SENTENCES[1], "--alignment", "0-0 0:0"]
    elif case == "num_beams":
        extra = ["--num_beams", "0"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = ["--model_dir", str(folder), "--source", SENTENCES[0], "--out", str(out), *extra]
    assert_one_line_error(cli.main, argv, capsys, 2, *expected)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_cli_replaces_output_only_with_overwrite_and_reports_padding_leaks(saved, tmp_path, capsys, monkeypatch):
    import vaswani_hf.visualize
    from vaswani_hf.cli import visualize_attention as cli

    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old", encoding="utf-8")
    argv = ["--model_dir", str(saved), "--source", SENTENCES[0], "--out", str(out), "--max_new_tokens", "4"]
    assert cli.main([*argv, "--overwrite"]) == 2  # a folder this tool did not write: kept
    assert (out / "old.txt").read_text(encoding="utf-8") == "old"
    (out / "old.txt").unlink()
    assert cli.main(argv) == 0
    assert cli.main([*argv, "--overwrite"]) == 0  # its own earlier output: replaced whole
    assert (out / "diagnostics.txt").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written beside, renamed into place

    real = vaswani_hf.visualize.visualize

    def leaking(*args, **kwargs):  # a model whose attention reaches padding: a finding, exit status 1
        result = real(*args, **kwargs)
        result["diagnostics"]["padding_mass"]["cross"][0, 0] = 0.25
        return result

    monkeypatch.setattr(cli, "visualize", leaking)  # the name the tool calls
    capsys.readouterr()
    assert cli.main([*argv, "--overwrite"]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1] == "ERROR: attention mass on padding in cross" and "wrote" in captured.out
    assert "Traceback" not in captured.err
