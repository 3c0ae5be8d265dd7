"""The model itself: paper architecture details, cache, attention backends, padding, loss, save/load, learning."""

import json
import math
import time
import warnings

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, run_python, tiny_config
from safetensors import safe_open

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.io.models import CODE_FILES
from vaswani_hf.modeling_vaswani import CACHE_NAME, shift_tokens_right, sinusoid_table
from vaswani_hf.training.objective import label_smoothed_nll


def make_model(seed=0, **overrides):
    torch.manual_seed(seed)
    return randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config(**overrides))).eval()


def decoder_batch(lengths, seed=1):
    ids, mask = padded_batch(lengths, seed=seed)
    return shift_tokens_right(ids.masked_fill(mask == 0, -100), 0, 0), torch.cat(
        [torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1
    )


# --- Section 3.5 -------------------------------------------------------------------------------------------------


def test_a_forward_without_decoder_input_says_what_to_pass():
    """model(**tokenizer(texts)) has input_ids but no target side: the error names labels / decoder_input_ids, not the
    decoder's "exactly one of input_ids or inputs_embeds" that the caller did pass."""
    model = VaswaniForConditionalGeneration(tiny_config()).eval()
    input_ids, attention_mask = padded_batch([5, 3])
    with pytest.raises(
        ValueError, match="no decoder input; pass labels .* decoder_input_ids or decoder_inputs_embeds"
    ):
        model(input_ids=input_ids, attention_mask=attention_mask)


def test_sinusoids_follow_the_papers_formula_in_both_layouts():
    d = 16
    table = sinusoid_table(50, d, "interleaved")
    concatenated = sinusoid_table(50, d, "concatenated")
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
            assert concatenated[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert concatenated[pos, d // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoids_extend_beyond_the_table_and_learned_positions_refuse():
    ids, mask = padded_batch([40])
    model = make_model(max_position_embeddings=16)
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :20])
    assert out.logits.shape == (1, 20, 64) and torch.isfinite(out.logits).all()
    learned = make_model(max_position_embeddings=16, position_encoding="learned")
    with pytest.raises(ValueError, match="longer than max_position_embeddings=16"):
        learned(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :10])


# --- Sections 3.1-3.4: architecture ---------------------------------------------------------------------------------


def test_post_norm_layers_and_no_final_layer_norm():
    model = make_model()
    layer = model.model.encoder.layers[0]
    x = torch.randn(2, 5, 32)
    attn, _ = layer.self_attn(x)
    h = layer.self_attn_layer_norm(x + attn)
    expected = layer.final_layer_norm(h + layer.feed_forward(h))  # LayerNorm(x + Sublayer(x)), twice
    assert torch.allclose(layer(x), expected, atol=1e-6)
    names = [n for n, _ in model.named_modules()]
    assert not any(n.endswith(("encoder.layer_norm", "decoder.layer_norm", "layernorm_embedding")) for n in names)
    last = model.model.encoder.layers[-1].final_layer_norm
    ids, mask = padded_batch([6])
    enc = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    # the encoder output is the last sub-layer's LayerNorm output, with its gain and bias: nothing after it
    normalised = (enc - last.bias) / last.weight
    assert torch.allclose(normalised.mean(-1), torch.zeros(1, 6), atol=1e-4)


def test_decoder_layer_is_three_post_norm_sublayers():
    """x = LN(x + SelfAttn(x)); x = LN(x + CrossAttn(x, encoder)); x = LN(x + FFN(x)) (Section 3.1), written out."""
    model = make_model()
    layer = model.model.decoder.layers[0]
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    causal = torch.full((5, 5), float("-inf")).triu(1)[None, None]
    h = layer.self_attn_layer_norm(x + layer.self_attn(x, attention_mask=causal)[0])
    h = layer.encoder_attn_layer_norm(h + layer.encoder_attn(h, key_value_states=memory)[0])
    expected = layer.final_layer_norm(h + layer.feed_forward(h))
    assert torch.allclose(layer(x, causal, memory), expected, atol=1e-6)
    attn = layer.self_attn  # the public projections: heads split on the last dimension
    assert attn.queries(x).shape == (2, 5, 4, 8) and attn.output(attn.values(x)).shape == (2, 5, 32)


def test_one_shared_matrix_scaled_by_sqrt_d_model_and_tied_output():
    model = make_model()
    shared = model.model.shared.weight
    assert model.lm_head.weight is shared
    assert model.model.encoder.embed_tokens.weight is shared and model.model.decoder.embed_tokens.weight is shared
    assert model.model.encoder.embed_scale == math.sqrt(32)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in set(model.parameters()))
    untied = VaswaniForConditionalGeneration(tiny_config(tie_word_embeddings=False))
    assert untied.lm_head.weight is not untied.model.encoder.embed_tokens.weight
    assert untied.model.decoder.embed_tokens.weight is not untied.model.encoder.embed_tokens.weight


def test_inputs_embeds_path_equals_input_ids_path():
    model = make_model()
    ids, mask = padded_batch([7, 4])
    dec, dec_mask = decoder_batch([5, 3])
    by_ids = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask).logits
    embed = model.get_input_embeddings()
    by_embeds = model(
        inputs_embeds=embed(ids),
        attention_mask=mask,
        decoder_inputs_embeds=embed(dec),
        decoder_attention_mask=dec_mask,
    ).logits
    assert torch.allclose(by_ids, by_embeds, atol=1e-6)


def test_attention_without_bias_and_table3_row_b_widths():
    model = make_model(d_k=4, d_v=16)
    attn = model.model.encoder.layers[0].self_attn
    assert attn.q_proj.bias is None and attn.out_proj.bias is None
    assert attn.q_proj.weight.shape == (4 * 4, 32) and attn.v_proj.weight.shape == (4 * 16, 32)
    ids, mask = padded_batch([5, 3])
    assert model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits.shape == (2, 5, 64)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_sdpa_equals_eager(layout):
    model = make_model(sinusoid_layout=layout)
    ids, mask = padded_batch([9, 5, 2])
    dec, dec_mask = decoder_batch([6, 4, 1])
    kwargs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask)
    model.set_attn_implementation("sdpa")
    sdpa = model(**kwargs).logits
    model.set_attn_implementation("eager")
    eager = model(**kwargs).logits
    assert (sdpa - eager).abs().max() < 1e-5


def test_output_attentions_returns_every_layer_and_masks_padding():
    model = make_model()
    model.set_attn_implementation("eager")
    ids, mask = padded_batch([6, 3])
    dec, dec_mask = decoder_batch([4, 2])
    out = model(
        input_ids=ids,
        attention_mask=mask,
        decoder_input_ids=dec,
        decoder_attention_mask=dec_mask,
        output_attentions=True,
    )
    assert len(out.encoder_attentions) == len(out.decoder_attentions) == len(out.cross_attentions) == 2
    enc, dec_self, cross = out.encoder_attentions[0], out.decoder_attentions[0], out.cross_attentions[0]
    assert enc.shape == (2, 4, 6, 6) and dec_self.shape == (2, 4, 4, 4) and cross.shape == (2, 4, 4, 6)
    assert torch.allclose(enc.sum(-1), torch.ones(2, 4, 6), atol=1e-5)
    assert enc[1, :, :, 3:].abs().max() == 0 and cross[1, :, :, 3:].abs().max() == 0  # padded source keys
    assert torch.triu(dec_self[0], diagonal=1).abs().max() == 0  # causal: nothing from the future


# --- incremental decoding and padding ------------------------------------------------------------------------------


def test_every_forward_declares_the_keyword_arguments_transformers_passes():
    """A forward's `**kwargs` are typed `Unpack[TransformersKwargs]`, as Marian's are: transformers reads from that
    annotation which of its keyword arguments (output_attentions, output_hidden_states, ...) a model takes, and its
    common tests skip the output_attentions cases of a model whose `**kwargs` say nothing."""
    import inspect

    from vaswani_hf import VaswaniModel
    from vaswani_hf.modeling_vaswani import VaswaniDecoder, VaswaniEncoder

    for model_class in (VaswaniEncoder, VaswaniDecoder, VaswaniModel, VaswaniForConditionalGeneration):
        annotation = inspect.signature(model_class.forward).parameters["kwargs"].annotation
        declared = annotation.__args__[0].__annotations__
        assert {"output_attentions", "output_hidden_states"} <= declared.keys(), model_class.__name__


@pytest.mark.parametrize("cache_argument", ["cache", "past_key_values"])  # transformers >= 5.24 / < 5.24
@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_incremental_decoding_with_cache_equals_full_forward(position_encoding, cache_argument):
    model = make_model(position_encoding=position_encoding)
    ids, mask = padded_batch([8, 5])
    dec = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(3))
    dec[:, 0] = 0
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    past, steps = None, []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in range(dec.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=dec[:, t : t + 1],
                use_cache=True,
                **{cache_argument: past},
            )
            past = getattr(out, CACHE_NAME)
            steps.append(out.logits)
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5
    # the old name is deprecated the transformers way where transformers renamed it (5.24), silent where it is current
    deprecated = [w for w in caught if "`past_key_values` is deprecated" in str(w.message)]
    assert bool(deprecated) == (cache_argument == "past_key_values" != CACHE_NAME)
    assert all(w.category is FutureWarning for w in deprecated)
    # cross-attention K/V were projected once and reused
    assert all(past.is_updated[i] for i in range(2))


def test_a_sentence_gives_the_same_outputs_alone_and_inside_a_padded_batch():
    model = make_model()
    ids, mask = padded_batch([3, 9, 6], seed=5)
    dec, dec_mask = decoder_batch([2, 7, 4], seed=6)
    batch = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask).logits
    for row, (src_len, tgt_len) in enumerate([(3, 2), (9, 7), (6, 4)]):
        alone = model(input_ids=ids[row : row + 1, :src_len], decoder_input_ids=dec[row : row + 1, :tgt_len]).logits
        assert (alone[0] - batch[row, :tgt_len]).abs().max() < 1e-5


# --- Section 5.4: loss ---------------------------------------------------------------------------------------------


def test_loss_is_per_target_token_or_per_num_items_in_batch():
    model = make_model()
    ids, mask = padded_batch([5, 3])
    labels = torch.tensor([[7, 8, 9, 2], [5, 2, -100, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    total, count = label_smoothed_nll(out.logits, labels, 0.0)  # the model's loss: plain cross-entropy
    assert out.loss.item() == pytest.approx(total.item() / 6, rel=1e-6) and count == 6
    with_items = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(12))
    assert with_items.loss.item() == pytest.approx(total.item() / 12, rel=1e-6)


def test_pad_row_stays_zero_while_training():
    model = make_model()
    model.train()
    assert model.model.shared.weight[0].abs().max() == 0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    ids, mask = padded_batch([5, 3])
    for _ in range(3):
        loss = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([[7, 8, 2], [5, 2, -100]])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert model.model.shared.weight[0].abs().max() == 0  # the decoder's zero start vector (t2t)
    assert model.model.shared.weight[5].abs().max() > 0


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = padded_batch([6, 4])
    labels = torch.tensor([[7, 8, 9, 2], [5, 2, -100, -100]])
    grads = []
    for checkpointing in (False, True):
        model = make_model()
        model.train()
        if checkpointing:
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()  # transformers 5 renamed gradient_checkpointing_enable
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-6) for n in grads[0])


def test_resize_token_embeddings_keeps_one_shared_matrix():
    model = make_model()
    model.resize_token_embeddings(80)
    assert model.config.vocab_size == 80 and model.lm_head.weight.shape == (80, 32)
    assert model.lm_head.weight is model.model.encoder.embed_tokens.weight is model.model.decoder.embed_tokens.weight
    ids, mask = padded_batch([4])
    assert model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits.shape == (1, 4, 80)


# --- save / load ---------------------------------------------------------------------------------------------------


def test_save_load_round_trip_stores_the_tied_matrix_once(tmp_path):
    model = make_model()
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "model.shared.weight" in keys
    assert not keys & {"lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    assert not any("embed_positions" in k for k in keys)  # sinusoids are computed, not stored
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]["AutoModelForSeq2SeqLM"] == (
        "modeling_vaswani.VaswaniForConditionalGeneration"
    )
    again = VaswaniForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert again.lm_head.weight is again.model.shared.weight
    ids, mask = padded_batch([6, 3])
    assert torch.equal(
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits,
        again(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits,
    )


def test_trust_remote_code_load_in_a_fresh_process_without_the_package(tmp_path):
    """`save_pretrained` copies the modeling file and every file it imports relatively (generation_vaswani.py,
    generation_config_vaswani.py, beam_search_vaswani.py, configuration_vaswani.py); a process that cannot import vaswani_hf loads the folder with
    trust_remote_code and computes the same logits and the same beam-search and greedy translations."""
    model = make_model()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    for name in CODE_FILES:
        assert (folder / name).is_file(), name
    ids, mask = padded_batch([6, 3])
    expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    with torch.no_grad():
        beam = model.generate(input_ids=ids, attention_mask=mask, max_length_b=5)
        greedy = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_length_b=5)
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    code = f"""
import torch
from transformers import AutoModelForSeq2SeqLM
model = AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
batch = torch.load({str(tmp_path / "inputs.pt")!r})
logits = model(input_ids=batch["ids"], attention_mask=batch["mask"], decoder_input_ids=batch["ids"]).logits
with torch.no_grad():
    beam = model.generate(input_ids=batch["ids"], attention_mask=batch["mask"], max_length_b=5)
    greedy = model.generate(input_ids=batch["ids"], attention_mask=batch["mask"], num_beams=1, max_length_b=5)
torch.save({{"logits": logits, "beam": beam, "greedy": greedy}}, {str(tmp_path / "outputs.pt")!r})
print(type(model).__name__)
"""
    out = run_python(code, cwd=tmp_path, env={"HF_MODULES_CACHE": str(tmp_path / "modules")}, block_package=True)
    assert "VaswaniForConditionalGeneration" in out
    remote = torch.load(tmp_path / "outputs.pt")
    assert torch.equal(remote["logits"], expected)
    assert torch.equal(remote["beam"], beam) and torch.equal(remote["greedy"], greedy)


def test_auto_classes_load_without_trust_remote_code_when_the_package_is_imported(tmp_path):
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    model = make_model()
    model.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is VaswaniConfig
    assert type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path)) is VaswaniForConditionalGeneration


# --- size and learning ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset, paper_millions", [("base", 65), ("big", 213)])
def test_parameter_counts_match_table3(preset, paper_millions):
    config = getattr(VaswaniConfig, preset)(vocab_size=37000)
    with torch.device("meta"):
        model = VaswaniForConditionalGeneration(config)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"\n{preset}: {millions:.1f}M parameters with a 37k shared vocabulary (paper, Table 3: {paper_millions}M)")
    assert abs(millions - paper_millions) / paper_millions < 0.05


@pytest.mark.usefixtures("one_torch_thread")
def test_a_tiny_model_learns_to_reverse_sequences():
    """Teacher-forced training on random sequences, then greedy decoding: >= 99% token accuracy on new ones.

    One torch thread: two threads on two shared, loaded cores made this test take 8.4 minutes on CI (the threads wait
    for each other). 400 steps: with this seed the greedy accuracy is >= 99.8% from step 300 on (1 and 2 threads); 600
    steps was twice what the task needs."""
    torch.manual_seed(0)
    config = tiny_config(vocab_size=16, d_model=64, d_ff=128, num_heads=4, dropout=0.0)
    model = VaswaniForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)

    def batch(n, generator):
        src = torch.randint(3, 16, (n, 8), generator=generator)
        src = torch.cat([src, torch.full((n, 1), 2)], dim=1)  # ... </s>
        tgt = torch.cat([src[:, :-1].flip(1), src[:, -1:]], dim=1)
        return src, tgt

    generator = torch.Generator().manual_seed(1)
    start = time.time()
    model.train()
    for step in range(400):
        src, tgt = batch(64, generator)
        loss = model(input_ids=src, labels=tgt).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()  # a fixed number of steps, not a time budget: the result must not depend on load
    model.eval()
    src, tgt = batch(200, torch.Generator().manual_seed(99))
    out = model.generate(input_ids=src, num_beams=1, max_new_tokens=9, max_length_b=None)[:, 1:]
    accuracy = (out == tgt).float().mean().item()
    print(f"\nreverse task: {step + 1} steps, {time.time() - start:.0f}s, greedy token accuracy {accuracy:.4f}")
    assert accuracy >= 0.99


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_dropout_has_dropouts_distribution_and_gradient(dtype):
    """The CPU dropout draws its mask from `rand` instead of `bernoulli_`: it must still keep each element with
    probability 1 - p, scale kept ones by 1 / (1 - p), keep the input's dtype, pass the gradient only through kept
    elements, and be the identity in eval mode or at p = 0."""
    from vaswani_hf.modeling_vaswani import dropout

    torch.manual_seed(0)
    x = torch.ones(1000, 1000, dtype=dtype, requires_grad=True)
    y = dropout(x, 0.3, True)
    assert y.dtype == dtype
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.003  # 1e6 draws: std 0.00046
    torch.testing.assert_close(y[kept].float(), torch.full((int(kept.sum()),), 1 / 0.7), rtol=1e-2, atol=0)
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())  # d(sum)/dx = mask / (1 - p)
    assert dropout(x, 0.3, False) is x and dropout(x, 0.0, True) is x
    assert not dropout(x, 1.0, True).any()


def test_forward_loss_is_the_plain_cross_entropy_of_the_labels():
    """transformers' convention (and its common test `test_encoder_decoder_loss_no_double_shift`): `labels` alone, or
    `labels` with the decoder inputs shifted once by hand, give the same loss, and that loss is the cross-entropy of the
    logits against the labels, with the same gradient. The paper's label smoothing is the trainer's objective
    (tests/test_training_trainer.py), not the model's loss: with it, the gradient would not be the NLL's."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config()).train()
    input_ids, attention_mask = padded_batch([7, 5, 3])
    labels = torch.randint(4, 64, (3, 6))
    labels[1, 4:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    decoder_input_ids = shift_tokens_right(labels, model.config.pad_token_id, model.config.decoder_start_token_id)
    shifted = model(
        input_ids=input_ids, attention_mask=attention_mask, labels=labels, decoder_input_ids=decoder_input_ids
    )
    reference = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 64), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(shifted.loss, out.loss)
    torch.testing.assert_close(out.loss, reference, rtol=1e-6, atol=1e-7)
    (grad,) = torch.autograd.grad(out.loss, model.lm_head.weight, retain_graph=True)
    (expected,) = torch.autograd.grad(reference, model.lm_head.weight)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("padding", ["partly padded rows", "a fully padded source row"])
def test_bf16_forward_and_backward_match_fp32_and_never_nan(padding):
    """Mixed precision as the Trainer runs it (`--bf16 true`: autocast over fp32 weights): the logits, the
    label-smoothed loss and every gradient of a bf16 step agree with fp32 within bf16's precision, and nothing is
    NaN, also when a source row is padding from end to end (its attention rows are fully masked).

    Tolerances: bf16 keeps 8 bits of mantissa (relative step 2^-8 = 0.4%); over ~10 sequential matrix products and
    the reductions of a 2-layer model the logits drift by a few percent of their spread, so the loss is compared at
    2% and each gradient tensor by its direction (cosine > 0.99) and norm (within 10%); a wrong cast (fp16 overflow, a
    softmax in bf16 over masked -inf scores) gives NaN or a gradient in another direction."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(dropout=0.0, d_model=64, d_ff=128)).train()
    input_ids, attention_mask = padded_batch([9, 6, 4], seed=1)
    if padding == "a fully padded source row":
        input_ids[2], attention_mask[2] = 0, 0
    labels = torch.randint(4, 64, (3, 7))
    labels[1, 5:] = -100

    def step(bf16: bool):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(
                input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=shift_tokens_right(labels, 0, 0)
            ).logits
            loss_sum, tokens = label_smoothed_nll(logits, labels, 0.1)
        (loss_sum / tokens).backward()
        return (
            logits.float(),
            (loss_sum / tokens).item(),
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        )

    logits32, loss32, grads32 = step(False)
    logits16, loss16, grads16 = step(True)
    assert not torch.isnan(logits16).any() and not any(torch.isnan(g).any() for g in grads16.values())
    assert loss16 == pytest.approx(loss32, rel=2e-2)
    for name, g32 in grads32.items():
        g16 = grads16[name].float()
        if g32.norm() < 1e-6:
            continue
        cosine = torch.nn.functional.cosine_similarity(g16.flatten(), g32.flatten(), dim=0).item()
        assert cosine > 0.99, (name, cosine)
        assert g16.norm().item() == pytest.approx(g32.norm().item(), rel=0.1), name
