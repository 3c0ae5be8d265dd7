"""The original Transformer ("Attention Is All You Need", Vaswani et al., 2017) as a native transformers model.

Read top to bottom, this file follows the paper's Section 3:
    positions (3.5) -> attention (3.2, Eq. 1) -> feed-forward (3.3, Eq. 2) -> encoder / decoder layers (3.1) with
    residual dropout (5.4) -> encoder / decoder stacks with shared, scaled embeddings (3.4) -> the seq2seq model with
    the plain cross-entropy of transformers' models (the paper's label-smoothed objective is a training setting:
    vaswani_hf/training/objective.py).
Decoding (Section 6.1) is `VaswaniGenerationMixin` (generation_vaswani.py), inherited as Marian inherits
`GenerationMixin`; its lean loops (beam_search_vaswani.py) run the same `VaswaniLayer.sublayers` as `forward`.

Shapes: B batch, S source length, T target length, D d_model, H heads, V vocabulary.

Copied next to the weights and run under `trust_remote_code=True`: imports only torch, transformers and its siblings.
Where the paper is silent we follow tensor2tensor's first release (t2t v1, June 2017) and say so.
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
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
    """The cache given as `cache` or, by transformers < 5.24, as `past_key_values` (removed from kwargs)."""
    legacy = kwargs.pop("past_key_values", None)
    return cache if cache is not None else legacy


def renamed_cache_argument(forward: Callable) -> Callable:
    """From 5.24, `past_key_values=` still works and warns (transformers' `deprecate_kwarg`, as Marian's forwards)."""
    if CACHE_NAME == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)
    return forward


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.5: positional encodings
# ---------------------------------------------------------------------------------------------------------------------


def sinusoid_table(num_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) (Section 3.5), as
    (num_positions, d_model) float32: "interleaved" is the paper's; "concatenated" puts the sines first (t2t, fairseq,
    Marian), with the paper's frequencies (t2t and fairseq divide by d_model/2 - 1)."""
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
    """Fixed sinusoids (Section 3.5), computed once per device and grown on demand for longer inputs; held outside the
    module's state, so that no checkpoint, move or materialisation (`to_empty`, as accelerate does) leaves it stale."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.size, self.layout = [config.max_position_embeddings, config.d_model], config.sinusoid_layout
        self.tables = {}  # device -> (positions, d_model) float32

    def forward(self, position_ids: torch.Tensor, num_positions: int | None = None) -> torch.Tensor:
        """position_ids: (T,) or (B, T) -> (..., D); `num_positions` (max id + 1), if known, saves a device read."""
        needed = _num_positions(position_ids, num_positions)
        device, table = position_ids.device, self.tables.get(position_ids.device)
        if table is None or needed > table.shape[0]:  # extrapolate to lengths unseen in training, as the paper allows
            self.size[0] = max(self.size[0], needed)
            table = self.tables[device] = sinusoid_table(*self.size, self.layout).to(device)
        return table[position_ids]


class VaswaniLearnedPositionalEmbedding(nn.Embedding):
    """Learned positions, Table 3 row (E). Limited to `max_position_embeddings` positions."""

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
    """Dropout (Section 5.4), the distribution of `nn.functional.dropout`. Hand-written on CPU: its `bernoulli_`
    keep-mask is ~2.3x slower over forward + backward than `rand >= p` (~13% of a d_model-256 training step)."""
    if not training or p == 0.0:
        return hidden
    if hidden.device.type != "cpu" or p >= 1.0:
        return nn.functional.dropout(hidden, p=p, training=True)
    keep = torch.rand(hidden.shape, device=hidden.device) >= p  # float32 draw even for bf16 activations
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
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, Eq. (1). query (B, H, T_q, d_k), key (B, H, T_k, d_k), value
    (B, H, T_k, d_v), attention_mask additive (B, 1, T_q, T_k) or boolean -> ((B, T_q, H, d_v), (B, H, T_q, T_k))."""
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
    """(..., L, H * width) -> (..., L, H, width), a view. Length `-1`, so that the TorchScript ONNX exporter keeps
    every length dynamic (with `unflatten` it fixed the traced length and another source length failed in
    onnxruntime; torch 2.13). L may be the lean loops' rows of one position."""
    return projected.view(*projected.shape[:-2], -1, heads, width)


class VaswaniAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (3.2.2).

    The h projections of each kind are one linear layer (W^Q, W^K: D -> h*d_k, W^V: D -> h*d_v, W^O: h*d_v -> D),
    without bias in the paper. Cross-attention K/V come from the encoder output, computed once per source sentence
    during generation (the cross-attention cache). `queries`, `keys`, `values`, `output` (heads split / merged) serve
    `forward` and the lean decoding loops (beam_search_vaswani.py), which attend over their own K/V buffers.
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

    def queries(self, x: torch.Tensor) -> torch.Tensor:  # Q W^Q for every head: (..., L, D) -> (..., L, H, d_k)
        return split_heads(self.q_proj(x), self.num_heads, self.d_k)

    def keys(self, x: torch.Tensor) -> torch.Tensor:  # K W^K: (..., L, D) -> (..., L, H, d_k)
        return split_heads(self.k_proj(x), self.num_heads, self.d_k)

    def values(self, x: torch.Tensor) -> torch.Tensor:  # V W^V: (..., L, D) -> (..., L, H, d_v)
        return split_heads(self.v_proj(x), self.num_heads, self.d_v)

    def output(
        self, heads: torch.Tensor
    ) -> torch.Tensor:  # Concat(head_1, ..., head_h) W^O: (..., H, d_v) -> (..., D)
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
        """hidden_states (B, T_q, D); key_value_states (B, S, D): the encoder output, for cross-attention."""
        query = self.queries(hidden_states).transpose(1, 2)  # (B, H, T_q, d_k)

        cache = full_cache = pop_cache(cache, kwargs)
        if isinstance(full_cache, EncoderDecoderCache):
            cache = full_cache.cross_attention_cache if self.is_cross_attention else full_cache.self_attention_cache

        if self.is_cross_attention and cache is not None and full_cache.is_updated.get(self.layer_idx):
            # the source's K/V were projected at the first decoding step: reuse them
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
        return self.output(output), weights  # (B, T_q, D), (B, H, T_q, T_k) or None


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.3: position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, Eq. (2); inner width d_ff. `relu_dropout` (not in the paper, t2t v1
    default 0.0) drops the ReLU output."""

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


# How a layer attends: (attention module, (..., D) queries' input) -> (..., D) sub-layer output.
Attend = Callable[[VaswaniAttention, torch.Tensor], torch.Tensor]


class VaswaniLayer(GradientCheckpointingLayer):
    """Self-attention, [encoder-decoder attention,] feed-forward, each wrapped post-norm as
    LayerNorm(x + Dropout(Sublayer(x))) (Section 3.1, "Add & Norm" in Figure 1; residual dropout, 5.4).

    `sublayers` is the layer's structure, with how attention is computed left to the caller: `forward` attends with
    transformers' cache objects and masks; the lean decoding loops of beam_search_vaswani.py attend over their own
    preallocated K/V for one new position. Both run this one layer.
    """

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None, decoder: bool = False):
        super().__init__()
        self.self_attn = VaswaniAttention(config, is_causal=decoder, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        if decoder:
            self.encoder_attn = VaswaniAttention(config, is_cross_attention=True, layer_idx=layer_idx)
            self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = VaswaniFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = config.dropout

    def add_and_norm(self, norm: nn.LayerNorm, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return norm(x + dropout(sublayer_output, self.dropout, self.training))

    def sublayers(self, hidden: torch.Tensor, self_attend: Attend, cross_attend: Attend | None = None):
        """(B, T, D) -> (B, T, D), or (rows, D) for the lean loops' one position."""
        hidden = self.add_and_norm(self.self_attn_layer_norm, hidden, self_attend(self.self_attn, hidden))
        if cross_attend is not None:
            hidden = self.add_and_norm(self.encoder_attn_layer_norm, hidden, cross_attend(self.encoder_attn, hidden))
        return self.add_and_norm(self.final_layer_norm, hidden, self.feed_forward(hidden))


class VaswaniEncoderLayer(VaswaniLayer):
    """Self-attention, then feed-forward (3.1)."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        return self.sublayers(hidden_states, lambda attn, x: attn(x, attention_mask=attention_mask, **kwargs)[0])


class VaswaniDecoderLayer(VaswaniLayer):
    """Masked self-attention, encoder-decoder attention, feed-forward (3.1, 3.2.3)."""

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
        """hidden_states (B, T, D); attention_mask: causal + target padding; encoder_attention_mask: source padding."""
        cache = pop_cache(cache, kwargs)
        return self.sublayers(
            hidden_states,
            lambda attn, x: attn(x, attention_mask=attention_mask, cache=cache, **kwargs)[0],
            lambda attn, x: attn(
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
    _supports_flash_attn = False  # d_k may differ from d_v (Table 3, row B)
    _can_compile_fullgraph = False

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """t2t v1 initialisation (the paper gives none): linear weights "uniform unit scaling" U(-a, a), a =
        sqrt(3 / fan_in), biases zero; embeddings N(0, d_model^-0.5) (`config.init_std` overrides) so that embedding *
        sqrt(d_model) has unit variance, the <pad> row (the decoder's start vector) zero; LayerNorm gain 1, bias 0."""
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
    """A 2D padding mask of another shape than (batch, length) would broadcast into a wrong result silently."""
    if mask is not None and mask.dim() != 4 and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must be (batch, length) = {tuple(shape)} of its ids, got {tuple(mask.shape)}")


class VaswaniStack(VaswaniPreTrainedModel):
    """What the encoder and decoder stacks share: N layers over Dropout(Embedding(x) * sqrt(d_model) + PE)
    (Sections 3.1, 3.4, 3.5, 5.4)."""

    layer_class: type[nn.Module]
    num_layers_setting: str  # the config's layer count N of this stack

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
        """(B, L) ids or (B, L, D) unscaled embeddings -> (B, L, D) layer input, and the (L,) positions used."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{type(self).__name__}: pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        end = first_position + inputs_embeds.shape[1]
        positions = torch.arange(first_position, end, device=inputs_embeds.device)
        hidden_states = inputs_embeds * self.embed_scale + self.embed_positions(positions, end).to(inputs_embeds.dtype)
        return dropout(hidden_states, self.dropout, self.training), positions


class VaswaniEncoder(VaswaniStack):
    """N identical layers over Dropout(Embedding(x) * sqrt(d_model) + PE) (Sections 3.1, 3.4, 3.5, 5.4)."""

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
        """input_ids (B, S); attention_mask (B, S), 1 for tokens, 0 for padding; inputs_embeds (B, S, D) unscaled."""
        hidden_states, _ = self.embed(input_ids, inputs_embeds)  # (B, S, D)
        check_mask_shape(attention_mask, hidden_states.shape[:2], "attention_mask")

        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)  # (B, S, D); no final LayerNorm (post-norm)


class VaswaniDecoder(VaswaniStack):
    """N identical layers over Dropout(Embedding(y_shifted) * sqrt(d_model) + PE), masked so that position i sees only
    positions < i+1 (Section 3.1), attending to the encoder output."""

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
        """input_ids (B, T); attention_mask (B, T_past + T) target padding; encoder_hidden_states (B, S, D);
        encoder_attention_mask (B, S); inputs_embeds (B, T, D) unscaled."""
        cache = pop_cache(cache, kwargs)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states, positions = self.embed(input_ids, inputs_embeds, past_length)  # (B, T, D), (T,)
        batch, length = hidden_states.shape[:2]
        check_mask_shape(attention_mask, (batch, past_length + length), "decoder_attention_mask")
        if encoder_hidden_states is not None:
            check_mask_shape(encoder_attention_mask, encoder_hidden_states.shape[:2], "attention_mask (source)")

        if attention_mask is None and length == 1:
            causal_mask = None  # one new query without target padding may see every earlier position
        else:
            if attention_mask is None:
                attention_mask = torch.ones(batch, past_length + length, device=hidden_states.device, dtype=torch.long)
            self_attn_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            # the cache positionally: its keyword is `past_key_values` before transformers 5.24, `cache` after
            causal_mask = create_causal_mask(
                self.config, hidden_states, attention_mask, self_attn_cache, position_ids=positions.unsqueeze(0)
            )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:  # encoder_hidden_states positional, for gradient checkpointing; the cache by the
            # name GradientCheckpointingLayer clears when checkpointing
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                **{CACHE_NAME: cache},
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **{CACHE_NAME: cache})


class VaswaniModel(VaswaniPreTrainedModel):
    """Encoder-decoder without the output projection. With `tie_word_embeddings` (the paper, Section 3.4) one matrix
    `shared` serves as source and target embedding."""

    def __init__(self, config: VaswaniConfig):
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

    def _keep_pad_row_zero(self):
        """The <pad> row is the decoder's start vector and stays zero (t2t's zero start vector): with tied weights the
        output projection would train it despite `padding_idx`, so a gradient hook (once per parameter) zeroes it."""
        pad = self.config.pad_token_id
        for embedding in {id(m): m for m in (self.encoder.embed_tokens, self.decoder.embed_tokens)}.values():
            weight = embedding.weight
            if pad is not None and weight.requires_grad and not getattr(weight, "_vaswani_pad_hook", False):
                weight.register_hook(lambda grad: grad.index_fill(0, grad.new_tensor([pad], dtype=torch.long), 0.0))
                weight._vaswani_pad_hook = True

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
        if (
            decoder_input_ids is None and decoder_inputs_embeds is None
        ):  # else the decoder's "exactly one of input_ids"
            raise ValueError(
                "VaswaniModel: no decoder input; pass labels (the model with a head shifts them right), "
                "decoder_input_ids or decoder_inputs_embeds; model.generate(...) translates"
            )
        if self.training:
            self._keep_pad_row_zero()
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
    """A summed loss divided by the batch's target tokens, or by `num_items_in_batch` when `Trainer` passes it (the
    whole update's, so that gradient accumulation equals one large batch); the count stays on the device."""
    if num_items_in_batch is None:
        return loss_sum / (labels != IGNORE_INDEX).sum().clamp(min=1)
    return loss_sum / (
        num_items_in_batch.to(loss_sum.device) if isinstance(num_items_in_batch, torch.Tensor) else num_items_in_batch
    )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing input (3.1): labels (B, T), -100 where ignored, shifted one step right after
    `decoder_start_token_id` -> (B, T) decoder input ids."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == IGNORE_INDEX, pad_token_id)


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, VaswaniGenerationMixin):
    """The Transformer for translation: `VaswaniModel` plus the pre-softmax projection, which shares the embedding
    matrix (Section 3.4). `forward(..., labels=...)` returns the plain cross-entropy per target token, as every
    transformers model does; the paper's label-smoothed objective (5.4) is `vaswani_hf.training.objective`."""

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
        """input_ids (B, S); decoder_input_ids (B, T); labels (B, T), -100 where ignored."""
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


__all__ = [
    "VaswaniPreTrainedModel",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "sinusoid_table",
    "per_target_token",
    "shift_tokens_right",
]
