"""The decoder stack alone, VaswaniForCausalLM: loaded by AutoModelForCausalLM from a translation model's folder (with
and without the package), as a language model (cache, generate, loss) and as the decoder of transformers'
EncoderDecoderModel."""

import json

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, run_python, tiny_config
from safetensors import safe_open
from transformers import AutoModelForCausalLM, BertConfig, BertModel, EncoderDecoderModel

from vaswani_hf import VaswaniForCausalLM, VaswaniForConditionalGeneration

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def translation_folder(tmp_path_factory):
    """A tiny translation model with random LayerNorms and biases, saved as `save_pretrained` writes it."""
    torch.manual_seed(0)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config())).eval()
    folder = tmp_path_factory.mktemp("translation")
    model.save_pretrained(folder)
    return model, folder


def target_batch():
    """Decoder inputs starting from <pad> (the start vector), the second row padded after its </s>."""
    ids = torch.tensor([[0, 5, 6, 7, 8], [0, 9, 10, 2, 0]])
    return ids, (torch.arange(5) < torch.tensor([[5], [4]])).long()


def language_model(seed=0, **overrides):
    torch.manual_seed(seed)
    config = tiny_config(is_encoder_decoder=False, **overrides)
    return randomize_norms_and_biases(VaswaniForCausalLM(config)).eval()


# --- loading a translation model's folder ----------------------------------------------------------------------------


def test_auto_model_for_causal_lm_loads_every_weight_of_the_decoder_and_its_shared_embedding(translation_folder):
    seq2seq, folder = translation_folder
    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert type(model) is VaswaniForCausalLM
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    # The seq2seq folder holds the one shared matrix (Section 3.4); the causal LM ties its embedding and output
    # projection to it again.
    assert model.lm_head.weight is model.model.shared.weight is model.model.decoder.embed_tokens.weight
    decoder = seq2seq.model.decoder.state_dict()
    loaded = model.model.decoder.state_dict()
    assert decoder.keys() == loaded.keys()
    assert all(torch.equal(decoder[name], loaded[name]) for name in decoder)
    assert torch.equal(model.lm_head.weight, seq2seq.lm_head.weight)
    assert model.config.is_decoder and not model.config.is_encoder_decoder and model.config.add_cross_attention
    assert seq2seq.config.is_encoder_decoder and not seq2seq.config.is_decoder  # the caller's config is left as it was


def test_untied_embeddings_load_as_the_decoders_own_embedding_and_output_projection(tmp_path):
    """With `tie_word_embeddings=False` (three matrices instead of the paper's one) the decoder's embedding and the
    output projection load as two matrices, and no shared one is made."""
    torch.manual_seed(0)
    seq2seq = VaswaniForConditionalGeneration(tiny_config(tie_word_embeddings=False))
    seq2seq.save_pretrained(tmp_path)
    model, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not hasattr(model.model, "shared") and model.lm_head.weight is not model.model.decoder.embed_tokens.weight
    assert torch.equal(model.lm_head.weight, seq2seq.lm_head.weight)
    assert torch.equal(model.model.decoder.embed_tokens.weight, seq2seq.model.decoder.embed_tokens.weight)


def test_given_the_encoder_output_the_causal_lm_computes_the_translation_models_logits(translation_folder):
    seq2seq, folder = translation_folder
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    source, source_mask = padded_batch([6, 3])
    target, target_mask = target_batch()
    with torch.no_grad():
        expected = seq2seq(
            input_ids=source, attention_mask=source_mask, decoder_input_ids=target, decoder_attention_mask=target_mask
        )
        logits = model(
            input_ids=target,
            attention_mask=target_mask,
            encoder_hidden_states=expected.encoder_last_hidden_state,
            encoder_attention_mask=source_mask,
        ).logits
    torch.testing.assert_close(logits, expected.logits, rtol=0, atol=1e-6)


def test_without_an_encoder_output_the_encoder_decoder_attention_is_skipped(translation_folder):
    """The folder's decoder run without a source equals a decoder built without encoder-decoder attention that holds
    the same other weights: the sub-layer is skipped, not fed zeros."""
    _, folder = translation_folder
    with_cross = AutoModelForCausalLM.from_pretrained(folder).eval()
    without = VaswaniForCausalLM(tiny_config(is_encoder_decoder=False)).eval()
    assert not any("encoder_attn" in name for name, _ in without.named_parameters())
    unused = without.load_state_dict(with_cross.state_dict(), strict=False).unexpected_keys
    assert unused and all(".encoder_attn" in name for name in unused)
    target, target_mask = target_batch()
    with torch.no_grad():
        assert torch.equal(
            with_cross(input_ids=target, attention_mask=target_mask).logits,
            without(input_ids=target, attention_mask=target_mask).logits,
        )


def test_a_decoder_without_encoder_decoder_attention_refuses_an_encoder_output_naming_the_setting():
    model = language_model()
    target, _ = target_batch()
    with pytest.raises(ValueError, match="add_cross_attention=True"):
        model(input_ids=target, encoder_hidden_states=torch.zeros(2, 3, 32))


def test_config_json_names_the_causal_lm_and_a_saved_causal_lm_names_no_encoder_decoder_class(
    translation_folder, tmp_path
):
    seq2seq, folder = translation_folder
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForCausalLM"] == "modeling_vaswani.VaswaniForCausalLM"
    assert auto_map["AutoModelForSeq2SeqLM"] == "modeling_vaswani.VaswaniForConditionalGeneration"
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"] == {
        "AutoConfig": "configuration_vaswani.VaswaniConfig",
        "AutoModelForCausalLM": "modeling_vaswani.VaswaniForCausalLM",
    }
    assert saved["architectures"] == ["VaswaniForCausalLM"] and saved["is_encoder_decoder"] is False
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        assert not any(key.startswith("model.encoder.") for key in weights.keys())
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    target, target_mask = target_batch()
    with torch.no_grad():
        assert torch.equal(
            again(input_ids=target, attention_mask=target_mask).logits,
            model(input_ids=target, attention_mask=target_mask).logits,
        )
    with pytest.raises(ValueError, match="is_encoder_decoder=False.*VaswaniForCausalLM"):
        VaswaniForConditionalGeneration(again.config)


def test_trust_remote_code_loads_the_causal_lm_in_a_process_without_the_package(translation_folder, tmp_path):
    seq2seq, folder = translation_folder
    source, source_mask = padded_batch([6, 3])
    target, target_mask = target_batch()
    with torch.no_grad():
        encoded = seq2seq.get_encoder()(input_ids=source, attention_mask=source_mask).last_hidden_state
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        expected = model(
            input_ids=target,
            attention_mask=target_mask,
            encoder_hidden_states=encoded,
            encoder_attention_mask=source_mask,
        ).logits
        greedy = model.generate(target[:, :2], do_sample=False, num_beams=1, max_new_tokens=4)
    torch.save(
        {"target": target, "mask": target_mask, "encoded": encoded, "source_mask": source_mask}, tmp_path / "in.pt"
    )
    code = f"""
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
batch = torch.load({str(tmp_path / "in.pt")!r})
with torch.no_grad():
    logits = model(input_ids=batch["target"], attention_mask=batch["mask"], encoder_hidden_states=batch["encoded"],
                   encoder_attention_mask=batch["source_mask"]).logits
    greedy = model.generate(batch["target"][:, :2], do_sample=False, num_beams=1, max_new_tokens=4)
torch.save({{"logits": logits, "greedy": greedy}}, {str(tmp_path / "out.pt")!r})
print(type(model).__name__)
"""
    out = run_python(code, cwd=tmp_path, env={"HF_MODULES_CACHE": str(tmp_path / "modules")}, block_package=True)
    assert "VaswaniForCausalLM" in out
    remote = torch.load(tmp_path / "out.pt")
    # The same weights and code in another process: equal up to float rounding, since that process may pick other
    # kernels or thread counts (summation order), and the same greedy tokens.
    torch.testing.assert_close(remote["logits"], expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(remote["greedy"], greedy)


# --- a language model -------------------------------------------------------------------------------------------------


def test_position_t_sees_only_the_positions_up_to_t():
    model = language_model()
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]])
    changed = ids.clone()
    changed[0, 4:] = torch.tensor([20, 21])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits[:, :4], model(input_ids=changed).logits[:, :4])
        assert not torch.allclose(model(input_ids=ids).logits[:, 4:], model(input_ids=changed).logits[:, 4:])


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_gives_the_same_tokens_with_and_without_the_cache(num_beams):
    model = language_model()
    prompt = torch.tensor([[1, 5, 6], [1, 9, 10]])
    settings = dict(do_sample=False, num_beams=num_beams, max_new_tokens=8, pad_token_id=0, eos_token_id=2)
    with torch.no_grad():
        cached = model.generate(prompt, use_cache=True, **settings)
        uncached = model.generate(prompt, use_cache=False, **settings)
    assert cached.shape[1] > prompt.shape[1]
    assert torch.equal(cached, uncached)


def test_the_loss_scores_each_position_on_the_next_token():
    """`labels` are the input ids, as for GPT-2 and Llama: position t is scored on token t + 1, per scored token."""
    model = language_model()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 9, 10, 2, 0]])
    labels = ids.masked_fill(ids == 0, -100)
    output = model(input_ids=ids, labels=labels)
    by_hand = torch.nn.functional.cross_entropy(
        output.logits[:, :-1].reshape(-1, 64), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(output.loss, by_hand)


# --- the decoder of EncoderDecoderModel --------------------------------------------------------------------------------


def bert_encoder():
    """A tiny BERT of width 24 (the decoder's is 32), so that EncoderDecoderModel adds its projection between them."""
    torch.manual_seed(1)
    config = BertConfig(
        vocab_size=50, hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    return BertModel(config, add_pooling_layer=False)


def test_encoder_decoder_model_trains_generates_and_reloads_with_the_causal_lm_as_its_decoder(tmp_path):
    decoder = language_model(add_cross_attention=True)
    model = EncoderDecoderModel(encoder=bert_encoder(), decoder=decoder)
    model.config.decoder_start_token_id, model.config.pad_token_id = 0, 0
    assert model.decoder is decoder and hasattr(model, "enc_to_dec_proj")
    source = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 0]])
    source_mask = (source != 0).long()
    labels = torch.tensor([[5, 6, 7, 2], [8, 9, 2, -100]])

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(FutureWarning):  # transformers' notice that the loss will move out of EncoderDecoderModel
        loss = model(input_ids=source, attention_mask=source_mask, labels=labels).loss
    assert torch.isfinite(loss)
    loss.backward()
    cross = decoder.model.decoder.layers[0].encoder_attn.k_proj.weight
    assert cross.grad is not None and cross.grad.abs().sum() > 0  # the decoder attends to BERT's states
    optimizer.step()

    model.eval()
    with torch.no_grad():
        generated = model.generate(
            input_ids=source, attention_mask=source_mask, do_sample=False, num_beams=1, max_new_tokens=5
        )
    assert generated.shape[0] == 2 and generated.shape[1] > 1 and (generated[:, 0] == 0).all()

    model.save_pretrained(tmp_path)
    again = EncoderDecoderModel.from_pretrained(tmp_path).eval()
    assert type(again.decoder) is VaswaniForCausalLM
    decoder_ids = torch.tensor([[0, 5, 6], [0, 8, 9]])
    with torch.no_grad():
        assert torch.equal(
            model(input_ids=source, attention_mask=source_mask, decoder_input_ids=decoder_ids).logits,
            again(input_ids=source, attention_mask=source_mask, decoder_input_ids=decoder_ids).logits,
        )


def test_from_encoder_decoder_pretrained_takes_the_decoder_of_a_translation_folder(translation_folder, tmp_path):
    seq2seq, folder = translation_folder
    bert_encoder().save_pretrained(tmp_path / "bert")
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(tmp_path / "bert", folder)
    assert type(model.decoder) is VaswaniForCausalLM
    assert model.config.decoder.is_decoder and model.config.decoder.add_cross_attention
    layer = model.decoder.model.decoder.layers[1].encoder_attn.v_proj.weight
    assert torch.equal(layer, seq2seq.model.decoder.layers[1].encoder_attn.v_proj.weight)
