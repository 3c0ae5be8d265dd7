"""Exact conversion between `VaswaniForConditionalGeneration` and transformers' `MarianMTModel`.

Marian's architecture is the paper's (post-norm, ReLU, sinusoids, shared scaled embeddings) with three differences,
each handled exactly here:
- Marian always has attention-projection biases and a `final_logits_bias`: we write zeros when
  `attention_bias=False`, and refuse to import a non-zero `final_logits_bias` (our model has none).
- Marian lays sinusoids out as [sin | cos] ("concatenated"). The paper's interleaved layout differs by a fixed
  permutation of the model dimension; every weight that reads or writes the residual stream is permuted with it,
  which leaves the function unchanged (LayerNorm is permutation-equivariant).
- Marian's LayerNorm epsilon is fixed at 1e-5 (our default is t2t's 1e-6). The converted model's LayerNorms get our
  epsilon in memory, so outputs match; a Marian folder saved from it reloads with 1e-5 (differences ~1e-6).

This gives an independent implementation to test ours against, and a way to serve trained weights through a
native architecture (the Hub widget and Inference Endpoints do not run custom code).
"""

import torch
from transformers import MarianConfig, MarianMTModel

from .configuration_vaswani import VaswaniConfig
from .modeling_vaswani import VaswaniForConditionalGeneration


def interleaved_to_concatenated(d_model: int) -> torch.Tensor:
    """Index map `perm` with concatenated[..., perm[j]] == interleaved[..., j] (Section 3.5's two layouts).

    Interleaved dimension 2i holds sin_i and 2i+1 holds cos_i; concatenated holds sin_i at i and cos_i at d/2 + i.
    """
    j = torch.arange(d_model)
    return torch.where(j % 2 == 0, j // 2, d_model // 2 + j // 2)


# (our parameter suffix, Marian parameter suffix, axes along the model dimension D of the weight / bias)
_ATTENTION = [("q_proj", "q_proj", 1), ("k_proj", "k_proj", 1), ("v_proj", "v_proj", 1), ("out_proj", "out_proj", 0)]
_FEED_FORWARD = [("feed_forward.fc1", "fc1", 1), ("feed_forward.fc2", "fc2", 0)]
_LAYER_NORMS = ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"]


def _layer_map(config: VaswaniConfig):
    """Yield (our name, Marian name, D axis or None) for every per-layer tensor."""
    for stack, num_layers in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
        attentions = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
        for i in range(num_layers):
            prefix = f"model.{stack}.layers.{i}"
            for attention in attentions:
                for ours, theirs, axis in _ATTENTION:
                    yield f"{prefix}.{attention}.{ours}.weight", f"{prefix}.{attention}.{theirs}.weight", axis
                    # a bias has the output axis only: the D axis for out_proj, none for the input projections
                    yield (f"{prefix}.{attention}.{ours}.bias", f"{prefix}.{attention}.{theirs}.bias",
                           0 if ours == "out_proj" else None)
            for ours, theirs, axis in _FEED_FORWARD:
                yield f"{prefix}.{ours}.weight", f"{prefix}.{theirs}.weight", axis
                yield f"{prefix}.{ours}.bias", f"{prefix}.{theirs}.bias", 0 if axis == 0 else None
            for norm in _LAYER_NORMS:
                if norm == "encoder_attn_layer_norm" and stack == "encoder":
                    continue
                yield f"{prefix}.{norm}.weight", f"{prefix}.{norm}.weight", 0
                yield f"{prefix}.{norm}.bias", f"{prefix}.{norm}.bias", 0


def _embedding_map(config: VaswaniConfig):
    if config.tie_word_embeddings:
        return [("model.shared.weight", "model.shared.weight", 1)]
    return [
        ("model.encoder.embed_tokens.weight", "model.encoder.embed_tokens.weight", 1),
        ("model.decoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", 1),
        ("lm_head.weight", "lm_head.weight", 1),
    ]


def marian_config_from(config: VaswaniConfig) -> MarianConfig:
    """The `MarianConfig` that computes the same function as `config`."""
    if config.position_encoding != "sinusoidal":
        raise ValueError("to_marian: MarianMTModel has only sinusoidal positions; this model uses learned ones.")
    if config.d_k * config.num_heads != config.d_model or config.d_v * config.num_heads != config.d_model:
        raise ValueError(
            f"to_marian: MarianMTModel needs d_k = d_v = d_model / num_heads; got d_k={config.d_k}, d_v={config.d_v}, "
            f"d_model={config.d_model}, num_heads={config.num_heads}."
        )
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
    """A `MarianMTModel` computing exactly the same function as `model` (fp32 logits agree to ~1e-6)."""
    config = model.config
    marian = MarianMTModel(marian_config_from(config)).to(dtype=model.dtype)
    ours = model.state_dict()
    theirs = marian.state_dict()
    perm = interleaved_to_concatenated(config.d_model) if config.sinusoid_layout == "interleaved" else None
    for our_name, marian_name, axis in [*_embedding_map(config), *_layer_map(config)]:
        if our_name not in ours:  # no attention bias in the paper's model: Marian's stays zero
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
def from_marian(marian: MarianMTModel, sinusoid_layout: str = "concatenated", **config_overrides
                ) -> VaswaniForConditionalGeneration:
    """A `VaswaniForConditionalGeneration` computing exactly the same function as `marian`.

    With `sinusoid_layout="interleaved"` the model dimension is permuted so that the result uses the paper's layout.
    The attention biases are kept (`attention_bias=True`) unless they are all zero.
    """
    mc = marian.config
    if mc.activation_function != "relu":
        raise ValueError(f"from_marian: the paper's FFN uses ReLU; this Marian model uses {mc.activation_function!r}.")
    if bool(marian.final_logits_bias.abs().max() > 0):
        raise ValueError("from_marian: non-zero final_logits_bias cannot be represented "
                         "(the paper has no output bias).")
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


# ---------------------------------------------------------------------------------------------------------------------
# CTranslate2 export (issue 8): a `ctranslate2.specs.TransformerSpec` filled directly from our weights
# ---------------------------------------------------------------------------------------------------------------------

CT2_METADATA_FILE = "vaswani_ctranslate2.json"
_CT2_DEFAULT_MAX_POSITIONS = 1024


def _import_ctranslate2():
    try:
        import ctranslate2  # noqa: F401
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "CTranslate2 export and decoding need the optional dependency `ctranslate2`: "
            "pip install 'vaswani_hf[ct2]'  (or: pip install ctranslate2)"
        ) from error
    return ctranslate2, common_spec, transformer_spec


def _ct2_vocabulary(tokenizer, config: VaswaniConfig) -> list[str]:
    """Our token strings in id order 0..V-1, exactly as the tokenizer maps them (no reordering, no <pad> removal).

    Ids the tokenizer does not know (a model vocabulary padded beyond the tokenizer) get unique placeholders.
    """
    id_to_token = {index: token for token, index in tokenizer.get_vocab().items()}
    if id_to_token and max(id_to_token) >= config.vocab_size:
        raise ValueError(
            f"to_ctranslate2: the tokenizer has ids up to {max(id_to_token)} but the model's vocab_size is "
            f"{config.vocab_size}; they must describe the same vocabulary."
        )
    tokens = [id_to_token.get(i, f"<vaswani_unused_{i}>") for i in range(config.vocab_size)]
    if len(set(tokens)) != len(tokens):
        raise ValueError("to_ctranslate2: duplicate token strings in the vocabulary ; CTranslate2 maps by string.")
    for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        index = getattr(config, name)
        if not isinstance(index, int) or not 0 <= index < config.vocab_size or index not in id_to_token:
            raise ValueError(f"to_ctranslate2: config.{name}={index!r} is not an id of the tokenizer's vocabulary.")
    return tokens


def _ct2_special_token(tokens: list[str], index, fallback: str) -> str:
    return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else fallback


def _load_for_ctranslate2(model_or_folder, tokenizer):
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    if isinstance(model_or_folder, VaswaniForConditionalGeneration):
        model, folder = model_or_folder, None
    else:
        folder = str(model_or_folder)
        model = VaswaniForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
    if tokenizer is None:
        if folder is None:
            raise ValueError("to_ctranslate2: pass `tokenizer=` (a tokenizer or its folder) with an in-memory model.")
        tokenizer = folder
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    return model, tokenizer


@torch.no_grad()
def _ct2_spec(model: VaswaniForConditionalGeneration, tokens: list[str], max_positions: int, unk_token: str = "<unk>"):
    """Fill a CTranslate2 `TransformerSpec` that computes exactly `model`'s function."""
    import math

    from .modeling_vaswani import sinusoid_table

    _, common_spec, transformer_spec = _import_ctranslate2()
    config = model.config
    if config.d_k != config.d_v:
        raise ValueError(
            f"to_ctranslate2: CTranslate2 attention needs d_k == d_v (one head_dim); got d_k={config.d_k}, "
            f"d_v={config.d_v} (Table 3, row B)."
        )
    head_dim = None if config.d_k * config.num_heads == config.d_model else config.d_k
    # Copies: CTranslate2's quantization works in place on numpy views of the tensors it is given.
    state = {name: tensor.detach().to(torch.float32, copy=True).contiguous()
             for name, tensor in model.state_dict().items()}

    def spec_kwargs():
        return dict(pre_norm=False, activation=common_spec.Activation.RELU, head_dim=head_dim)

    # pre_norm=False: post-norm layers LayerNorm(x + Sublayer(x)) and no final LayerNorm on either stack (CTranslate2
    # creates `layer_norm` at the end of a stack only for pre-norm models).
    encoder_spec = transformer_spec.TransformerEncoderSpec(config.num_encoder_layers, config.num_heads, **spec_kwargs())
    decoder_spec = transformer_spec.TransformerDecoderSpec(config.num_decoder_layers, config.num_heads, **spec_kwargs())
    spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)

    def linear(linear_spec, prefixes):
        """One CTranslate2 linear layer from one or more of ours, fused along the output axis (Q|K|V, K|V)."""
        linear_spec.weight = torch.cat([state[f"{p}.weight"] for p in prefixes], dim=0)
        if f"{prefixes[0]}.bias" in state:  # the paper's projections have none: CTranslate2's bias stays unset
            linear_spec.bias = torch.cat([state[f"{p}.bias"] for p in prefixes], dim=0)

    def layer_norm(norm_spec, prefix):
        norm_spec.gamma = state[f"{prefix}.weight"]
        norm_spec.beta = state[f"{prefix}.bias"]

    def positions(stack):
        if config.position_encoding == "sinusoidal":
            # Always written explicitly: CTranslate2's built-in sinusoids are OpenNMT-tf's (timescale denominator
            # d/2 - 1, positions from 1, [sin | cos]), not the paper's. The table is in the model's own layout, so
            # interleaved and concatenated models both export exactly, with no permutation of the weights.
            return sinusoid_table(max_positions, config.d_model, config.sinusoid_layout)
        return state[f"model.{stack}.embed_positions.weight"]  # learned (Table 3, row E): max_position_embeddings rows

    embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    if config.tie_word_embeddings:
        source_embedding = target_embedding = projection = state["model.shared.weight"]
    else:
        source_embedding = state["model.encoder.embed_tokens.weight"]
        target_embedding = state["model.decoder.embed_tokens.weight"]
        projection = state["lm_head.weight"]

    for stack, stack_spec in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        stack_spec.scale_embeddings = embed_scale
        stack_spec.position_encodings.encodings = positions(stack)
        for i, layer_spec in enumerate(stack_spec.layer):
            prefix = f"model.{stack}.layers.{i}"
            attn = f"{prefix}.self_attn"
            linear(layer_spec.self_attention.linear[0], [f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"])
            linear(layer_spec.self_attention.linear[1], [f"{attn}.out_proj"])
            layer_norm(layer_spec.self_attention.layer_norm, f"{prefix}.self_attn_layer_norm")
            if stack == "decoder":
                cross = f"{prefix}.encoder_attn"
                linear(layer_spec.attention.linear[0], [f"{cross}.q_proj"])
                linear(layer_spec.attention.linear[1], [f"{cross}.k_proj", f"{cross}.v_proj"])
                linear(layer_spec.attention.linear[2], [f"{cross}.out_proj"])
                layer_norm(layer_spec.attention.layer_norm, f"{prefix}.encoder_attn_layer_norm")
            linear(layer_spec.ffn.linear_0, [f"{prefix}.feed_forward.fc1"])
            linear(layer_spec.ffn.linear_1, [f"{prefix}.feed_forward.fc2"])
            layer_norm(layer_spec.ffn.layer_norm, f"{prefix}.final_layer_norm")
    spec.encoder.embeddings[0].weight = source_embedding
    spec.decoder.embeddings.weight = target_embedding
    spec.decoder.projection.weight = projection  # no output bias; identical tensors are aliased on save
    # The decoder starts from the real embedding of decoder_start_token (<pad>, whose row is zero in our models),
    # so `start_from_zero_embedding` stays False and a non-zero start row would also be reproduced exactly.

    spec.config.layer_norm_epsilon = float(config.layer_norm_eps)
    spec.config.unk_token = unk_token
    spec.config.bos_token = _ct2_special_token(tokens, config.bos_token_id, "<s>")
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    spec.config.eos_token = tokens[eos]
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    # Our tokenizer appends </s> to every source sentence itself: CTranslate2 must not add BOS/EOS again.
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    return spec


def to_ctranslate2(model_or_folder, out_dir, quantization: str | None = None, tokenizer=None, *,
                   max_positions: int | None = None, force: bool = False):
    """Write a CTranslate2 model (`ctranslate2.Translator` loads it) computing exactly our model's function.

    The `TransformerSpec` is filled directly (not through CTranslate2's Marian converter, which assumes Marian C++
    conventions: `<pad>` last in the vocabulary and removed, decoder started from a zero vector with `</s>`):
    post-norm, ReLU, shared scaled embeddings, no final LayerNorm, no attention biases (unless the model has them),
    our vocabulary in our id order (<pad>=0 <s>=1 </s>=2 <unk>=3), decoder start token <pad>, and the position table
    written out in the model's own sinusoid layout (interleaved or concatenated).

    Args:
        model_or_folder: a `VaswaniForConditionalGeneration` or a folder saved by `save_pretrained`.
        out_dir: output folder (created). Holds model.bin, config.json, shared_vocabulary.json, the tokenizer files
            and `vaswani_ctranslate2.json` (position-table size and generation defaults, read by
            `vaswani_hf.ctranslate2_backend`).
        quantization: None (float32 weights), "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
            "float16", "bfloat16" (CTranslate2's weight types; the compute type is chosen when loading).
        tokenizer: tokenizer or its folder; default: the model folder. Its files are copied next to the model.
        max_positions: rows of the exported sinusoid table, i.e. the longest source and the longest output
            (start token included) CTranslate2 can process; default max(max_position_embeddings, 1024). CTranslate2
            cannot extend the table on demand as our model does. Learned positions keep their own table.
        force: overwrite a non-empty `out_dir`.

    Source sentences must be given to CTranslate2 as our tokenizer produces them, `</s>` included
    (`add_source_eos` is False); `vaswani_hf.ctranslate2_backend.translate_ctranslate2` does this for you.

    Returns:
        the output folder as a `Path`.
    """
    import json
    import shutil
    from pathlib import Path

    ctranslate2, _, _ = _import_ctranslate2()
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        if not force:
            raise FileExistsError(f"to_ctranslate2: {out_dir} exists and is not empty; pass force=True to overwrite.")
        shutil.rmtree(out_dir)
    model, tokenizer = _load_for_ctranslate2(model_or_folder, tokenizer)
    config = model.config
    if config.position_encoding == "sinusoidal":
        max_positions = int(max_positions or max(config.max_position_embeddings, _CT2_DEFAULT_MAX_POSITIONS))
    else:
        if max_positions not in (None, config.max_position_embeddings):
            raise ValueError("to_ctranslate2: learned positions have exactly max_position_embeddings rows.")
        max_positions = config.max_position_embeddings
    tokens = _ct2_vocabulary(tokenizer, config)
    spec = _ct2_spec(model, tokens, max_positions, unk_token=tokenizer.unk_token or "<unk>")
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))

    generation = getattr(model, "generation_config", None)
    metadata = {
        "format": "vaswani_hf CTranslate2 export",
        "ctranslate2_version": ctranslate2.__version__,
        "quantization": quantization or "float32",
        "max_positions": max_positions,
        "position_encoding": config.position_encoding,
        "sinusoid_layout": config.sinusoid_layout,
        "source_ends_with_eos": True,
        "generation": {  # defaults for vaswani_hf.ctranslate2_backend (None: not set in the model's config)
            key: getattr(generation, key, None)
            for key in ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_length_b")
        },
    }
    (out_dir / CT2_METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return out_dir
