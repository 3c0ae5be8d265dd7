"""Configuration of the original Transformer ("Attention Is All You Need", Vaswani et al., 2017).

This file is copied next to the weights when a model is saved, and is run by `trust_remote_code=True` on machines
without `vaswani_hf`: it imports only `transformers` (and `huggingface_hub`, which transformers depends on) and its
sibling pipeline_vaswani.py, whose pipeline every config names (`custom_pipelines`): the relative import is what makes
every `save_pretrained`, by any client, copy that file too (transformers copies a saved class's relative imports).

Field names follow the paper (Section 3 and Table 3); transformers' generic names (`hidden_size`,
`num_attention_heads`, `encoder_layers`, ...) are mapped onto them through `attribute_map`.
Where the paper is silent we follow tensor2tensor's first release (`transformer_base`, June 2017) and say so.
"""

import copy

from huggingface_hub.dataclasses import strict
from transformers.configuration_utils import PreTrainedConfig

from .pipeline_vaswani import custom_pipelines as translation_pipelines

POSITION_ENCODINGS = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "concatenated")


@strict
class VaswaniConfig(PreTrainedConfig):
    r"""
    Configuration of [`VaswaniModel`] / [`VaswaniForConditionalGeneration`]. The defaults are the paper's base model
    (Table 3, first row) with the ~37k shared BPE vocabulary of its EN-DE experiments (Section 5.1).

    Args:
        vocab_size: size of the one vocabulary shared by source and target (Section 3.4).
        d_model: model width (paper: 512 base, 1024 big).
        d_ff: inner width of the position-wise feed-forward network, Eq. (2) (paper: 2048 / 4096).
        num_heads: attention heads h (paper: 8 / 16).
        d_k: per-head query/key width; `None` means `d_model // num_heads` (Section 3.2.2).
        d_v: per-head value width; `None` means `d_model // num_heads`. Table 3 (B) changes d_k alone.
        num_encoder_layers / num_decoder_layers: N (paper: 6).
        dropout: residual dropout P_drop, applied to each sub-layer output and to the embedding+position sums
            (Section 5.4; 0.1 base, 0.3 big EN-DE).
        attention_dropout: dropout on attention weights. The paper does not use it; t2t v1 default 0.0.
        relu_dropout: dropout after the ReLU of the feed-forward network. Not in the paper; t2t v1 default 0.0.
        max_position_embeddings: rows of the learned position table; sinusoids are computed for this many
            positions and extended on demand (Section 3.5: they "may allow the model to extrapolate").
        position_encoding: "sinusoidal" (Section 3.5) or "learned" (Table 3, row E).
        sinusoid_layout: "interleaved" is the paper's formula PE(pos, 2i) = sin, PE(pos, 2i+1) = cos;
            "concatenated" puts all sines first, then all cosines, as tensor2tensor, fairseq and Marian do.
        attention_bias: biases on the Q/K/V/output projections. The paper's Eq. (1) projections have none.
        layer_norm_eps: epsilon of LayerNorm. Not in the paper; t2t v1 uses 1e-6.
        scale_embedding: multiply embeddings by sqrt(d_model) (Section 3.4).
        tie_word_embeddings: one matrix for source embedding, target embedding and the pre-softmax projection
            (Section 3.4). When False, all three are separate.
        init_std: standard deviation of the embedding initialisation; `None` means d_model ** -0.5 as in t2t v1,
            so that embeddings times sqrt(d_model) have unit variance.
        custom_pipelines: the pipelines `transformers.pipeline(task, model=folder, trust_remote_code=True)` finds in
            config.json; `None` means this model's translation pipeline under "translation" and
            "text2text-generation" (`pipeline_vaswani.custom_pipelines`; pass its result with a language pair to add
            "translation_xx_to_yy").
    """

    model_type = "vaswani"
    # the cache's output name from / before transformers 5.24
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "encoder_attention_heads": "num_heads",
        "decoder_attention_heads": "num_heads",
        "num_hidden_layers": "num_encoder_layers",
        "encoder_layers": "num_encoder_layers",
        "decoder_layers": "num_decoder_layers",
        "intermediate_size": "d_ff",
        "encoder_ffn_dim": "d_ff",
        "decoder_ffn_dim": "d_ff",
        "activation_dropout": "relu_dropout",
    }

    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: int | None = None
    d_v: int | None = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    relu_dropout: float | int = 0.0
    max_position_embeddings: int = 1024
    position_encoding: str = "sinusoidal"
    sinusoid_layout: str = "interleaved"
    attention_bias: bool = False
    layer_norm_eps: float = 1e-6
    scale_embedding: bool = True
    tie_word_embeddings: bool = True
    init_std: float | None = None
    custom_pipelines: dict | None = None
    # Token ids agree with `vaswani_hf.tokenization`: <pad>=0, <s>=1, </s>=2, <unk>=3.
    # The decoder starts from <pad>, whose embedding row is zero and never trained: this is tensor2tensor's
    # "shift right with a zero vector" start (and Marian's), which the paper does not specify.
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 0
    is_encoder_decoder: bool = True
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        if self.d_k is None:
            self.d_k = self._head_width("d_k")
        if self.d_v is None:
            self.d_v = self._head_width("d_v")
        if self.custom_pipelines is None:
            self.custom_pipelines = translation_pipelines()
        self._check_settings()  # plain ValueError here; `@strict` wraps errors raised by validate_* methods
        super().__post_init__(**kwargs)

    def _head_width(self, name: str) -> int:
        if self.num_heads <= 0:
            raise ValueError(f"VaswaniConfig: num_heads must be positive, got {self.num_heads}.")
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"VaswaniConfig: d_model={self.d_model} is not divisible by num_heads={self.num_heads}, so {name} "
                f"cannot default to d_model // num_heads; pass {name} explicitly (Table 3, rows A/B)."
            )
        return self.d_model // self.num_heads

    def validate_vaswani(self):
        """Run by `@strict` before saving, so that edited attributes are checked again."""
        self._check_settings()

    def _check_settings(self):
        """Clear errors for impossible settings, naming the field."""
        for name in ("vocab_size", "d_model", "d_ff", "num_heads", "d_k", "d_v", "num_encoder_layers",
                     "num_decoder_layers", "max_position_embeddings"):
            value = getattr(self, name)
            if value is None or value <= 0:
                raise ValueError(f"VaswaniConfig: {name} must be a positive integer, got {value!r}.")
        for name in ("dropout", "attention_dropout", "relu_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"VaswaniConfig: {name} must be in [0, 1), got {value!r}.")
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"VaswaniConfig: unknown position_encoding {self.position_encoding!r}; "
                f"choose one of {POSITION_ENCODINGS}."
            )
        if self.sinusoid_layout not in SINUSOID_LAYOUTS:
            raise ValueError(
                f"VaswaniConfig: unknown sinusoid_layout {self.sinusoid_layout!r}; choose one of {SINUSOID_LAYOUTS}."
            )
        if self.position_encoding == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"VaswaniConfig: sinusoidal positions need an even d_model, got {self.d_model}.")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"VaswaniConfig: layer_norm_eps must be positive, got {self.layer_norm_eps!r}.")

    def get_text_config(self, decoder=None, encoder=None) -> "VaswaniConfig":
        """transformers sizes decoder caches from `get_text_config(decoder=True).num_hidden_layers`, which the
        attribute map points at the encoder: answer with a copy whose layer count is the decoder's."""
        if decoder and not encoder and self.num_decoder_layers != self.num_encoder_layers:
            decoder_view = copy.deepcopy(self)
            decoder_view.num_encoder_layers = self.num_decoder_layers
            return decoder_view
        return super().get_text_config(decoder=decoder, encoder=encoder)

    @classmethod
    def base(cls, **overrides) -> "VaswaniConfig":
        """The paper's base model (Table 3, "base"): N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (its eps_ls=0.1 is
        a training setting: `vaswani_hf.training.objective`).

        Every other Table 3 row is an override, e.g. `base(num_heads=16)` (A; d_k = d_v = d_model / h follow),
        `base(d_k=16)` (B), `base(num_encoder_layers=2, num_decoder_layers=2)` (C), `base(dropout=0.0)` (D),
        `base(position_encoding="learned")` (E).
        """
        return cls(**overrides)

    @classmethod
    def big(cls, **overrides) -> "VaswaniConfig":
        """The paper's big model (Table 3, "big"): d_model=1024, d_ff=4096, h=16, P_drop=0.3 (EN-DE; 0.1 for
        EN-FR, Section 6.1)."""
        settings = dict(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3)
        settings.update(overrides)
        return cls(**settings)


__all__ = ["VaswaniConfig"]
