"""Implement the original Transformer ("Attention Is All You Need", Vaswani et al., 2017) as a native transformers
model.

Read top to bottom, this file follows the paper's Section 3: the positional encodings (3.5), attention (3.2, Eq. 1),
the feed-forward network (3.3, Eq. 2), the encoder and decoder layers (3.1) with residual dropout (5.4), the encoder
and decoder stacks with shared, scaled embeddings (3.4), and finally the seq2seq model. The model's own loss is the
plain cross-entropy that every transformers model computes; the paper's label-smoothed objective is a training
setting, in vaswani_hf/training/objective.py.
Decoding (Section 6.1) lives in `VaswaniGenerationMixin` (generation_vaswani.py), which the model inherits as Marian
inherits `GenerationMixin`. Its lean loops (beam_search_vaswani.py) run the same `VaswaniLayer.sublayers` as `forward`.

Shapes name B the batch, S the source length, T the target length, D d_model, H the heads and V the vocabulary.

This file is copied next to the weights and runs under `trust_remote_code=True`, so it imports only torch,
transformers and its sibling files. Where the paper is silent we follow tensor2tensor's first release (t2t v1, June
2017) and say so.
"""

import copy
import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vaswani import VaswaniConfig
from .generation_vaswani import VaswaniGenerationMixin, default_generation_config

# transformers 5.24 renamed the KV cache's argument and output field from `past_key_values` to `cache`. This file runs
# under whichever 5.x the user has installed, so every forward takes either name and passes on and returns the name
# the installed version reads.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def pop_cache(cache: Cache | None, kwargs: dict) -> Cache | None:
    """Return the cache given as `cache`, or else the one given as `past_key_values` (the name that transformers
    before 5.24 uses), which is removed from `kwargs` either way."""
    legacy = kwargs.pop("past_key_values", None)
    return cache if cache is not None else legacy


def renamed_cache_argument(forward: Callable) -> Callable:
    """Wrap `forward` so that from transformers 5.24 on `past_key_values=` still works but warns, through
    transformers' `deprecate_kwarg` as Marian's forwards do; before 5.24, return `forward` unchanged."""
    if CACHE_NAME == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)
    return forward


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.5: positional encodings
# ---------------------------------------------------------------------------------------------------------------------


def sinusoid_table(num_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """Return the sinusoidal positional encodings of Section 3.5 as a (num_positions, d_model) float32 table.

    The paper's formula is PE(pos, 2i) = sin(pos / 10000^(2i/d_model)) and PE(pos, 2i+1) = cos(pos /
    10000^(2i/d_model)). The "interleaved" layout is the paper's. The "concatenated" layout puts all the sines first,
    as t2t, fairseq and Marian do, but keeps the paper's frequencies (t2t and fairseq divide by d_model/2 - 1 instead
    of d_model). Any other layout raises a ValueError."""
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    angles = position * inv_freq  # (P, D/2)
    if layout == "interleaved":
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (P, D): sin, cos, sin, cos, ...
    elif layout == "concatenated":
        table = torch.cat([angles.sin(), angles.cos()], dim=-1)  # (P, D): sin ... sin, cos ... cos
    else:
        raise ValueError(f"Unknown sinusoid layout {layout!r}: use 'interleaved' or 'concatenated'.")
    return table.float()


def _num_positions(position_ids: torch.Tensor, known: int | None) -> int:
    return known if known is not None else (int(position_ids.max()) + 1 if position_ids.numel() else 0)


class VaswaniSinusoidalPositionalEncoding(nn.Module):
    """Encode positions with the fixed sinusoids of Section 3.5, computed once per device and grown on demand for
    longer inputs. The table is held outside the module's state (it is not a buffer), so that no checkpoint, move or
    materialisation (`to_empty`, as accelerate does) can leave it stale."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.size, self.layout = [config.max_position_embeddings, config.d_model], config.sinusoid_layout
        self.tables = {}  # Maps each device to its (positions, d_model) float32 table.

    def forward(self, position_ids: torch.Tensor, num_positions: int | None = None) -> torch.Tensor:
        """Return the (..., D) encodings of `position_ids`, a (T,) or (B, T) tensor. A caller that knows
        `num_positions`, the largest id plus one, saves reading the ids back from the device."""
        needed = _num_positions(position_ids, num_positions)
        device, table = position_ids.device, self.tables.get(position_ids.device)
        if table is None or needed > table.shape[0]:  # Extend to lengths unseen in training, as the paper allows.
            self.size[0] = max(self.size[0], needed)
            table = self.tables[device] = sinusoid_table(*self.size, self.layout).to(device)
        return table[position_ids]


class VaswaniLearnedPositionalEmbedding(nn.Embedding):
    """Learn one embedding per position (Table 3, row E). It holds only `max_position_embeddings` positions: a longer
    input raises a ValueError that suggests the sinusoidal encoding, which extrapolates."""

    def __init__(self, config: VaswaniConfig):
        super().__init__(config.max_position_embeddings, config.d_model)

    def forward(self, position_ids: torch.Tensor, num_positions: int | None = None) -> torch.Tensor:
        num_positions = _num_positions(position_ids, num_positions)
        if num_positions > self.num_embeddings:
            raise ValueError(
                f"Sequence of {num_positions} positions is longer than max_position_embeddings="
                f"{self.num_embeddings} of this model's learned positional embedding (Table 3, row E). "
                "Shorten the input or use position_encoding='sinusoidal', which extrapolates."
            )
        return super().forward(position_ids)


# ---------------------------------------------------------------------------------------------------------------------
# Section 5.4: residual dropout
# ---------------------------------------------------------------------------------------------------------------------


def dropout(hidden: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Apply dropout (Section 5.4) with the same distribution as `nn.functional.dropout`.

    It returns `hidden` unchanged outside training or when p is 0. On CPU it is written by hand: torch's dropout draws
    its keep-mask with `bernoulli_`, which made forward plus backward about 2.3 times slower than comparing a uniform
    draw with p (`rand >= p`), a difference of about 13% of a whole training step at d_model 256. On other devices,
    and for p >= 1, it calls `nn.functional.dropout`."""
    if not training or p == 0.0:
        return hidden
    if hidden.device.type != "cpu" or p >= 1.0:
        return nn.functional.dropout(hidden, p=p, training=True)
    keep = torch.rand(hidden.shape, device=hidden.device) >= p  # The draw is float32 even for bf16 activations.
    return hidden * keep.to(hidden.dtype).mul_(1.0 / (1.0 - p))


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.2: scaled dot-product attention and multi-head attention
# ---------------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
):
    """Compute scaled dot-product attention, Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (Eq. 1).

    `query` is (B, H, T_q, d_k), `key` (B, H, T_k, d_k) and `value` (B, H, T_k, d_v). `attention_mask` is either
    additive, (B, 1, T_q, T_k), or boolean, True where attending is allowed. The softmax is taken in float32, and in
    training `dropout` drops attention weights. It returns the output as a (B, T_q, H, d_v) tensor and the weights as
    a (B, H, T_q, T_k) tensor."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, T_q, T_k)
    if attention_mask is not None:
        scores = (
            scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
            if attention_mask.dtype == torch.bool
            else scores + attention_mask
        )
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (B, T_q, H, d_v)
    return output, weights


def split_heads(projected: torch.Tensor, heads: int, width: int) -> torch.Tensor:
    """Split the last dimension of a (..., L, H * width) tensor into heads and return a (..., L, H, width) view.

    The length is given as -1 so that the TorchScript ONNX exporter keeps every length dynamic: with `unflatten` it
    fixed the traced length, and a source of another length then failed in onnxruntime (torch 2.13). L may also be the
    lean decoding loops' rows of one position."""
    return projected.view(*projected.shape[:-2], -1, heads, width)


class VaswaniAttention(nn.Module):
    """Compute multi-head attention (Section 3.2.2), MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, where
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h projections of each kind are one linear layer: W^Q and W^K map D to h*d_k, W^V maps D to h*d_v, and W^O
    maps h*d_v back to D, without bias in the paper. In cross-attention the keys and values come from the encoder
    output; during generation they are computed once per source sentence and kept in the cross-attention cache. The
    methods `queries`, `keys` and `values` (which split the heads) and `output` (which merges them) serve both
    `forward` and the lean decoding loops of beam_search_vaswani.py, which attend over their own key/value buffers.
    """

    def __init__(
        self,
        config: VaswaniConfig,
        is_causal: bool = False,
        is_cross_attention: bool = False,
        layer_idx: int | None = None,
    ):
        super().__init__()
        self.config, self.num_heads, self.d_k, self.d_v = config, config.num_heads, config.d_k, config.d_v
        self.scaling = config.d_k**-0.5  # the 1/sqrt(d_k) of Eq. (1)
        self.dropout, self.is_causal, self.is_cross_attention = config.attention_dropout, is_causal, is_cross_attention
        self.layer_idx, bias = layer_idx, config.attention_bias
        self.q_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=bias)
        self.k_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=bias)
        self.v_proj = nn.Linear(config.d_model, self.num_heads * self.d_v, bias=bias)
        self.out_proj = nn.Linear(self.num_heads * self.d_v, config.d_model, bias=bias)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """Return Q W^Q for every head, as (..., L, H, d_k), from a (..., L, D) input."""
        return split_heads(self.q_proj(x), self.num_heads, self.d_k)

    def keys(self, x: torch.Tensor) -> torch.Tensor:
        """Return K W^K for every head, as (..., L, H, d_k), from a (..., L, D) input."""
        return split_heads(self.k_proj(x), self.num_heads, self.d_k)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """Return V W^V for every head, as (..., L, H, d_v), from a (..., L, D) input."""
        return split_heads(self.v_proj(x), self.num_heads, self.d_v)

    def output(self, heads: torch.Tensor) -> torch.Tensor:
        """Return Concat(head_1, ..., head_h) W^O, as (..., D), from the heads' (..., H, d_v) outputs."""
        return self.out_proj(heads.flatten(-2))

    @renamed_cache_argument
    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ):
        """Attend from `hidden_states`, a (B, T_q, D) tensor, and return the output and the attention weights.
        In cross-attention `key_value_states` is the (B, S, D) encoder output. The output is (B, T_q, D); the weights
        are (B, H, T_q, T_k), or None when the attention implementation does not return them."""
        query = self.queries(hidden_states).transpose(1, 2)  # (B, H, T_q, d_k)

        cache = full_cache = pop_cache(cache, kwargs)
        if isinstance(full_cache, EncoderDecoderCache):
            cache = full_cache.cross_attention_cache if self.is_cross_attention else full_cache.self_attention_cache

        if self.is_cross_attention and cache is not None and full_cache.is_updated.get(self.layer_idx):
            # The source's keys and values were projected at the first decoding step, so they are reused.
            key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            source = key_value_states if self.is_cross_attention else hidden_states
            key, value = self.keys(source).transpose(1, 2), self.values(source).transpose(1, 2)  # (B, H, T_k, d_k|v)
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if self.is_cross_attention:
                    full_cache.is_updated[self.layer_idx] = True

        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=self.dropout if self.training else 0.0,
            **kwargs,
        )
        return self.output(output), weights


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.3: position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniFeedForward(nn.Module):
    """Apply the position-wise feed-forward network of Eq. (2), FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, of inner width
    d_ff. `relu_dropout` drops the ReLU's output. The paper has no such dropout; t2t v1 has it, with 0.0 as its
    default."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.relu_dropout = config.relu_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(dropout(nn.functional.relu(self.fc1(x)), self.relu_dropout, self.training))  # (B, L, D)


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.1: encoder and decoder layers, post-norm: LayerNorm(x + Dropout(Sublayer(x)))
# ---------------------------------------------------------------------------------------------------------------------


# An `Attend` function says how a layer attends: given the attention module and the (..., D) input of the queries, it
# returns the (..., D) output of the sub-layer.
Attend = Callable[[VaswaniAttention, torch.Tensor], torch.Tensor]


def has_cross_attention(config: VaswaniConfig) -> bool:
    """Return whether the decoder's layers have encoder-decoder attention (Section 3.2.3). The seq2seq model always
    has it. The decoder alone (`VaswaniForCausalLM`) has it with `add_cross_attention`, which EncoderDecoderModel sets
    and which a translation model's folder implies, so that every weight of its decoder loads."""
    return bool(config.is_encoder_decoder or config.add_cross_attention)


class VaswaniLayer(GradientCheckpointingLayer):
    """Run self-attention, then (in the decoder) encoder-decoder attention, then the feed-forward network, each
    wrapped post-norm as LayerNorm(x + Dropout(Sublayer(x))) (Section 3.1, "Add & Norm" in Figure 1; residual
    dropout, Section 5.4).

    `sublayers` holds the layer's structure and leaves to its caller how attention is computed. `forward` attends with
    transformers' cache objects and masks; the lean decoding loops of beam_search_vaswani.py attend over their own
    preallocated keys and values for one new position. Both run this one layer.
    """

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None, decoder: bool = False):
        super().__init__()
        self.self_attn = VaswaniAttention(config, is_causal=decoder, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        if decoder and has_cross_attention(config):
            self.encoder_attn = VaswaniAttention(config, is_cross_attention=True, layer_idx=layer_idx)
            self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = VaswaniFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = config.dropout

    def add_and_norm(self, norm: nn.LayerNorm, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return norm(x + dropout(sublayer_output, self.dropout, self.training))

    def sublayers(self, hidden: torch.Tensor, self_attend: Attend, cross_attend: Attend | None = None):
        """Run the sub-layers on `hidden`, (B, T, D) or the lean loops' (rows, D), and return a tensor of its shape.
        `self_attend` and `cross_attend` say how to attend (see `Attend`); the encoder passes no `cross_attend`."""
        hidden = self.add_and_norm(self.self_attn_layer_norm, hidden, self_attend(self.self_attn, hidden))
        if cross_attend is not None:
            hidden = self.add_and_norm(self.encoder_attn_layer_norm, hidden, cross_attend(self.encoder_attn, hidden))
        return self.add_and_norm(self.final_layer_norm, hidden, self.feed_forward(hidden))


class VaswaniEncoderLayer(VaswaniLayer):
    """Run an encoder layer (Section 3.1): self-attention, then the feed-forward network."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        return self.sublayers(hidden_states, lambda attn, x: attn(x, attention_mask=attention_mask, **kwargs)[0])


class VaswaniDecoderLayer(VaswaniLayer):
    """Run a decoder layer (Sections 3.1, 3.2.3): masked self-attention, encoder-decoder attention, then the
    feed-forward network. Without an encoder output (the decoder alone, as a language model) the encoder-decoder
    attention is skipped, as Marian's decoder layer skips it."""

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx, decoder=True)

    @renamed_cache_argument
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """Return the layer's (B, T, D) output for `hidden_states`, (B, T, D). `attention_mask` combines the causal
        mask with the target's padding; `encoder_attention_mask` masks the source's padding. Given
        `encoder_hidden_states` without encoder-decoder attention, it raises a ValueError that names the setting."""
        cache = pop_cache(cache, kwargs)
        if encoder_hidden_states is not None and not hasattr(self, "encoder_attn"):
            raise ValueError(
                "This decoder has no encoder-decoder attention to take encoder_hidden_states: build it with "
                "add_cross_attention=True (EncoderDecoderModel.from_encoder_decoder_pretrained sets it)"
            )
        return self.sublayers(
            hidden_states,
            lambda attn, x: attn(x, attention_mask=attention_mask, cache=cache, **kwargs)[0],
            None
            if encoder_hidden_states is None
            else lambda attn, x: attn(
                x, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask, cache=cache, **kwargs
            )[0],
        )


# ---------------------------------------------------------------------------------------------------------------------
# Pretrained-model plumbing: initialisation (t2t v1, the paper is silent) and capabilities
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniPreTrainedModel(PreTrainedModel):
    config: VaswaniConfig
    config_class = VaswaniConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VaswaniEncoderLayer", "VaswaniDecoderLayer"]
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_flash_attn = False  # Flash attention is off because d_k may differ from d_v (Table 3, row B).
    _can_compile_fullgraph = False

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """Initialise `module` as t2t v1 does, since the paper gives no initialisation.

        Linear weights are "uniform unit scaling", U(-a, a) with a = sqrt(3 / fan_in), and biases are zero.
        Embeddings are drawn from a normal distribution of mean 0 and standard deviation d_model^-0.5
        (`config.init_std` overrides it), so that an embedding times sqrt(d_model) has unit variance; the <pad> row,
        which is the decoder's start vector, is zero. LayerNorm gains are 1 and biases 0."""
        std = self.config.init_std if self.config.init_std is not None else self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            bound = math.sqrt(3.0 / module.in_features)
            init.uniform_(module.weight, -bound, bound)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def _apply(self, fn, recurse=True):
        """Tie the shared embeddings (Section 3.4) again if accelerate's `init_empty_weights` left some on meta."""
        pairs = getattr(self, "all_tied_weights_keys", None) or {}
        missing = {name for pair in pairs.items() for name in pair if self.get_parameter(name).is_meta}
        if missing and any(name not in missing for pair in pairs.items() for name in pair):
            self.tie_weights(missing_keys=missing)
        return super()._apply(fn, recurse)


# ---------------------------------------------------------------------------------------------------------------------
# Sections 3.1, 3.4: encoder and decoder stacks with shared embeddings scaled by sqrt(d_model)
# ---------------------------------------------------------------------------------------------------------------------


def check_mask_shape(mask, shape: tuple, name: str) -> None:
    """Raise a ValueError naming `name` if a padding mask is not (batch, length) = `shape`, which would otherwise
    broadcast silently into a wrong result. A missing mask and a 4D mask pass unchecked."""
    if mask is not None and mask.dim() != 4 and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must be (batch, length) = {tuple(shape)} of its ids, got {tuple(mask.shape)}")


class VaswaniStack(VaswaniPreTrainedModel):
    """Hold what the encoder and decoder stacks share: N layers over Dropout(Embedding(x) * sqrt(d_model) + PE)
    (Sections 3.1, 3.4, 3.5 and 5.4)."""

    layer_class: type[nn.Module]
    num_layers_setting: str  # The name of the config setting that holds this stack's layer count N.

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        num_layers = getattr(config, self.num_layers_setting)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = (
            VaswaniLearnedPositionalEmbedding
            if config.position_encoding == "learned"
            else VaswaniSinusoidalPositionalEncoding
        )(config)
        self.dropout = config.dropout
        self.layers = nn.ModuleList([self.layer_class(config, i) for i in range(num_layers)])
        self.gradient_checkpointing = False
        self.post_init()

    def embed(self, input_ids, inputs_embeds, first_position: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the first layer's (B, L, D) input and the (L,) positions it used. Pass exactly one of `input_ids`,
        (B, L), or unscaled `inputs_embeds`, (B, L, D); otherwise it raises a ValueError. Positions start at
        `first_position`, the length of the cached past."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{type(self).__name__}: pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        end = first_position + inputs_embeds.shape[1]
        positions = torch.arange(first_position, end, device=inputs_embeds.device)
        hidden_states = inputs_embeds * self.embed_scale + self.embed_positions(positions, end).to(inputs_embeds.dtype)
        return dropout(hidden_states, self.dropout, self.training), positions


class VaswaniEncoder(VaswaniStack):
    """Encode the source with N identical layers over Dropout(Embedding(x) * sqrt(d_model) + PE) (Sections 3.1, 3.4,
    3.5 and 5.4)."""

    _can_record_outputs = {
        "hidden_states": VaswaniEncoderLayer,
        "attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="self_attn"),
    }

    layer_class, num_layers_setting = VaswaniEncoderLayer, "num_encoder_layers"

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """Return the (B, S, D) encoder output for `input_ids`, (B, S), or for unscaled `inputs_embeds`, (B, S, D);
        `attention_mask` is (B, S), 1 for tokens and 0 for padding."""
        hidden_states, _ = self.embed(input_ids, inputs_embeds)  # (B, S, D)
        check_mask_shape(attention_mask, hidden_states.shape[:2], "attention_mask")

        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        # There is no final LayerNorm: with post-norm every layer already ends with one.
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniDecoder(VaswaniStack):
    """Decode with N identical layers over Dropout(Embedding(y_shifted) * sqrt(d_model) + PE) that attend to the
    encoder output; self-attention is masked so that position i sees only positions up to i (Section 3.1)."""

    _can_record_outputs = {
        "hidden_states": VaswaniDecoderLayer,
        "attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="encoder_attn"),
    }

    layer_class, num_layers_setting = VaswaniDecoderLayer, "num_decoder_layers"

    @merge_with_config_defaults
    @capture_outputs
    @renamed_cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Return the decoder's (B, T, D) output for the new target positions, with the cache.

        Pass `input_ids`, (B, T), or unscaled `inputs_embeds`, (B, T, D). `attention_mask` is the target's (B,
        T_past + T) padding mask, cached positions included. `encoder_hidden_states` is the (B, S, D) encoder output
        and `encoder_attention_mask` its (B, S) padding mask. With `use_cache` and no cache given, an empty one is
        started: an encoder-decoder cache, or for the decoder alone without an encoder output, the self-attention
        cache alone (as Marian's decoder starts them)."""
        cache = pop_cache(cache, kwargs)
        if use_cache and cache is None:
            cache = (
                EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
                if encoder_hidden_states is not None or self.config.is_encoder_decoder
                else DynamicCache(config=self.config)
            )
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states, positions = self.embed(input_ids, inputs_embeds, past_length)  # (B, T, D), (T,)
        batch, length = hidden_states.shape[:2]
        check_mask_shape(attention_mask, (batch, past_length + length), "decoder_attention_mask")
        if encoder_hidden_states is not None:
            check_mask_shape(encoder_attention_mask, encoder_hidden_states.shape[:2], "attention_mask (source)")

        if attention_mask is None and length == 1:
            causal_mask = None  # One new query without target padding sees every earlier position: no mask.
        else:
            if attention_mask is None:
                attention_mask = torch.ones(batch, past_length + length, device=hidden_states.device, dtype=torch.long)
            self_attn_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            # The cache goes positionally: its keyword is `past_key_values` before transformers 5.24, `cache` after.
            causal_mask = create_causal_mask(
                self.config, hidden_states, attention_mask, self_attn_cache, position_ids=positions.unsqueeze(0)
            )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        # encoder_hidden_states is passed positionally, because gradient checkpointing propagates gradients only to
        # positional inputs. The cache is passed by its keyword (CACHE_NAME), the name that GradientCheckpointingLayer
        # looks for to drop the cache while it checkpoints.
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                **{CACHE_NAME: cache},
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **{CACHE_NAME: cache})


def keep_pad_row_zero(embeddings: list[nn.Embedding], pad: int | None) -> None:
    """Register a gradient hook, once per embedding weight, that keeps the <pad> row at zero. That row is the
    decoder's start vector and stays zero, as t2t's start vector is. `padding_idx` alone does not keep it there: with
    tied weights the output projection would train the row through the shared matrix."""
    for embedding in {id(m): m for m in embeddings}.values():
        weight = embedding.weight
        if pad is not None and weight.requires_grad and not getattr(weight, "_vaswani_pad_hook", False):
            weight.register_hook(lambda grad: grad.index_fill(0, grad.new_tensor([pad], dtype=torch.long), 0.0))
            weight._vaswani_pad_hook = True


class VaswaniModel(VaswaniPreTrainedModel):
    """Run the encoder and the decoder, without the output projection. With `tie_word_embeddings` (the paper, Section
    3.4), one matrix, `shared`, serves as both source and target embedding."""

    def __init__(self, config: VaswaniConfig):
        if not config.is_encoder_decoder:
            raise ValueError(
                f"{type(self).__name__}: this config has is_encoder_decoder=False, the decoder alone's; load it with "
                "VaswaniForCausalLM (AutoModelForCausalLM), or set is_encoder_decoder=True for a translation model"
            )
        super().__init__(config)
        if config.tie_word_embeddings:
            self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
            self._tied_weights_keys = {
                "encoder.embed_tokens.weight": "shared.weight",
                "decoder.embed_tokens.weight": "shared.weight",
            }
        self.encoder = VaswaniEncoder(config)
        self.decoder = VaswaniDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared if self.config.tie_word_embeddings else self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        if self.config.tie_word_embeddings:
            self.shared = value
            self.decoder.embed_tokens = value
        self.encoder.embed_tokens = value

    @can_return_tuple
    @renamed_cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        cache = pop_cache(cache, kwargs)
        # Without this check the user would see the decoder's less helpful "exactly one of input_ids" error.
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "VaswaniModel: no decoder input; pass labels (the model with a head shifts them right), "
                "decoder_input_ids or decoder_inputs_embeds; model.generate(...) translates"
            )
        if self.training:
            keep_pad_row_zero([self.encoder.embed_tokens, self.decoder.embed_tokens], self.config.pad_token_id)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            cache=cache,
            use_cache=use_cache,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_NAME: getattr(decoder_outputs, CACHE_NAME)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_attentions=encoder_outputs.attentions,
        )


# ---------------------------------------------------------------------------------------------------------------------
# The loss of `forward(labels=...)`: plain cross-entropy per target token
# ---------------------------------------------------------------------------------------------------------------------

IGNORE_INDEX = -100  # label of a padded target position (transformers' convention)


def per_target_token(loss_sum: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """Return `loss_sum` divided by the batch's number of target tokens, or by `num_items_in_batch` when `Trainer`
    passes it. Trainer's count covers the whole update, so that gradient accumulation gives the loss of one large
    batch. The count stays on the device, so nothing is read back to the host."""
    if num_items_in_batch is None:
        return loss_sum / (labels != IGNORE_INDEX).sum().clamp(min=1)
    return loss_sum / (
        num_items_in_batch.to(loss_sum.device) if isinstance(num_items_in_batch, torch.Tensor) else num_items_in_batch
    )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Return the (B, T) decoder input ids for teacher forcing (Section 3.1). `labels` is (B, T), -100 where a position
    is ignored. The result is `labels` shifted one step right behind `decoder_start_token_id`, with -100 replaced by
    `pad_token_id`."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == IGNORE_INDEX, pad_token_id)


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, VaswaniGenerationMixin):
    """Translate with the Transformer, which is `VaswaniModel` plus the pre-softmax projection that shares the
    embedding matrix (Section 3.4).

    `forward(..., labels=...)` returns the plain cross-entropy per target token, as every transformers model does; the
    paper's label-smoothed objective (Section 5.4) is in `vaswani_hf.training.objective`."""

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.model = VaswaniModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if not config.tie_word_embeddings:
            self._tied_weights_keys = {}
        self.post_init()
        self.generation_config = default_generation_config(config)  # the paper's decoding (Section 6.1)

    @can_return_tuple
    @renamed_cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """Return the (B, T, V) logits and, given `labels`, the plain cross-entropy per target token.

        `input_ids` is (B, S) and `decoder_input_ids` (B, T). `labels` is (B, T), -100 where a position is ignored;
        with labels the cache is not used, and without a decoder input the labels shifted right become it.
        `num_items_in_batch` is Trainer's count of target tokens over the whole update (see `per_target_token`)."""
        cache = pop_cache(cache, kwargs)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, V)
        loss = (
            None
            if labels is None
            else per_target_token(
                nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(),
                    labels.reshape(-1),
                    ignore_index=IGNORE_INDEX,
                    reduction="sum",
                ),
                labels,
                num_items_in_batch,
            )
        )
        return Seq2SeqLMOutput(
            loss=loss, logits=logits, **{k: v for k, v in outputs.items() if k != "last_hidden_state"}
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)


# ---------------------------------------------------------------------------------------------------------------------
# The decoder stack alone (Section 3.1), as a language model and as the decoder of transformers' EncoderDecoderModel
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniDecoderWrapper(VaswaniPreTrainedModel):
    """Hold the decoder under the names it has in `VaswaniModel`, so that the weights of a translation model's folder
    (`model.decoder.*`, and with tied weights the one matrix `model.shared`) load into `VaswaniForCausalLM` as they
    are, as Marian's `MarianDecoderWrapper` keeps `model.decoder.*`."""

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        if config.tie_word_embeddings:
            self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
            self._tied_weights_keys = {"decoder.embed_tokens.weight": "shared.weight"}
        self.decoder = VaswaniDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        if self.config.tie_word_embeddings:
            self.shared = value
        self.decoder.embed_tokens = value

    def forward(self, *args, **kwargs):
        return self.decoder(*args, **kwargs)


def slice_to_keep(hidden_states: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """Return the (B, T', D) positions of `hidden_states` whose logits are wanted: the last `logits_to_keep` (0: all
    of them), or the positions a tensor lists. generate() asks for the last one alone, so that the (V, D) projection
    runs on one position per step. (transformers' `slice_logits_to_keep` is this, but is not in every 5.x.)"""
    if isinstance(logits_to_keep, int):
        return hidden_states[:, -logits_to_keep:, :] if logits_to_keep else hidden_states
    return hidden_states[:, logits_to_keep, :]


class VaswaniForCausalLM(VaswaniPreTrainedModel, GenerationMixin):
    """Run the paper's decoder stack alone (Section 3.1): N post-norm layers over Dropout(Embedding(y) * sqrt(d_model) +
    PE), masked so that position i sees only positions up to i, and the pre-softmax projection that shares the
    embedding matrix (Section 3.4). There is no final LayerNorm, since each post-norm layer ends with one.

    It is what `AutoModelForCausalLM.from_pretrained(folder)` loads from a translation model's folder, the decoder and
    its shared embedding, as Marian's folders load as `MarianForCausalLM`; the encoder's weights are not read. Without
    an encoder output the encoder-decoder attention (Section 3.2.3) is skipped; given `encoder_hidden_states`, as
    transformers' `EncoderDecoderModel` passes them, the decoder attends to them. A config of its own builds that
    attention only with `add_cross_attention=True`, the setting EncoderDecoderModel gives its decoder.

    `forward(labels=...)` returns transformers' causal-LM loss (`self.loss_function`): `labels` are the input ids,
    and position t is scored on token t + 1, as GPT-2 and Llama score them (Marian's causal LM expects them shifted
    already); Trainer's `num_items_in_batch` and a pre-shifted `shift_labels` are honoured."""

    _keys_to_ignore_on_load_unexpected = [r"^model\.encoder\."]  # A translation model's encoder is not used here.
    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        if config.is_encoder_decoder or not config.is_decoder:
            # A copy, so that the caller's config (a translation model's, perhaps in use) is left as it was.
            config = copy.deepcopy(config)
            config.add_cross_attention = has_cross_attention(config)
            config.is_decoder, config.is_encoder_decoder = True, False
        super().__init__(config)
        self.model = VaswaniDecoderWrapper(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if not config.tie_word_embeddings:
            self._tied_weights_keys = {}
        self.post_init()

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        self.model.set_input_embeddings(value)

    @can_return_tuple
    @renamed_cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        """Return the (B, T, V) logits of the next token at each position and, given `labels`, the causal-LM loss.

        Pass `input_ids`, (B, T), or unscaled `inputs_embeds`, (B, T, D); `attention_mask` is (B, T_past + T).
        `encoder_hidden_states`, (B, S, D), and its (B, S) `encoder_attention_mask` come from an encoder, as in
        EncoderDecoderModel. `labels` is (B, T), -100 where a position is ignored. `logits_to_keep` projects only the
        last positions (see `slice_to_keep`)."""
        cache = pop_cache(cache, kwargs)
        if labels is not None:
            use_cache = False
        if self.training:
            keep_pad_row_zero([self.model.decoder.embed_tokens], self.config.pad_token_id)
        outputs: BaseModelOutputWithPastAndCrossAttentions = self.model.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(slice_to_keep(outputs.last_hidden_state, logits_to_keep))  # (B, T', V)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            **{CACHE_NAME: getattr(outputs, CACHE_NAME)},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            cross_attentions=outputs.cross_attentions,
        )


__all__ = [
    "VaswaniPreTrainedModel",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "VaswaniForCausalLM",
    "sinusoid_table",
    "per_target_token",
    "shift_tokens_right",
]
