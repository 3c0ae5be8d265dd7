"""The original Transformer ("Attention Is All You Need", Vaswani et al., 2017) as a native transformers model.

Read top to bottom, this file follows the paper's Section 3:
    positions (3.5) -> attention (3.2, Eq. 1) -> feed-forward (3.3, Eq. 2) -> encoder / decoder layers (3.1)
    -> encoder / decoder stacks with shared, scaled embeddings (3.4) -> the seq2seq model and its loss (5.4).

Shapes: B batch, S source length, T target length, D d_model, H heads, V vocabulary.

This file is copied next to the weights on `save_pretrained` and runs under `trust_remote_code=True` on machines
without `vaswani_hf`, so it imports only torch, transformers and its own configuration file (relative import).
Where the paper is silent we follow tensor2tensor's first release (t2t v1, June 2017) and say so.
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import can_return_tuple, logging
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .beam_search_vaswani import force_eos, lean_beam_search, lean_greedy_search, top_candidates
from .configuration_vaswani import VaswaniConfig

logger = logging.get_logger(__name__)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing input: the target shifted one step right, starting with `decoder_start_token_id` (3.1).

    labels: (B, T) with -100 at ignored positions -> (B, T) decoder input ids.
    """
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.5: positional encodings
# ---------------------------------------------------------------------------------------------------------------------


def sinusoid_table(num_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) (Section 3.5).

    layout "interleaved" is the paper's formula (sin on even, cos on odd dimensions); "concatenated" puts the
    d_model/2 sines first and the cosines after them, as tensor2tensor, fairseq and Marian do. Both use the paper's
    frequencies (t2t and fairseq divide by d_model/2 - 1 instead of d_model/2; Marian uses the paper's).
    Returns (num_positions, d_model) in float32.
    """
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


class VaswaniSinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids (Section 3.5). Not a parameter and not saved; grown on demand for longer inputs."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.d_model = config.d_model
        self.layout = config.sinusoid_layout
        table = sinusoid_table(config.max_position_embeddings, config.d_model, config.sinusoid_layout)
        self.register_buffer("table", table, persistent=False)

    def forward(self, position_ids: torch.Tensor, num_positions: int | None = None) -> torch.Tensor:
        """position_ids: (T,) or (B, T) -> (..., D). `num_positions` (max id + 1), when the caller knows it, saves
        reading the ids back from the device at every decoding step."""
        needed = num_positions
        if needed is None:
            needed = int(position_ids.max()) + 1 if position_ids.numel() else 0
        if needed > self.table.shape[0]:  # extrapolate to lengths unseen in training, as the paper allows
            self.table = sinusoid_table(needed, self.d_model, self.layout).to(self.table.device)
        return self.table[position_ids]


class VaswaniLearnedPositionalEmbedding(nn.Embedding):
    """Learned positions, Table 3 row (E). Limited to `max_position_embeddings` positions."""

    def __init__(self, config: VaswaniConfig):
        super().__init__(config.max_position_embeddings, config.d_model)

    def forward(self, position_ids: torch.Tensor, num_positions: int | None = None) -> torch.Tensor:
        if num_positions is None:
            num_positions = int(position_ids.max()) + 1 if position_ids.numel() else 0
        if num_positions > self.num_embeddings:
            raise ValueError(
                f"Sequence of {num_positions} positions is longer than max_position_embeddings="
                f"{self.num_embeddings} of this model's learned positional embedding (Table 3, row E). Shorten the "
                "input or use position_encoding='sinusoidal', which extrapolates."
            )
        return super().forward(position_ids)


# ---------------------------------------------------------------------------------------------------------------------
# Section 5.4: residual dropout
# ---------------------------------------------------------------------------------------------------------------------


def dropout(hidden: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout (Section 5.4): zero each element with probability p and scale the rest by 1 / (1 - p).

    The same distribution as `nn.functional.dropout`. On CPU the keep-mask is drawn as `rand >= p`: PyTorch's CPU
    dropout draws it with `bernoulli_`, which is about 2.3x slower over forward + backward, and a d_model-256 training
    step spends ~13% of its time there (measured on a 4096-token batch, 2 cores). Elsewhere (CUDA's fused kernel) it is
    `nn.functional.dropout`.
    """
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
    query: torch.Tensor,  # (B, H, T_q, d_k)
    key: torch.Tensor,  # (B, H, T_k, d_k)
    value: torch.Tensor,  # (B, H, T_k, d_v)
    attention_mask: torch.Tensor | None,  # additive (B, 1, T_q, T_k) or boolean
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, Eq. (1). Returns ((B, T_q, H, d_v), (B, H, T_q, T_k))."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, T_q, T_k)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (B, T_q, H, d_v)
    return output, weights


class VaswaniAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (3.2.2).

    The h projections of each kind are one linear layer: W^Q, W^K: D -> h*d_k, W^V: D -> h*d_v, W^O: h*d_v -> D.
    The paper's projections have no bias (`config.attention_bias=False`).
    With `is_cross_attention` the keys and values come from the encoder output and are computed once per source
    sentence during generation (kept in the cross-attention cache).
    """

    def __init__(self, config: VaswaniConfig, is_causal: bool = False, is_cross_attention: bool = False,
                 layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = config.num_heads
        self.d_k = config.d_k
        self.d_v = config.d_v
        self.scaling = config.d_k ** -0.5  # the 1/sqrt(d_k) of Eq. (1)
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=bias)
        self.k_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=bias)
        self.v_proj = nn.Linear(config.d_model, self.num_heads * self.d_v, bias=bias)
        self.out_proj = nn.Linear(self.num_heads * self.d_v, config.d_model, bias=bias)

    def _split_heads(self, x: torch.Tensor, width: int) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_heads, width).transpose(1, 2)  # (B, L, H*w) -> (B, H, L, w)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T_q, D)
        key_value_states: torch.Tensor | None = None,  # (B, S, D) encoder output for cross-attention
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        cross_group: int = 1,
        group_queries: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`cross_group` g > 1 (beam search, cross-attention only): the rows of `hidden_states` are B sentences times
        g beams, consecutive, and the g copies of each sentence's encoder output are identical, so the source K/V are
        projected once per sentence. With `group_queries` they are also kept once per sentence, (B/g, H, S, d), and
        the g beams' queries attend to them together (less memory traffic; equal up to float rounding, ~1e-7);
        otherwise they are repeated for the g beams (bit-identical to projecting every row).
        """
        batch, q_len = hidden_states.shape[:2]
        query = self._split_heads(self.q_proj(hidden_states), self.d_k)  # (B, H, T_q, d_k)

        cache = None
        if past_key_values is not None:
            if isinstance(past_key_values, EncoderDecoderCache):
                cache = (past_key_values.cross_attention_cache if self.is_cross_attention
                         else past_key_values.self_attention_cache)
            else:
                cache = past_key_values

        if self.is_cross_attention and cache is not None and past_key_values.is_updated.get(self.layer_idx):
            # the source's K/V were projected at the first decoding step: reuse them
            key = cache.layers[self.layer_idx].keys
            value = cache.layers[self.layer_idx].values
        else:
            source = key_value_states if self.is_cross_attention else hidden_states
            if cross_group > 1:
                source = source[::cross_group]  # one copy per sentence
            key = self._split_heads(self.k_proj(source), self.d_k)  # (B, H, T_k, d_k)
            value = self._split_heads(self.v_proj(source), self.d_v)  # (B, H, T_k, d_v)
            if cross_group > 1 and not group_queries:
                key, value = key.repeat_interleave(cross_group, 0), value.repeat_interleave(cross_group, 0)
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if self.is_cross_attention:
                    past_key_values.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if not group_queries:
            cross_group = 1
        if cross_group > 1:  # (B*g, H, T_q, d_k) -> (B, H, g*T_q, d_k): a sentence's beams share its K/V
            query = query.view(batch // cross_group, cross_group, self.num_heads, q_len, self.d_k).transpose(1, 2)
            query = query.reshape(batch // cross_group, self.num_heads, cross_group * q_len, self.d_k)
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        if cross_group > 1 and weights is not None:  # (B, H, g*T_q, S) -> (B*g, H, T_q, S)
            weights = weights.view(batch // cross_group, self.num_heads, cross_group, q_len, -1).transpose(1, 2)
            weights = weights.reshape(batch, self.num_heads, q_len, -1)
        # (B, T_q, H, d_v), or (B/g, g*T_q, H, d_v) grouped, which has the same memory layout
        output = self.out_proj(output.reshape(batch, q_len, self.num_heads * self.d_v))  # (B, T_q, D)
        return output, weights


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.3: position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, Eq. (2); inner width d_ff.

    `relu_dropout` (not in the paper, t2t v1 default 0.0) drops the ReLU output.
    """

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.relu_dropout = config.relu_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = nn.functional.relu(self.fc1(x))  # (B, L, d_ff)
        hidden = dropout(hidden, self.relu_dropout, self.training)
        return self.fc2(hidden)  # (B, L, D)


# ---------------------------------------------------------------------------------------------------------------------
# Section 3.1: encoder and decoder layers, post-norm: LayerNorm(x + Dropout(Sublayer(x)))
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniEncoderLayer(GradientCheckpointingLayer):
    """Self-attention, then feed-forward; each wrapped as LayerNorm(x + Dropout(Sublayer(x))) (3.1, 5.4)."""

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__()
        self.self_attn = VaswaniAttention(config, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = VaswaniFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = config.dropout

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        residual = hidden_states
        hidden_states, _ = self.self_attn(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)

        residual = hidden_states
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        return self.final_layer_norm(residual + hidden_states)  # (B, S, D)


class VaswaniDecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, encoder-decoder attention, feed-forward; each post-normed (3.1, 3.2.3)."""

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__()
        self.self_attn = VaswaniAttention(config, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = VaswaniAttention(config, is_cross_attention=True, layer_idx=layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = VaswaniFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = config.dropout

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T, D)
        attention_mask: torch.Tensor | None = None,  # causal + target padding
        encoder_hidden_states: torch.Tensor | None = None,  # (B, S, D)
        encoder_attention_mask: torch.Tensor | None = None,  # source padding
        past_key_values: Cache | None = None,
        cross_group: int = 1,
        group_queries: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        residual = hidden_states
        hidden_states, _ = self.self_attn(
            hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs
        )
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)

        residual = hidden_states
        hidden_states, _ = self.encoder_attn(
            hidden_states,
            key_value_states=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            cross_group=cross_group,
            group_queries=group_queries,
            **kwargs,
        )
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = self.encoder_attn_layer_norm(residual + hidden_states)

        residual = hidden_states
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        return self.final_layer_norm(residual + hidden_states)  # (B, T, D)


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
        """t2t v1 initialisation (the paper does not give one):
        - linear weights "uniform unit scaling": U(-a, a) with a = sqrt(3 / fan_in), i.e. variance 1 / fan_in;
          biases zero;
        - token embeddings N(0, d_model^-0.5) (`config.init_std` overrides), so that embedding * sqrt(d_model) has
          unit variance; the <pad> row is zero (it is the decoder's start vector, see `VaswaniConfig`);
        - LayerNorm gain 1, bias 0; learned positions like token embeddings.
        """
        std = self.config.init_std if self.config.init_std is not None else self.config.d_model ** -0.5
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
        elif isinstance(module, VaswaniSinusoidalPositionalEncoding):
            init.copy_(module.table, sinusoid_table(module.table.shape[0], module.d_model, module.layout))


# ---------------------------------------------------------------------------------------------------------------------
# Sections 3.1, 3.4: encoder and decoder stacks with shared embeddings scaled by sqrt(d_model)
# ---------------------------------------------------------------------------------------------------------------------


def _positional_encoding(config: VaswaniConfig) -> nn.Module:
    if config.position_encoding == "learned":
        return VaswaniLearnedPositionalEmbedding(config)
    return VaswaniSinusoidalPositionalEncoding(config)


class VaswaniStack(VaswaniPreTrainedModel):
    """What the encoder and decoder stacks share: N layers over Dropout(Embedding(x) * sqrt(d_model) + PE)
    (Sections 3.1, 3.4, 3.5, 5.4)."""

    layer_class: type[nn.Module]

    def __init__(self, config: VaswaniConfig, num_layers: int):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = _positional_encoding(config)
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

    layer_class = VaswaniEncoderLayer

    def __init__(self, config: VaswaniConfig):
        super().__init__(config, config.num_encoder_layers)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, S)
        attention_mask: torch.Tensor | None = None,  # (B, S), 1 for tokens, 0 for padding
        inputs_embeds: torch.Tensor | None = None,  # (B, S, D), unscaled token embeddings
        **kwargs,
    ) -> BaseModelOutput:
        hidden_states, _ = self.embed(input_ids, inputs_embeds)  # (B, S, D)

        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)  # (B, S, D); no final LayerNorm (post-norm)


def _rows_are_repeated(states: torch.Tensor, mask: torch.Tensor | None, group: int) -> bool:
    """True when the rows of `states` (and of `mask`) are consecutive groups of `group` identical copies, as
    `generate()` repeats every sentence's inputs for its beams."""
    rows = states.shape[0]
    if group < 1 or rows % group:
        return False
    grouped = states.view(rows // group, group, *states.shape[1:])
    if not bool((grouped == grouped[:, :1]).all()):
        return False
    if mask is None:
        return True
    grouped_mask = mask.view(rows // group, group, *mask.shape[1:])
    return bool((grouped_mask == grouped_mask[:, :1]).all())


class VaswaniDecoder(VaswaniStack):
    """N identical layers over Dropout(Embedding(y_shifted) * sqrt(d_model) + PE), masked so that position i sees only
    positions < i+1 (Section 3.1), attending to the encoder output.

    `share_cross_attention_across_beams` (beam search only): the beams of a sentence attend together to one copy of
    its source K/V instead of a copy per beam: ~8% faster beam search on CPU, scores equal up to float rounding
    (~1e-7 relative; the tokens agreed on every benchmark sentence). Set it to False on the decoder for results
    bit-identical to the per-row computation (the K/V are then still projected once per sentence, then repeated).
    """

    share_cross_attention_across_beams = True
    _beam_search_group = 1  # set by VaswaniForConditionalGeneration._beam_search for its duration

    _can_record_outputs = {
        "hidden_states": VaswaniDecoderLayer,
        "attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="encoder_attn"),
    }

    layer_class = VaswaniDecoderLayer

    def __init__(self, config: VaswaniConfig):
        super().__init__(config, config.num_decoder_layers)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, T_past + T) target padding
        encoder_hidden_states: torch.Tensor | None = None,  # (B, S, D)
        encoder_attention_mask: torch.Tensor | None = None,  # (B, S)
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (B, T, D), unscaled token embeddings
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden_states, positions = self.embed(input_ids, inputs_embeds, past_length)  # (B, T, D), (T,)
        batch, length = hidden_states.shape[:2]

        if attention_mask is None and length == 1:
            causal_mask = None  # one new query without target padding may see every earlier position
        else:
            if attention_mask is None:
                attention_mask = torch.ones(batch, past_length + length, device=hidden_states.device, dtype=torch.long)
            self_attn_cache = (
                past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache)
                else past_key_values
            )
            causal_mask = create_causal_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=attention_mask,
                past_key_values=self_attn_cache,
                position_ids=positions.unsqueeze(0),
            )
        cross_group = self._cross_group(past_key_values, encoder_hidden_states, encoder_attention_mask)
        encoder_attention_mask = self._encoder_mask(
            past_key_values, hidden_states, encoder_hidden_states, encoder_attention_mask, cross_group
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, for gradient checkpointing
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                cross_group=cross_group,
                group_queries=self.share_cross_attention_across_beams,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, past_key_values=past_key_values
        )

    # -- decoding speed-ups, all scoped to one generation cache (one `generate()` call) -------------------------------

    def _cross_group(self, past_key_values, encoder_hidden_states, encoder_attention_mask) -> int:
        """Beam search repeats each sentence's encoder output once per beam (consecutive rows). When
        `_beam_search` announces g beams, the first step checks that the rows really are g identical copies and
        records g on the cache; from then on the cross-attention K/V are projected and kept once per sentence
        (g times less work and memory), which gives the same numbers as the repeated rows."""
        if not isinstance(past_key_values, EncoderDecoderCache) or encoder_hidden_states is None:
            return 1
        group = getattr(past_key_values, "_vaswani_cross_group", None)
        if group is not None:
            return group
        group = self._beam_search_group
        if past_key_values.is_updated.get(0) or group <= 1 or self.config._attn_implementation not in ("sdpa",
                                                                                                         "eager"):
            group = 1  # cross K/V already projected for every row, or an attention kernel we did not check
        elif not _rows_are_repeated(encoder_hidden_states, encoder_attention_mask, group):
            group = 1
        past_key_values._vaswani_cross_group = group
        return group

    def _encoder_mask(self, past_key_values, hidden_states, encoder_hidden_states, encoder_attention_mask,
                      cross_group: int):
        """The cross-attention mask from the 2D source mask; during generation it is the same at every step, so it
        is built once and kept on the cache (reused while the same 2D mask tensor comes back)."""
        if not self.share_cross_attention_across_beams:
            cross_group = 1  # the per-row mask of the repeated K/V
        if cross_group > 1:  # the g * T_q grouped queries share one (B/g, 1, 1, S) padding mask
            hidden_states = hidden_states[::cross_group, :1]
        key = (self.config._attn_implementation, cross_group, hidden_states.shape[1], hidden_states.dtype)
        cached = getattr(past_key_values, "_vaswani_encoder_mask", None)
        if cached is not None and cached[0] is encoder_attention_mask and cached[1] == key:
            return cached[2]
        mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask[::cross_group] if encoder_attention_mask is not None else None,
            encoder_hidden_states=(encoder_hidden_states[::cross_group] if encoder_hidden_states is not None
                                   else None),
        )
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values._vaswani_encoder_mask = (encoder_attention_mask, key, mask)
        return mask


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

    def get_encoder(self):
        return self.encoder

    def _keep_pad_row_zero(self):
        """The <pad> embedding row is the decoder's start vector and stays zero, as t2t's zero start vector.
        nn.Embedding(padding_idx) already blocks its gradient through the lookup; with tied weights the output
        projection would still train it, so a gradient hook zeroes that row (registered once per parameter)."""
        pad = self.config.pad_token_id
        for embedding in {id(m): m for m in (self.encoder.embed_tokens, self.decoder.embed_tokens)}.values():
            weight = embedding.weight
            if pad is not None and weight.requires_grad and not getattr(weight, "_vaswani_pad_hook", False):
                weight.register_hook(lambda grad: grad.index_fill(0, grad.new_tensor([pad], dtype=torch.long), 0.0))
                weight._vaswani_pad_hook = True

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
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
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# ---------------------------------------------------------------------------------------------------------------------
# Section 5.4: label-smoothed cross-entropy
# ---------------------------------------------------------------------------------------------------------------------


def label_smoothed_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = -100
) -> tuple[torch.Tensor, int]:
    """Summed label-smoothed cross-entropy over the non-ignored targets, and their count (Section 5.4).

    The target keeps probability 1 - epsilon and the other V - 1 classes share epsilon equally, as t2t v1
    (`smoothing_cross_entropy`) and fairseq do (transformers' `LabelSmoother` spreads epsilon over all V classes).
    PyTorch's fused `cross_entropy(label_smoothing=e)` gives the target 1 - e + e/V and the others e/V: with
    e = epsilon * V / (V - 1) that is exactly the distribution above, without materialising log-probabilities.
    Unlike t2t we do not subtract the smoothed distribution's entropy, so epsilon = 0 gives plain cross-entropy.

    logits: (B, T, V); labels: (B, T) with `ignore_index` at padding. Returns (scalar sum, number of targets).
    """
    vocab = logits.shape[-1]
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, vocab).float(),
        labels.reshape(-1),
        ignore_index=ignore_index,
        reduction="sum",
        label_smoothing=epsilon * vocab / (vocab - 1),
    )
    return loss, int((labels != ignore_index).sum())



# ---------------------------------------------------------------------------------------------------------------------
# Section 6.1: decoding as the paper did it -- beam 4, GNMT length penalty alpha 0.6, max length input + 50
# ---------------------------------------------------------------------------------------------------------------------


def gnmt_length_penalty(length, alpha: float):
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al., 2016), the penalty the paper's beam search divides scores by.
    |Y| counts the generated tokens including </s> (t2t v1 does the same)."""
    return ((5.0 + length) / 6.0) ** alpha


def default_generation_config(config: VaswaniConfig) -> GenerationConfig:
    """The paper's decoding settings (Section 6.1), saved as `generation_config.json`:

    - beam size 4, length penalty alpha = 0.6 with the GNMT formula (`length_penalty_type="gnmt"`;
      `"hf"` selects transformers' score / |Y| ** alpha);
    - maximum output length = input length + 50, per sentence (`max_length_a * source_length + max_length_b`,
      counted in tokens including </s>; set `max_length_b=None` to turn the rule off);
    - "terminate early when possible": `early_stopping="never"` is transformers' name for tensor2tensor's rule,
      which stops a sentence once no running beam, even at the maximum length, can beat the worst finished one.
      (`early_stopping=True` stops as soon as 4 hypotheses have finished: faster, not the paper's.)
    """
    return GenerationConfig(
        num_beams=4,
        length_penalty=0.6,
        length_penalty_type="gnmt",
        early_stopping="never",
        max_length_a=1.0,
        max_length_b=50,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )


def fast_topk(scores: torch.Tensor, k: int, chunk: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.topk(scores, k)` (largest, sorted) over the last dimension of a 2D tensor, blocked: the maximum of each
    block of `chunk` scores, then an exact top-k over the k blocks with the largest maxima (and the < chunk scores
    left over at the end). Values and indices are `torch.topk`'s (up to the order among exactly equal scores); on CPU
    it is several times faster for a beam search's (batch, beams * vocab) scores. It is the lean beam search's
    `top_candidates` with a single beam whose score is 0."""
    return top_candidates(scores.unsqueeze(1), scores.new_zeros(scores.shape[0], 1), k, chunk)


class SourceLengthLimitLogitsProcessor(LogitsProcessor):
    """Forces </s> once a hypothesis reaches its own sentence's limit `floor(a * source_length + b)` (Section 6.1:
    "maximum output length to input length + 50"). transformers only has a global `max_length`.

    source_lengths: (B,) non-pad source tokens per sentence; rows of `input_ids` are the B sentences each repeated
    `num_beams * num_return_sequences` times consecutively, as `generate()` expands them.
    """

    def __init__(self, source_lengths: torch.Tensor, a: float, b: int, eos_token_id: int):
        self.limits = torch.floor(source_lengths.float() * a + b).long().clamp(min=1)  # (B,) tokens incl. </s>
        self.eos_token_id = eos_token_id
        self.prompt_length = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]  # the decoder start token
        generated = input_ids.shape[1] - self.prompt_length  # tokens already emitted by every row
        limits = self.limits.to(scores.device).repeat_interleave(scores.shape[0] // self.limits.shape[0])
        at_limit = generated + 1 >= limits  # (rows,): the next token is the last one allowed
        if bool(at_limit.any()):
            scores = force_eos(scores, at_limit, self.eos_token_id)
        return scores


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, GenerationMixin):
    """The Transformer for translation: `VaswaniModel` plus the pre-softmax projection, which shares the embedding
    matrix (Section 3.4), and the label-smoothed loss (Section 5.4).

    Loss normalisation: the summed loss is divided by the number of target tokens, or by `num_items_in_batch` when
    `Trainer` passes it, so gradient accumulation gives the same update as one large batch.
    """

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
        self.generation_config = default_generation_config(config)
        self._length_penalty_type = "hf"  # set for the duration of each beam search from its generation config

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, S)
        attention_mask: torch.Tensor | None = None,  # (B, S)
        decoder_input_ids: torch.LongTensor | None = None,  # (B, T)
        decoder_attention_mask: torch.Tensor | None = None,  # (B, T)
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (B, T), -100 where ignored
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = shift_tokens_right(
                    labels, self.config.pad_token_id, self.config.decoder_start_token_id
                )
        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, V)

        loss = None
        if labels is not None:
            loss_sum, num_tokens = label_smoothed_cross_entropy(logits, labels, self.config.label_smoothing)
            denominator = num_items_in_batch if num_items_in_batch is not None else max(num_tokens, 1)
            if isinstance(denominator, torch.Tensor):
                denominator = denominator.to(loss_sum.device)
            loss = loss_sum / denominator

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    # -- decoding (Section 6.1) ---------------------------------------------------------------------------------
    # Plain beam search and greedy decoding run the lean loops of beam_search_vaswani.py, which compute the same
    # tokens as transformers' `_beam_search` / `_sample` with less work (finished sentences leave the batch; see that
    # file); anything they do not implement (sampling, per-step outputs, other logits processors) runs transformers'
    # loops, and tests/test_beam_search.py checks that both give the same output.
    # In transformers' beam search, finished scores are divided by |Y| ** alpha. The GNMT penalty of the paper is
    # applied there by overriding the two private hooks where that division happens (`_update_finished_beams`,
    # `_check_early_stop_heuristic`); tests/test_generation_scoring.py pins their behaviour so that a transformers
    # upgrade that changes them fails a test instead of silently changing scores.

    def generate(self, inputs=None, generation_config=None, logits_processor=None, **kwargs):
        """`GenerationMixin.generate` plus the paper's per-sentence maximum length (input length + 50).

        Extra keyword arguments (defaults from `generation_config`): `max_length_a`, `max_length_b` (the limit is
        `floor(a * source_length + b)` generated tokens including </s>; `max_length_b=None` disables it) and
        `length_penalty_type` ("gnmt" or "hf"). An explicit `max_new_tokens` / `max_length` stays a global cap.
        """
        config = generation_config if generation_config is not None else self.generation_config
        a = kwargs.pop("max_length_a", getattr(config, "max_length_a", None))
        b = kwargs.pop("max_length_b", getattr(config, "max_length_b", None))
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        attention_mask = kwargs.get("attention_mask")
        if b is not None and (input_ids is not None or attention_mask is not None):
            if attention_mask is not None:
                source_lengths = attention_mask.sum(-1)
            else:
                source_lengths = (input_ids != self.config.pad_token_id).sum(-1)
            eos = kwargs.get("eos_token_id", config.eos_token_id)
            eos = eos[0] if isinstance(eos, (list, tuple)) else eos
            limiter = SourceLengthLimitLogitsProcessor(source_lengths, 1.0 if a is None else a, b, eos)
            logits_processor = LogitsProcessorList([*(logits_processor or []), limiter])
            if (kwargs.get("max_new_tokens") is None and kwargs.get("max_length") is None
                    and getattr(config, "max_new_tokens", None) is None):
                # the global bound is the longest sentence's limit; given as max_length (start token included), it
                # also overrides a max_length that Seq2SeqTrainer writes into the generation config (default 20)
                prompt = kwargs.get("decoder_input_ids")
                kwargs["max_length"] = (1 if prompt is None else prompt.shape[-1]) + int(limiter.limits.max())
        return super().generate(inputs, generation_config=generation_config, logits_processor=logits_processor,
                                **kwargs)

    # Beam search and greedy decoding run `beam_search_vaswani.lean_beam_search` / `lean_greedy_search` when they
    # compute the same as transformers' loops (see `_lean_decoding_inputs`): the same tokens, less work. Set False on
    # a model to always run transformers' own `_beam_search` / `_sample`.
    use_lean_decoding = True

    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search keeps the surviving beams' self-attention K/V. The cross-attention K/V are the same for every
        beam of a sentence (beams never move across sentences), so they are left in place instead of being copied
        at every step as transformers' default reorder does."""
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values

    def _beam_search(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                     **model_kwargs):
        penalty_type = getattr(generation_config, "length_penalty_type", "hf")
        if penalty_type not in ("gnmt", "hf"):
            raise ValueError(f"length_penalty_type must be 'gnmt' or 'hf', got {penalty_type!r}.")
        lean = self._lean_decoding_inputs(input_ids, logits_processor, stopping_criteria, generation_config,
                                             synced_gpus, model_kwargs)
        if lean is not None:
            alpha = float(generation_config.length_penalty)
            if penalty_type == "gnmt":
                def length_penalty(length):
                    return gnmt_length_penalty(length, alpha)
            else:
                def length_penalty(length):
                    return length ** alpha
            return lean_beam_search(self, **lean, num_beams=generation_config.num_beams,
                                    num_return_sequences=generation_config.num_return_sequences,
                                    length_penalty=length_penalty, alpha=alpha,
                                    early_stopping=generation_config.early_stopping)
        self._length_penalty_type = penalty_type
        decoder = self.get_decoder()
        # generate() repeated every sentence's inputs max(num_beams, num_return_sequences) == num_beams times
        decoder._beam_search_group = generation_config.num_beams
        try:
            return super()._beam_search(input_ids, logits_processor, stopping_criteria, generation_config,
                                        synced_gpus=synced_gpus, **model_kwargs)
        finally:
            self._length_penalty_type = "hf"
            decoder._beam_search_group = 1

    def _sample(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                streamer=None, **model_kwargs):
        """Greedy decoding runs `beam_search_vaswani.lean_greedy_search` (same tokens as transformers' loop, finished
        sentences leave the batch) when `_lean_decoding_inputs` allows it; sampling and everything else run
        transformers' `_sample`."""
        if not generation_config.do_sample and streamer is None:
            lean = self._lean_decoding_inputs(input_ids, logits_processor, stopping_criteria, generation_config,
                                                 synced_gpus, model_kwargs)
            if lean is not None and generation_config._pad_token_tensor is not None:
                lean["fill_value"] = int(generation_config._pad_token_tensor)  # transformers pads finished rows
                return lean_greedy_search(self, **lean)
        return super()._sample(input_ids, logits_processor, stopping_criteria, generation_config,
                               synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)

    def _lean_decoding_inputs(self, input_ids, logits_processor, stopping_criteria, generation_config,
                                 synced_gpus, model_kwargs) -> dict | None:
        """The arguments of `lean_beam_search` (and `lean_greedy_search`) when it computes exactly what transformers'
        `_beam_search` (`_sample`) would, else None (then transformers' loop runs). Conditions: eval mode, a cache,
        sdpa/eager attention, one decoder start token, one </s>, no sampling, no per-step outputs requested
        (`return_dict_in_generate`), no logits processor but the paper's length limit and min_length /
        min_new_tokens, no stopping criterion but max length and </s>, and every sentence's rows really are
        `num_beams` copies of one encoder output."""
        config = generation_config
        if (not self.use_lean_decoding or self.training or synced_gpus or config.do_sample
                or config.return_dict_in_generate or config.use_cache is False or input_ids.shape[1] != 1
                or self.config._attn_implementation not in ("sdpa", "eager")
                or config.num_return_sequences > config.num_beams):
            return None
        eos = config._eos_token_tensor
        if eos is None or eos.numel() != 1:
            return None
        allowed = {"encoder_outputs", "attention_mask", "past_key_values", "use_cache", "output_attentions",
                   "output_hidden_states", "cache_position"}
        if any(value is not None for key, value in model_kwargs.items() if key not in allowed):
            return None
        cache = model_kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length() > 0:
            return None
        limiters, min_steps = [], 0
        for processor in logits_processor or []:
            if isinstance(processor, SourceLengthLimitLogitsProcessor) and not limiters:
                limiters.append(processor)
            elif (isinstance(processor, (MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor))
                  and processor.eos_token_id.numel() == 1 and int(processor.eos_token_id) == int(eos)):
                if isinstance(processor, MinLengthLogitsProcessor):  # no </s> while 1 + step < min_length
                    min_steps = max(min_steps, processor.min_length - 1)
                else:  # no </s> while 1 + step - prompt_length_to_skip < min_new_tokens
                    min_steps = max(min_steps, processor.min_new_tokens + processor.prompt_length_to_skip - 1)
            else:
                return None  # transformers' loop applies any other processor
        max_length = None
        for criterion in stopping_criteria:
            if isinstance(criterion, MaxLengthCriteria):
                max_length = criterion.max_length
            elif not (isinstance(criterion, EosTokenCriteria) and criterion.eos_token_id.numel() == 1
                      and int(criterion.eos_token_id) == int(eos)):
                return None
        encoder_outputs = model_kwargs.get("encoder_outputs")
        if max_length is None or encoder_outputs is None:
            return None
        states = encoder_outputs[0]  # (B * k, S, D)
        beams = config.num_beams
        mask = model_kwargs.get("attention_mask")
        if (states.shape[0] != input_ids.shape[0] or not _rows_are_repeated(states, mask, beams)
                or not _rows_are_repeated(input_ids, None, beams)):
            return None
        batch = states.shape[0] // beams
        mask = mask[::beams] if mask is not None else None
        if limiters:
            limits = limiters[0].limits
            if limits.shape[0] != batch:
                return None
        else:
            limits = None
        pad = config._pad_token_tensor
        fill = pad or eos[0] if eos is not None else -1  # what transformers pads beam-search output with
        return dict(encoder_hidden_states=states[::beams], encoder_attention_mask=mask,
                    decoder_start_ids=input_ids[::beams, 0], limits=limits, max_length=max_length,
                    eos_token_id=int(eos.reshape(-1)[0]), fill_value=int(fill), min_steps=min_steps)

    def _get_top_k_continuations(self, accumulated_log_probs, running_sequences, running_beam_indices, cur_len,
                                 decoder_prompt_len, do_sample, beams_to_keep, num_beams, batch_size, **kwargs):
        """transformers' top-K step with `torch.topk` over the (B, beams * V) scores replaced by `fast_topk` (the
        same values and indices, several times faster on CPU for K << beams * V); the rest is unchanged."""
        if do_sample:
            return super()._get_top_k_continuations(
                accumulated_log_probs=accumulated_log_probs, running_sequences=running_sequences,
                running_beam_indices=running_beam_indices, cur_len=cur_len, decoder_prompt_len=decoder_prompt_len,
                do_sample=do_sample, beams_to_keep=beams_to_keep, num_beams=num_beams, batch_size=batch_size,
                **kwargs,
            )
        topk_log_probs, topk_indices = fast_topk(accumulated_log_probs, beams_to_keep)
        vocab_size = accumulated_log_probs.shape[-1] // num_beams
        topk_current_beam_indices = topk_indices // vocab_size
        topk_running_beam_indices = self._gather_beams(running_beam_indices, topk_current_beam_indices)
        topk_running_sequences = self._gather_beams(running_sequences, topk_current_beam_indices)
        topk_ids = topk_indices % vocab_size
        topk_running_sequences[:, :, cur_len] = topk_ids
        batch_offset = torch.arange(batch_size, device=topk_ids.device).view(-1, 1) * num_beams
        topk_running_beam_indices[:, :, cur_len - decoder_prompt_len] = topk_current_beam_indices + batch_offset
        return topk_log_probs, topk_running_sequences, topk_running_beam_indices

    def _update_finished_beams(self, **kwargs):
        """Scores of hypotheses finishing now: log P(Y) / lp(Y) with the GNMT lp when selected."""
        if self._length_penalty_type == "gnmt":
            length = kwargs["cur_len"] + 1 - kwargs["decoder_prompt_len"]
            kwargs["topk_log_probs"] = kwargs["topk_log_probs"] / gnmt_length_penalty(length, kwargs["length_penalty"])
            kwargs["length_penalty"] = 0.0  # transformers then divides by length ** 0 == 1
        return super()._update_finished_beams(**kwargs)

    def _check_early_stop_heuristic(self, **kwargs):
        """Can the best running beam still beat the worst finished one? With GNMT, its best possible score is
        log P / lp(max_length) for early_stopping="never" (t2t v1's bound), log P / lp(current length) otherwise."""
        if self._length_penalty_type == "gnmt":
            alpha = kwargs["length_penalty"]
            if kwargs["early_stopping"] == "never" and alpha > 0.0:
                length = kwargs["max_length"] - kwargs["decoder_prompt_len"]
            else:
                length = kwargs["cur_len"] - kwargs["decoder_prompt_len"]
            kwargs["running_beam_scores"] = kwargs["running_beam_scores"] / gnmt_length_penalty(length, alpha)
            kwargs["length_penalty"] = 0.0
        return super()._check_early_stop_heuristic(**kwargs)


__all__ = [
    "VaswaniPreTrainedModel",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "sinusoid_table",
    "label_smoothed_cross_entropy",
    "shift_tokens_right",
    "gnmt_length_penalty",
    "fast_topk",
    "default_generation_config",
    "SourceLengthLimitLogitsProcessor",
]
