"""Convert exactly between `VaswaniForConditionalGeneration` and transformers' `MarianMTModel`, in both directions.

Marian's architecture is the paper's (post-norm layers, ReLU, sinusoids, shared and scaled embeddings; Sections 3.1 to
3.5) with three differences, each handled exactly here:

- Marian always has attention-projection biases and a `final_logits_bias`. We write zeros into them when
  `attention_bias=False`, and refuse to import a non-zero `final_logits_bias`, because our model has no output bias.
- Marian lays its sinusoids out as [sin | cos] ("concatenated"). The paper's interleaved layout differs from it by a
  fixed permutation of the model dimension; every weight that reads or writes the residual stream is permuted with
  it, which leaves the function unchanged because LayerNorm is equivariant under a permutation.
- Marian's LayerNorm epsilon is fixed at 1e-5, where our default is tensor2tensor's 1e-6. The converted model's
  LayerNorms get our epsilon in memory, so its outputs match ours; a Marian folder saved from it reloads with 1e-5,
  which is why `marian_limits` exports only an epsilon close enough to it.

This gives an independent implementation to test ours against, and a way to serve trained weights through a native
architecture, because the Hub widget and Inference Endpoints do not run custom code. `export_marian` writes such a
folder (the weights, our tokenizer, a generation config that transformers' built-in `generate` understands, and a
card), with its token ids in Marian's order, `<pad>` last (`marian_vocabulary`), which CTranslate2's own converter
requires. `to_marian` and `from_marian` keep our ids: they compute the same function on the same ids, which is what
comparing two implementations needs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel

from ..configuration_vaswani import VaswaniConfig
from ..hub.card import Architecture, CardVariant, check_card_identity, read_card_inputs, render_model_card
from ..io import UsageError, atomic_output_dir, check_model_folder, check_output_dir, check_same_vocabulary, read_json
from ..io.models import copy_model_files
from ..modeling_vaswani import VaswaniForConditionalGeneration
from ..tokenization import declare_plain_tokenizer
from .marian_limits import marian_refusals
from .marian_vocabulary import check_relabelled_tokenizer, move_pad_last, relabel_tokenizer_files

MARIAN_FOLDER = "MarianMTModel folder"  # The kind of folder this module writes (see vaswani_hf.io.outputs).


def interleaved_to_concatenated(d_model: int) -> torch.Tensor:
    """Return the index map `perm` with concatenated[..., perm[j]] == interleaved[..., j].

    These are Section 3.5's sinusoids in two layouts: interleaved puts sin_i at 2i and cos_i at 2i+1, and
    concatenated puts sin_i at i and cos_i at d/2 + i."""
    j = torch.arange(d_model)
    return torch.where(j % 2 == 0, j // 2, d_model // 2 + j // 2)


# Each entry holds our parameter suffix, Marian's parameter suffix, and the axes of the weight and of the bias that
# lie along the model dimension D.
_ATTENTION = [("q_proj", "q_proj", 1), ("k_proj", "k_proj", 1), ("v_proj", "v_proj", 1), ("out_proj", "out_proj", 0)]
_FEED_FORWARD = [("feed_forward.fc1", "fc1", 1), ("feed_forward.fc2", "fc2", 0)]
_LAYER_NORMS = ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"]


def _layer_map(config: VaswaniConfig):
    """Yield (our name, Marian name, axis) for every per-layer tensor, where the axis is the one along the model
    dimension D, which the sinusoid layout permutes, or None if the tensor has none."""
    for stack, num_layers in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
        attentions = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
        for i in range(num_layers):
            prefix = f"model.{stack}.layers.{i}"
            for attention in attentions:
                for ours, theirs, axis in _ATTENTION:
                    yield f"{prefix}.{attention}.{ours}.weight", f"{prefix}.{attention}.{theirs}.weight", axis
                    # A bias has the output axis only: the D axis for out_proj, and none for the input projections.
                    yield (
                        f"{prefix}.{attention}.{ours}.bias",
                        f"{prefix}.{attention}.{theirs}.bias",
                        0 if ours == "out_proj" else None,
                    )
            for ours, theirs, axis in _FEED_FORWARD:
                yield f"{prefix}.{ours}.weight", f"{prefix}.{theirs}.weight", axis
                yield f"{prefix}.{ours}.bias", f"{prefix}.{theirs}.bias", 0 if axis == 0 else None
            for norm in _LAYER_NORMS:
                if norm == "encoder_attn_layer_norm" and stack == "encoder":
                    continue
                yield f"{prefix}.{norm}.weight", f"{prefix}.{norm}.weight", 0
                yield f"{prefix}.{norm}.bias", f"{prefix}.{norm}.bias", 0


def _embedding_map(config: VaswaniConfig):
    names = (
        ("model.shared.weight",)
        if config.tie_word_embeddings
        else ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
    )
    return [(name, name, 1) for name in names]


def marian_config_from(config: VaswaniConfig) -> MarianConfig:
    """Return the `MarianConfig` of a model that computes the same function as one of `config`."""
    # An export's refusals apply, except the one about LayerNorm's epsilon: the converted model keeps ours in memory,
    # and only a saved folder would reload with Marian's.
    problems = [problem for problem in marian_refusals(config) if not problem.startswith("layer_norm_eps")]
    if problems:
        raise ValueError(f"to_marian: {problems[0]}")
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.num_encoder_layers,
        decoder_layers=config.num_decoder_layers,
        encoder_attention_heads=config.num_heads,
        decoder_attention_heads=config.num_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function="relu",
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.relu_dropout,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
        bos_token_id=config.bos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=config.tie_word_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
    )


@torch.no_grad()
def to_marian(model: VaswaniForConditionalGeneration) -> MarianMTModel:
    """Return a `MarianMTModel` that computes exactly the same function as `model`; fp32 logits agree to about 1e-6."""
    config = model.config
    marian = MarianMTModel(marian_config_from(config)).to(dtype=model.dtype)
    ours = model.state_dict()
    theirs = marian.state_dict()
    perm = interleaved_to_concatenated(config.d_model) if config.sinusoid_layout == "interleaved" else None
    for our_name, marian_name, axis in [*_embedding_map(config), *_layer_map(config)]:
        if our_name not in ours:  # The paper's model has no attention bias, so Marian's stays zero.
            theirs[marian_name].zero_()
            continue
        tensor = ours[our_name]
        if perm is not None and axis is not None:
            # concatenated[..., perm[j]] = interleaved[..., j]
            tensor = torch.empty_like(tensor).index_copy_(axis, perm.to(tensor.device), tensor)
        theirs[marian_name].copy_(tensor)
    theirs["final_logits_bias"].zero_()
    marian.load_state_dict(theirs, strict=False)
    marian.tie_weights()
    for module in marian.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = config.layer_norm_eps
    marian.generation_config.decoder_start_token_id = config.decoder_start_token_id
    return marian.train(model.training)


@torch.no_grad()
def from_marian(
    marian: MarianMTModel, sinusoid_layout: str = "concatenated", **config_overrides
) -> VaswaniForConditionalGeneration:
    """Return a `VaswaniForConditionalGeneration` that computes exactly the same function as `marian`.

    With `sinusoid_layout="interleaved"` the model dimension is permuted so that the result uses the paper's layout.
    The attention biases are kept (`attention_bias=True`) unless they are all zero, as they are in a model that
    `to_marian` converted from the paper's."""
    mc = marian.config
    if mc.activation_function != "relu":
        raise ValueError(f"from_marian: the paper's FFN uses ReLU; this Marian model uses {mc.activation_function!r}.")
    if bool(marian.final_logits_bias.abs().max() > 0):
        raise ValueError(
            "from_marian: non-zero final_logits_bias cannot be represented (the paper has no output bias)."
        )
    if mc.decoder_vocab_size not in (None, mc.vocab_size):
        raise ValueError("from_marian: source and target vocabularies differ; the paper shares one vocabulary.")
    state = marian.state_dict()
    bias_names = [name for name in state if name.endswith(("_proj.bias",)) and "attn" in name]
    attention_bias = any(bool(state[name].abs().max() > 0) for name in bias_names)
    layer_norm_eps = next(m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm))
    settings = dict(
        vocab_size=mc.vocab_size,
        d_model=mc.d_model,
        d_ff=mc.encoder_ffn_dim,
        num_heads=mc.encoder_attention_heads,
        num_encoder_layers=mc.encoder_layers,
        num_decoder_layers=mc.decoder_layers,
        dropout=mc.dropout,
        attention_dropout=mc.attention_dropout,
        relu_dropout=mc.activation_dropout,
        max_position_embeddings=mc.max_position_embeddings,
        sinusoid_layout=sinusoid_layout,
        attention_bias=attention_bias,
        layer_norm_eps=layer_norm_eps,
        scale_embedding=mc.scale_embedding,
        tie_word_embeddings=bool(mc.share_encoder_decoder_embeddings and mc.tie_word_embeddings),
        pad_token_id=mc.pad_token_id,
        eos_token_id=mc.eos_token_id,
        bos_token_id=mc.bos_token_id,
        decoder_start_token_id=mc.decoder_start_token_id,
    )
    settings.update(config_overrides)
    config = VaswaniConfig(**settings)
    model = VaswaniForConditionalGeneration(config).to(dtype=marian.dtype)
    ours = model.state_dict()
    perm = interleaved_to_concatenated(config.d_model) if sinusoid_layout == "interleaved" else None
    for our_name, marian_name, axis in [*_embedding_map(config), *_layer_map(config)]:
        if our_name not in ours:
            continue
        tensor = state[marian_name]
        if perm is not None and axis is not None:
            tensor = tensor.index_select(axis, perm.to(tensor.device))  # interleaved[..., j] = concatenated[perm[j]]
        ours[our_name].copy_(tensor)
    model.load_state_dict(ours, strict=False)
    model.tie_weights()
    return model.train(marian.training)


# A native MarianMTModel folder.


def marian_generation_config(generation: dict, config) -> GenerationConfig:
    """Return our decoding settings restricted to what transformers' built-in `generate` understands.

    It has no GNMT length penalty and no per-sentence length limit, so only the beam size, alpha, early stopping and
    the n-gram block carry over, and the length is capped globally."""
    keys = ("num_beams", "length_penalty", "early_stopping", "no_repeat_ngram_size")
    settings = {key: generation[key] for key in keys if generation.get(key) is not None}
    # Beam-search settings are dropped for greedy search, because transformers refuses to save them with it.
    if settings.get("num_beams", 1) == 1:
        settings = {key: value for key, value in settings.items() if key not in ("length_penalty", "early_stopping")}
    # max_length is a global cap because Marian's sinusoid table has max_position_embeddings rows.
    return GenerationConfig(
        **settings,
        max_length=config.max_position_embeddings,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        forced_eos_token_id=None,
    )


def _copy_tokenizer(model_dir: Path, out_dir: Path, new_of_old: list[int]) -> None:
    """Copy the tokenizer files into `out_dir` and relabel them to the export's token order (`marian_vocabulary`).

    The files are otherwise copied as they are, because loading and saving the tokenizer again would add loader state
    to tokenizer_config.json."""
    copy_model_files(
        model_dir,
        out_dir,
        # Only the tokenizer's files: the weights and configs are converted, and a file that is not a model
        # folder's declared file is left out and named in a warning.
        only=(
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "added_tokens.json",
        ),
    )
    relabel_tokenizer_files(out_dir, new_of_old)
    # Serving stacks may run transformers 4, which does not know the tokenizer class that transformers 5 saves.
    declare_plain_tokenizer(out_dir)


def count_marian_parameters(marian: MarianMTModel) -> int:
    """Count the parameters of a `MarianMTModel` converted by `to_marian` as the original's are counted.

    The fixed sinusoid tables (`embed_positions`) and the all-zero attention biases are left out, because Marian
    stores them but the paper's model does not have them."""
    total = 0
    for name, parameter in marian.named_parameters():
        if "embed_positions" in name:
            continue
        if name.endswith("_proj.bias") and "attn" in name and not bool(parameter.detach().abs().max() > 0):
            continue
        total += parameter.numel()
    return total


def _marian_architecture(config: dict) -> Architecture:
    """Return the card's architecture table for a `marian` config.json."""
    d_model, heads = config["d_model"], config["encoder_attention_heads"]
    return Architecture(
        name="MarianMTModel (converted)",
        encoder_layers=config["encoder_layers"],
        decoder_layers=config["decoder_layers"],
        d_model=d_model,
        d_ff=config["encoder_ffn_dim"],
        heads=heads,
        d_k=d_model // heads,
        d_v=d_model // heads,
        positions="sinusoidal ([sin | cos] layout)",
        vocab_size=config["vocab_size"],
        tied=config.get("tie_word_embeddings", True),
    )


def _decodes_like_ours(generation: dict) -> bool:
    """Return whether transformers' built-in beam search decodes as our `generate` does with these settings.

    It does only when they use transformers' length penalty (or greedy search) and no per-sentence length limit.
    """
    return (
        generation.get("length_penalty_type", "hf") == "hf" or generation.get("num_beams", 1) == 1
    ) and generation.get("max_length_b") is None


# How the card of a native Marian folder differs from ours (vaswani_hf.hub.card.CardVariant).
MARIAN_CARD = CardVariant(
    name="marian",
    tags=("marian",),
    architecture=_marian_architecture,
    count_parameters=count_marian_parameters,
    decodes_as_measured=_decodes_like_ours,
    decoding_note=(
        "The original model decodes with the GNMT length penalty and a per-sentence length limit (input + 50); "
        "`generation_config.json` here keeps the beam size and alpha for transformers' built-in beam search, "
        "which divides by |Y| ** alpha instead and uses one global `max_length`."
    ),
    results_note=(
        "These scores were measured with the original implementation's decoding (see Decoding). The native "
        "MarianMTModel computes the same function, but transformers' built-in beam search normalises lengths "
        "differently and has no per-sentence length limit, so its translations, and scores, can differ "
        "slightly; they are therefore not declared as this repository's model-index results."
    ),
    global_max_length=True,
)


def _check_marian_paths(model_dir, out_dir, overwrite: bool) -> tuple[Path, Path]:
    """Check both folders before any work and return them as checked paths, raising a UsageError for a bad one.

    The input must be a complete vaswani model folder whose tokenizer has the model's vocabulary size
    (`check_same_vocabulary`). The output must differ from it and be new or empty, or else an earlier Marian export
    when `overwrite` is given.
    """
    model_dir = check_model_folder(Path(model_dir), what="model folder", vaswani_only=True)
    out_dir = Path(out_dir)
    if out_dir.resolve() == model_dir.resolve():
        raise UsageError(f"output folder {out_dir} is the model folder; choose another")
    check_same_vocabulary(model_dir, model_dir)
    return model_dir, check_output_dir(out_dir, overwrite=overwrite, what="Marian output folder", kind=MARIAN_FOLDER)


def export_marian(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    metrics: Mapping | None = None,
    training_info: Mapping | None = None,
    repo_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a native `MarianMTModel` folder that computes exactly the function of the vaswani model in `model_dir`.

    The folder also holds its tokenizer (our `tokenizer.json`, loaded by `AutoTokenizer`), a generation config and a
    card.

    The folder's token ids follow Marian's order, with `<pad>` last: `marian_vocabulary` turns id i into
    (i - pad - 1) mod V in the weights and the tokenizer together, so that CTranslate2's own converter and the rest of
    the OPUS-MT tool chain accept it. On the same text its logits are ours with the vocabulary axis permuted.

    `metrics` and `training_info` default to the `metrics.json` that `write_model_card` wrote in `model_dir`. Without
    `training_info`, which names the languages, no card is written. Both folders are checked before any work. The
    folder is written beside `out_dir` and renamed into place, and an existing non-empty `out_dir` is replaced only
    with `overwrite`. Returns `out_dir`."""
    from transformers import AutoTokenizer

    model_dir, out_dir = _check_marian_paths(model_dir, out_dir, overwrite)
    record = read_card_inputs(model_dir)
    metrics = metrics if metrics is not None else record.get("metrics")
    training_info = training_info if training_info is not None else record.get("training_info")
    info = training_info if isinstance(training_info, Mapping) else {}
    # The repository id and languages are checked before any work, so that a bad one costs no conversion.
    check_card_identity(repo_id, info.get("source_lang"), info.get("target_lang"))
    model = VaswaniForConditionalGeneration.from_pretrained(model_dir).eval()
    marian = to_marian(model).eval()
    gen_path = model_dir / "generation_config.json"
    generation = read_json(gen_path) if gen_path.is_file() else model.generation_config.to_dict()
    marian.generation_config = marian_generation_config(generation, model.config)
    # <pad> last, as the OPUS-MT tool chain expects (marian_vocabulary).
    new_of_old = move_pad_last(marian)
    with atomic_output_dir(out_dir, kind=MARIAN_FOLDER, overwrite=overwrite) as tmp:
        marian.save_pretrained(tmp)
        _copy_tokenizer(model_dir, tmp, new_of_old)
        # Fail here, not on the Hub, if the copied tokenizer does not load or disagrees with the relabelled weights.
        check_relabelled_tokenizer(
            AutoTokenizer.from_pretrained(model_dir), AutoTokenizer.from_pretrained(tmp), new_of_old, tmp
        )
        if training_info:
            # The card's decoding section describes the settings the scores were measured with: the original's.
            card = render_model_card(
                marian,
                metrics,
                training_info,
                repo_id=repo_id,
                variant=MARIAN_CARD,
                widget_examples=record.get("widget_examples"),
                generation_config=generation,
            )
            card.save(tmp / "README.md")
    return out_dir
