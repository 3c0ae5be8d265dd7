"""Export our model to CTranslate2 by filling a `ctranslate2.specs.TransformerSpec` directly from our weights.

This is hand-written because CTranslate2's own converters do not fit our model. Its Marian converter assumes the
conventions of Marian C++ (`<pad>` last in the vocabulary and then removed, the decoder started from a zero vector
with `</s>`), and its built-in sinusoids are OpenNMT-tf's, not the paper's (Section 3.5). Filling the spec ourselves
keeps our vocabulary in our id order, keeps <pad> as the decoder's start token, builds post-norm layers without a
final LayerNorm (Section 3.1), and writes the position table out in the model's own layout, so the exported network
computes exactly our function: its float32 log-probabilities agree with ours to float32 rounding (the tests ask for
1e-4 on every token). Translating with the export is `vaswani_hf.export.ctranslate2`'s job.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..configuration_vaswani import MAX_POSITIONS, SettingError, VaswaniConfig
from ..io import UsageError, atomic_output_dir, check_model_folder, check_output_dir, check_same_vocabulary
from ..io.files import CT2_METADATA, read_json
from ..io.models import tokenizer_tokens
from ..modeling_vaswani import VaswaniForConditionalGeneration, sinusoid_table
from ..settings import GENERATION_SETTINGS, settings_of

CT2_METADATA_FILE = "vaswani_ctranslate2.json"
_CT2_DEFAULT_MAX_POSITIONS = 1024
# The decoding options the export records for `vaswani_hf.export.ctranslate2`. Each is None where the model's
# generation config does not set it.
GENERATION_KEYS = ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_length_b")
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


@dataclass
class ExportSettings:
    """Declare the settings of an export: `to_ctranslate2`'s arguments and vaswani-export-ctranslate2's flags."""

    quantization: str | None = field(
        default=None, metadata={"help": "weight type (default: float32)", "choices": QUANTIZATIONS}
    )
    max_positions: int | None = field(
        default=None,
        metadata={
            "help": "rows of the exported sinusoid table = longest source/output CTranslate2 accepts "
            "(default: max(max_position_embeddings, 1024))",
            "min": 1,
            "max": MAX_POSITIONS,
        },
    )


EXPORT_SETTINGS = settings_of(ExportSettings)

CT2_FOLDER = "CTranslate2 model folder"  # The kind of folder this module writes (see vaswani_hf.io.outputs).


def import_ctranslate2():
    """Import and return (ctranslate2, common_spec, transformer_spec).

    Without the optional extra, raise a UsageError saying how to install it.
    """
    try:
        import ctranslate2
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError:  # pragma: no cover - this runs only without the extra.
        raise UsageError(
            "CTranslate2 export and decoding need the optional dependency `ctranslate2`: "
            "pip install 'vaswani_hf[ct2]'  (or: pip install ctranslate2)"
        ) from None
    return ctranslate2, common_spec, transformer_spec


def _vocabulary(tokenizer, config: VaswaniConfig) -> list[str]:
    """Return our token strings in id order 0..V-1, exactly as the tokenizer maps them.

    Nothing is reordered and <pad> is not removed, because CTranslate2 maps the strings to the rows of our embedding
    by position. Ids the tokenizer does not use (gaps in its id range) get unique placeholders. That the sizes agree
    was checked before, in `_checked_sources`."""
    id_to_token = tokenizer_tokens(tokenizer)
    if id_to_token and max(id_to_token) >= config.vocab_size:
        raise UsageError(
            f"to_ctranslate2: the tokenizer has ids up to {max(id_to_token)} but the model's vocab_size "
            f"is {config.vocab_size}; they must describe the same vocabulary."
        )
    tokens = [id_to_token.get(i, f"<vaswani_unused_{i}>") for i in range(config.vocab_size)]
    if len(set(tokens)) != len(tokens):
        raise UsageError("to_ctranslate2: duplicate token strings in the vocabulary ; CTranslate2 maps by string.")
    for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        index = getattr(config, name)
        if not isinstance(index, int) or not 0 <= index < config.vocab_size or index not in id_to_token:
            raise UsageError(f"to_ctranslate2: config.{name}={index!r} is not an id of the tokenizer's vocabulary.")
    return tokens


def check_one_vocabulary(ours: dict[int, str], theirs: dict[int, str], which: str, advice: str) -> None:
    """Check that two {id: token} maps are one vocabulary, and raise a UsageError naming the first id that differs.

    The message reads "{which} are not one vocabulary (id 7 is ...); {advice}". An id absent from `ours` stands for
    the export's placeholder `<vaswani_unused_N>`.

    CTranslate2 maps token strings to rows, so another tokenizer of the same size would translate garbage, and the
    sizes alone cannot show that."""
    for index in sorted(set(ours) | set(theirs)):
        mine, other = ours.get(index, f"<vaswani_unused_{index}>"), theirs.get(index)
        if mine != other:
            raise UsageError(
                f"{which} are not one vocabulary (id {index} is {mine!r} in one, "
                f"{'absent' if other is None else repr(other)} in the other); {advice}"
            )


def check_metadata(path: str | os.PathLike) -> dict:
    """Read and check the vaswani_ctranslate2.json of a CTranslate2 export, and return its content.

    First the file's shape is checked (`CT2_METADATA`), then each decoding option recorded under "generation" against
    its declaration in `GENERATION_SETTINGS` (its type and bounds; null means not recorded). A problem raises a
    UsageError naming the file and the field."""
    metadata = read_json(path, CT2_METADATA)
    for key, value in metadata.get("generation", {}).items():
        if key in GENERATION_KEYS and value is not None:
            try:
                GENERATION_SETTINGS[key].check(value, f"{path}: field generation")
            except SettingError as error:
                raise UsageError(f"{error}; export the model again (vaswani-export-ctranslate2)") from None
    return metadata


def _check_folder_tokenizer(folder: Path, tokenizer) -> None:
    """Check that a tokenizer given with a model folder has the vocabulary of the folder's own tokenizer, if any.

    The same vocabulary means the same tokens at the same ids; a difference raises a UsageError
    (`check_one_vocabulary`). Comparing the sizes alone would miss a tokenizer retrained to the same size.
    """
    if not (folder / "tokenizer.json").is_file():
        return
    if isinstance(tokenizer, (str, os.PathLike)) and Path(tokenizer).resolve() == folder.resolve():
        return
    given = f"the tokenizer in {tokenizer}" if isinstance(tokenizer, (str, os.PathLike)) else "the given tokenizer"
    check_one_vocabulary(
        tokenizer_tokens(tokenizer),
        tokenizer_tokens(folder),
        f"to_ctranslate2: {given} and the model's own tokenizer ({folder / 'tokenizer.json'})",
        "leave the tokenizer out or give the one the model was trained with",
    )


def _checked_sources(model_or_folder, tokenizer):
    """Check the model and tokenizer before anything is loaded, and return them as (model or folder, tokenizer).

    A folder must be a complete vaswani model folder (`check_model_folder`). The tokenizer must have the model's
    vocabulary size (`check_same_vocabulary`) and, beside a folder with its own tokenizer, the same tokens. An
    in-memory model without a tokenizer raises a ValueError.
    """
    if isinstance(model_or_folder, VaswaniForConditionalGeneration):
        if tokenizer is None:
            raise ValueError("to_ctranslate2: pass `tokenizer=` (a tokenizer or its folder) with an in-memory model.")
    else:
        model_or_folder = check_model_folder(Path(model_or_folder), tokenizer=tokenizer is None, vaswani_only=True)
        tokenizer = model_or_folder if tokenizer is None else tokenizer
    check_same_vocabulary(model_or_folder, tokenizer)
    if isinstance(model_or_folder, Path):
        _check_folder_tokenizer(model_or_folder, tokenizer)
    return model_or_folder, tokenizer


def _load(model_or_folder, tokenizer):
    """Load what `_checked_sources` returned, and return (model in eval mode, tokenizer object)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    model = (
        model_or_folder
        if isinstance(model_or_folder, VaswaniForConditionalGeneration)
        else VaswaniForConditionalGeneration.from_pretrained(model_or_folder, dtype=torch.float32)
    )
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    return model.eval(), tokenizer


def _linear(state: dict, linear_spec, prefixes: list[str]) -> None:
    """Fill one CTranslate2 linear layer from one or more of ours, fused along the output axis (Q|K|V, K|V)."""
    linear_spec.weight = torch.cat([state[f"{p}.weight"] for p in prefixes], dim=0)
    if (
        f"{prefixes[0]}.bias" in state
    ):  # The paper's projections have no bias, and then CTranslate2's bias stays unset.
        linear_spec.bias = torch.cat([state[f"{p}.bias"] for p in prefixes], dim=0)


def _layer_norm(state: dict, norm_spec, prefix: str) -> None:
    norm_spec.gamma = state[f"{prefix}.weight"]
    norm_spec.beta = state[f"{prefix}.bias"]


def _fill_layer(state: dict, layer_spec, prefix: str, decoder: bool) -> None:
    attn = f"{prefix}.self_attn"
    _linear(state, layer_spec.self_attention.linear[0], [f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"])
    _linear(state, layer_spec.self_attention.linear[1], [f"{attn}.out_proj"])
    _layer_norm(state, layer_spec.self_attention.layer_norm, f"{prefix}.self_attn_layer_norm")
    if decoder:
        cross = f"{prefix}.encoder_attn"
        _linear(state, layer_spec.attention.linear[0], [f"{cross}.q_proj"])
        _linear(state, layer_spec.attention.linear[1], [f"{cross}.k_proj", f"{cross}.v_proj"])
        _linear(state, layer_spec.attention.linear[2], [f"{cross}.out_proj"])
        _layer_norm(state, layer_spec.attention.layer_norm, f"{prefix}.encoder_attn_layer_norm")
    _linear(state, layer_spec.ffn.linear_0, [f"{prefix}.feed_forward.fc1"])
    _linear(state, layer_spec.ffn.linear_1, [f"{prefix}.feed_forward.fc2"])
    _layer_norm(state, layer_spec.ffn.layer_norm, f"{prefix}.final_layer_norm")


def _set_tokens(spec, tokens: list[str], config: VaswaniConfig, unk_token: str) -> None:
    def special(index, fallback: str) -> str:
        return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else fallback

    spec.config.layer_norm_epsilon = float(config.layer_norm_eps)
    spec.config.unk_token = unk_token
    spec.config.bos_token = special(config.bos_token_id, "<s>")
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    spec.config.eos_token = tokens[eos]
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    # Our tokenizer appends </s> to every source sentence itself: CTranslate2 must not add BOS/EOS again.
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)


@torch.no_grad()
def _spec(model: VaswaniForConditionalGeneration, tokens: list[str], max_positions: int, unk_token: str = "<unk>"):
    """Fill a CTranslate2 `TransformerSpec` that computes exactly `model`'s function."""
    _, common_spec, transformer_spec = import_ctranslate2()
    config = model.config
    if config.d_k != config.d_v:
        raise UsageError(
            f"to_ctranslate2: CTranslate2 attention needs d_k == d_v (one head_dim); got "
            f"d_k={config.d_k}, d_v={config.d_v} (Table 3, row B)."
        )
    head_dim = None if config.d_k * config.num_heads == config.d_model else config.d_k
    # Copies are given, because CTranslate2's quantization works in place on numpy views of the tensors it is given.
    state = {
        name: tensor.detach().to(torch.float32, copy=True).contiguous() for name, tensor in model.state_dict().items()
    }
    # pre_norm=False gives post-norm layers LayerNorm(x + Sublayer(x)) and no final LayerNorm on either stack, because
    # CTranslate2 creates `layer_norm` at the end of a stack only for pre-norm models.
    kwargs = dict(pre_norm=False, activation=common_spec.Activation.RELU, head_dim=head_dim)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.num_encoder_layers, config.num_heads, **kwargs),
        transformer_spec.TransformerDecoderSpec(config.num_decoder_layers, config.num_heads, **kwargs),
    )
    for stack, stack_spec in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        stack_spec.scale_embeddings = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        if config.position_encoding == "sinusoidal":
            # Always written explicitly: CTranslate2's built-in sinusoids are OpenNMT-tf's (timescale denominator
            # d/2 - 1, positions from 1, [sin | cos]), not the paper's. The table is in the model's own layout, so
            # interleaved and concatenated models both export exactly, with no permutation of the weights.
            stack_spec.position_encodings.encodings = sinusoid_table(
                max_positions, config.d_model, config.sinusoid_layout
            )
        else:  # Learned positions (Table 3, row E) have max_position_embeddings rows.
            stack_spec.position_encodings.encodings = state[f"model.{stack}.embed_positions.weight"]
        for i, layer_spec in enumerate(stack_spec.layer):
            _fill_layer(state, layer_spec, f"model.{stack}.layers.{i}", decoder=stack == "decoder")
    if config.tie_word_embeddings:
        source = target = projection = state["model.shared.weight"]
    else:
        source, target = state["model.encoder.embed_tokens.weight"], state["model.decoder.embed_tokens.weight"]
        projection = state["lm_head.weight"]
    spec.encoder.embeddings[0].weight = source
    spec.decoder.embeddings.weight = target
    spec.decoder.projection.weight = projection  # There is no output bias, and identical tensors are aliased on save.
    # The decoder starts from the real embedding of decoder_start_token (<pad>, whose row is zero in our models),
    # so `start_from_zero_embedding` stays False and a non-zero start row would also be reproduced exactly.
    _set_tokens(spec, tokens, config, unk_token)
    return spec


def _max_positions(config: VaswaniConfig, max_positions: int | None) -> int:
    if config.position_encoding == "sinusoidal":
        return int(max_positions or max(config.max_position_embeddings, _CT2_DEFAULT_MAX_POSITIONS))
    if max_positions not in (None, config.max_position_embeddings):
        raise UsageError(
            f"to_ctranslate2: --max_positions {max_positions}: a model with learned positions exports "
            f"exactly its {config.max_position_embeddings} rows (max_position_embeddings); leave "
            "--max_positions out"
        )
    return config.max_position_embeddings


def _metadata(ctranslate2, model, quantization: str | None, max_positions: int) -> dict:
    """Return the metadata `vaswani_hf.export.ctranslate2` reads back, such as the position-table size and decoding."""
    generation = getattr(model, "generation_config", None)
    return {
        "format": "vaswani_hf CTranslate2 export",
        "ctranslate2_version": ctranslate2.__version__,
        "quantization": quantization or "float32",
        "max_positions": max_positions,
        "position_encoding": model.config.position_encoding,
        "sinusoid_layout": model.config.sinusoid_layout,
        "source_ends_with_eos": True,
        "generation": {key: getattr(generation, key, None) for key in GENERATION_KEYS},
    }


def to_ctranslate2(
    model_or_folder,
    out_dir,
    quantization: str | None = None,
    tokenizer=None,
    *,
    max_positions: int | None = None,
    force: bool = False,
) -> Path:
    """Write a CTranslate2 model folder (`ctranslate2.Translator` loads it) that computes exactly our model's function.

    `model_or_folder` is a `VaswaniForConditionalGeneration` or a folder saved by `save_pretrained`, which is checked
    before anything is loaded. `out_dir` receives model.bin, config.json, the vocabulary, the tokenizer files and
    `vaswani_ctranslate2.json` (the position-table size and the generation defaults). It is written beside and
    renamed into place; an existing non-empty folder is refused unless `force`, and even then only a CTranslate2
    folder this package wrote is replaced.

    `quantization` is None (float32 weights) or one of `QUANTIZATIONS`, CTranslate2's weight types; the compute type
    is chosen when the export is loaded. `tokenizer` is a tokenizer or its folder, by default the model folder's; its
    files are copied next to the model, and it must be the model's vocabulary. `max_positions` is the number of rows
    of the exported sinusoid table, that is the longest source and the longest output (start token included) that
    CTranslate2 can process; the default is max(max_position_embeddings, 1024), because CTranslate2 cannot extend
    the table on demand as our model does. Learned positions (Table 3, row E) keep their own table.

    CTranslate2 must be given the source sentences as our tokenizer makes them, `</s>` included (the export sets
    `add_source_eos` to False); `vaswani_hf.export.ctranslate2` does this."""
    ctranslate2, _, _ = import_ctranslate2()
    try:
        EXPORT_SETTINGS["quantization"].check(quantization, "to_ctranslate2")
    except SettingError as error:
        raise UsageError(str(error)) from None
    out_dir = check_output_dir(out_dir, overwrite=force, what="CTranslate2 output folder", kind=CT2_FOLDER)
    if (
        not isinstance(model_or_folder, VaswaniForConditionalGeneration)
        and Path(model_or_folder).resolve() == out_dir.resolve()
    ):
        raise UsageError(f"output folder {out_dir} is the model folder; choose another")
    model, tokenizer = _load(*_checked_sources(model_or_folder, tokenizer))
    max_positions = _max_positions(model.config, max_positions)
    spec = _spec(model, _vocabulary(tokenizer, model.config), max_positions, unk_token=tokenizer.unk_token or "<unk>")
    spec.validate()
    spec.optimize(quantization=quantization)
    with atomic_output_dir(out_dir, kind=CT2_FOLDER, overwrite=force) as tmp:
        spec.save(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        metadata = _metadata(ctranslate2, model, quantization, max_positions)
        (tmp / CT2_METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return out_dir
