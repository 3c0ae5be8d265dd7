"""Configuration of the original Transformer ("Attention Is All You Need", Vaswani et al., 2017).

This file is copied next to the weights when a model is saved, and is run by `trust_remote_code=True` on machines
without `vaswani_hf`: it imports only `transformers` (and `huggingface_hub`, which transformers depends on) and its
sibling pipeline_vaswani.py, whose pipeline every config names (`custom_pipelines`): the relative import is what makes
every `save_pretrained`, by any client, copy that file too (transformers copies a saved class's relative imports).

Every setting is declared once, as a field with its type, default, meaning and range (`setting(...)`, collected in
`MODEL_SETTINGS`), and checked however a value arrives; `Setting` is also how generation_vaswani.py declares the
decoding settings, and how vaswani_hf derives its recipe keys and command-line flags.

Field names follow the paper (Section 3 and Table 3); transformers' generic names (`hidden_size`,
`num_attention_heads`, `encoder_layers`, ...) are mapped onto them through `attribute_map`.
Where the paper is silent we follow tensor2tensor's first release (`transformer_base`, June 2017) and say so.
"""

import copy
import functools
import math
import typing
from dataclasses import dataclass, field, fields

from huggingface_hub.dataclasses import strict
from transformers.configuration_utils import PreTrainedConfig

from .pipeline_vaswani import pipeline_settings, register_pipeline_tasks

POSITION_ENCODINGS = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "concatenated")
UNIT = {"min": 0.0, "max": 1.0, "max_exclusive": True}  # a probability that must leave something: [0, 1)
MAX_WIDTH = 65536  # widths of the model (d_model, d_k, d_v): far above any real model, below an allocation failure
MAX_POSITIONS = 65536  # rows of a position table, and the longest output a decoding setting may ask for


class SettingError(ValueError):
    """A value that its setting's declaration refuses (`Setting`): one line naming the setting, the value and what
    it may be. Raised by `VaswaniConfig(...)` (and so by a config.json), by `generate()` and by a
    generation_config.json; a `ValueError`, so that callers without this package catch it as one."""

    exit_code = 2  # bad input, as the command line reports it


@dataclass(frozen=True)
class Bound:
    """A numeric constraint: `min <= value` (or `min < value` with `min_exclusive`), `value <= max` (or `<` with
    `max_exclusive`), and always finite (NaN and infinity are refused everywhere)."""

    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False

    def problem(self, value) -> str | None:
        """Why `value` breaks this bound (a phrase to follow "must ..."), or None."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None  # types are checked by the caller
        if isinstance(value, float) and not math.isfinite(value):
            return f"be a finite number ({self.describe()})"
        low = self.min is not None and (value <= self.min if self.min_exclusive else value < self.min)
        high = self.max is not None and (value >= self.max if self.max_exclusive else value > self.max)
        return f"be {self.describe()}" if low or high else None

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return f"in {'(' if self.min_exclusive else '['}{_number(self.min)}, {_number(self.max)}" \
                   f"{')' if self.max_exclusive else ']'}"
        if self.min is not None:
            return f"{'>' if self.min_exclusive else '>='} {_number(self.min)}"
        if self.max is not None:
            return f"{'<' if self.max_exclusive else '<='} {_number(self.max)}"
        return "finite"


def _number(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10**4 else f"{x:g}" if isinstance(x, float) else str(x)


def shown(value, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class Setting:
    """One setting, declared once beside what it configures: its name, type (int, float, bool or str; a float setting
    takes ints), default, meaning (`help`) and what values it may take (`bound`, or `choices`; `nullable`: None is
    allowed). `token_id`: a token id of the model's vocabulary, checked against its size (`many`: a list of ids is
    allowed too). `architecture`: the weights' meaning depends on it (a checkpoint resumes only with the same value).

    Every entry point checks a value with `check`: `VaswaniConfig(...)` (and so config.json), generation_config.json,
    `generate()`'s arguments; `vaswani_hf` derives its command-line flags and recipe keys from these declarations."""

    name: str
    type: type
    default: object
    help: str
    bound: Bound = Bound()
    choices: tuple = ()
    nullable: bool = False
    token_id: bool = False
    many: bool = False
    architecture: bool = False

    def describe(self) -> str:
        """What the setting may be, as a phrase: "an integer in [1, 1,024]", "one of 'gnmt', 'hf'"."""
        if self.choices:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.token_id:
            text = "a token id (an integer in [0, vocab_size))" + (" or a list of them" if self.many else "")
        else:
            limits = "" if self.bound == Bound() or self.type not in (int, float) else f" {self.bound.describe()}"
            text = _KIND_NAMES.get(self.type, self.type.__name__) + limits
        return text + (" or None" if self.nullable else "")

    def problem(self, value, vocab_size: int | None = None) -> str | None:
        """Why `value` breaks the declaration (a phrase to follow "must ..."), or None. `vocab_size` bounds a
        token id."""
        if value is None:
            return None if self.nullable else f"be {self.describe()}"
        if self.token_id:
            return self._token_id_problem(value, vocab_size)
        if not self.right_type(value):
            return f"be {self.describe()}"
        if self.choices:
            found = any(value is c or (type(value) is type(c) and value == c) for c in self.choices)
            return None if found else f"be {self.describe()}"
        return self.bound.problem(value)

    def right_type(self, value) -> bool:
        """Whether `value` has the declared type (a bool is no number; an int is a float)."""
        if self.choices:
            return any(type(value) is type(c) for c in self.choices)
        if self.token_id and self.many and isinstance(value, (list, tuple)):
            return all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if isinstance(value, bool):
            return self.type is bool
        return isinstance(value, (int, float) if self.type is float else self.type)

    def _token_id_problem(self, value, vocab_size: int | None) -> str | None:
        ids = list(value) if self.many and isinstance(value, (list, tuple)) and value else [value]
        for token in ids:
            if isinstance(token, bool) or not isinstance(token, int):
                return f"be {self.describe()}"
            if vocab_size is not None and not 0 <= token < vocab_size:
                return f"be a token id of the vocabulary, in [0, {vocab_size - 1}]"
            if token < 0:
                return "be a token id, an integer >= 0"
        return None

    def check(self, value, where: str, vocab_size: int | None = None):
        """`value`, or SettingError "{where}: {name} must ..., got {value}"."""
        problem = self.problem(value, vocab_size)
        if problem is not None:
            kind = "" if value is None or self.right_type(value) else f" ({type(value).__name__})"
            raise SettingError(f"{where}: {self.name} must {problem}, got {shown(value)}{kind}")
        return value


def setting(default, help: str, *, min=None, max=None, min_exclusive=False, max_exclusive=False,  # noqa: A002
            choices=(), architecture=False, token_id=False):
    """A `VaswaniConfig` field declared as a `Setting` (its name and type come from the field): the default, the
    meaning and the values it may take, kept in the field's metadata (`MODEL_SETTINGS` collects them)."""
    spec = dict(help=help, bound=Bound(min, max, min_exclusive, max_exclusive), choices=tuple(choices),
                architecture=architecture, token_id=token_id)
    return field(default=default, metadata={"setting": spec})


def declared_settings(cls) -> dict:
    """{name: Setting} of the fields of dataclass `cls` declared with `setting(...)`, in field order."""
    table = {}
    for f in fields(cls):
        spec = f.metadata.get("setting")
        if spec is None:
            continue
        kinds = typing.get_args(f.type) or (f.type,)
        concrete = [k for k in kinds if k is not type(None)]
        kind = float if float in concrete else typing.get_origin(concrete[0]) or concrete[0]
        many = any(typing.get_origin(k) is list for k in concrete)
        table[f.name] = Setting(f.name, kind, f.default, nullable=type(None) in kinds, many=many, **spec)
    return table


@strict
class VaswaniConfig(PreTrainedConfig):
    r"""
    Configuration of [`VaswaniModel`] / [`VaswaniForConditionalGeneration`]. The defaults are the paper's base model
    (Table 3, first row) with the ~37k shared BPE vocabulary of its EN-DE experiments (Section 5.1).

    Every setting is declared once, below, with its meaning and the values it may take (`setting(...)`, listed in
    `MODEL_SETTINGS` and appended to this docstring): a value that breaks its declaration is a `SettingError` naming
    it, however it arrives (keyword, config.json, an edited attribute before saving).

    Args:
        custom_pipelines: the pipelines `transformers.pipeline(..., trust_remote_code=True)` finds in config.json;
            `None`: this model's translation pipeline under "translation" (`pipeline_vaswani.custom_pipelines`).
        langs: the language pair `[source, target]` (e.g. `["en", "de"]`), as FSMT's config names it, or `None`: adds
            the task "translation_{source}_to_{target}"; the pipeline's `src_lang` / `tgt_lang` are checked against it.
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

    vocab_size: int = setting(37000, "size of the one vocabulary shared by source and target (Section 3.4)",
                              min=1, max=2**24, architecture=True)
    d_model: int = setting(512, "model width (paper: 512 base, 1024 big)", min=1, max=MAX_WIDTH, architecture=True)
    d_ff: int = setting(2048, "inner width of the position-wise feed-forward network, Eq. (2) (paper: 2048 / 4096)",
                        min=1, max=2**20, architecture=True)
    num_heads: int = setting(8, "attention heads h (paper: 8 / 16)", min=1, max=1024, architecture=True)
    d_k: int | None = setting(None, "per-head query/key width; None: d_model // num_heads (Section 3.2.2)", min=1,
                              max=MAX_WIDTH, architecture=True)
    d_v: int | None = setting(None, "per-head value width; None: d_model // num_heads (Table 3 (B) changes d_k "
                                    "alone)", min=1, max=MAX_WIDTH, architecture=True)
    num_encoder_layers: int = setting(6, "encoder layers N (paper: 6)", min=1, max=1000, architecture=True)
    num_decoder_layers: int = setting(6, "decoder layers N (paper: 6)", min=1, max=1000, architecture=True)
    dropout: float | int = setting(0.1, "residual dropout P_drop, on each sub-layer output and on the "
                                        "embedding+position sums (Section 5.4; 0.1 base, 0.3 big EN-DE)", **UNIT)
    attention_dropout: float | int = setting(0.0, "dropout on attention weights (not in the paper; t2t v1: 0)",
                                             **UNIT)
    relu_dropout: float | int = setting(0.0, "dropout after the ReLU of the feed-forward network (not in the paper; "
                                             "t2t v1: 0)", **UNIT)
    max_position_embeddings: int = setting(1024, "rows of the learned position table; sinusoids are computed for "
                                                 "this many positions and extended on demand (Section 3.5)", min=1,
                                           max=MAX_POSITIONS, architecture=True)
    position_encoding: str = setting("sinusoidal", "sinusoidal (Section 3.5) or learned (Table 3, row E)",
                                     choices=POSITION_ENCODINGS, architecture=True)
    sinusoid_layout: str = setting("interleaved", "interleaved: the paper's PE(pos, 2i) = sin, PE(pos, 2i+1) = cos; "
                                                  "concatenated: all sines, then all cosines (tensor2tensor, fairseq, "
                                                  "Marian)", choices=SINUSOID_LAYOUTS, architecture=True)
    attention_bias: bool = setting(False, "biases on the Q/K/V/output projections (the paper's Eq. (1) has none)",
                                   architecture=True)
    layer_norm_eps: float | int = setting(1e-6, "epsilon of LayerNorm (not in the paper; t2t v1: 1e-6)", min=0,
                                          min_exclusive=True, max=1, architecture=True)
    scale_embedding: bool = setting(True, "multiply embeddings by sqrt(d_model) (Section 3.4)", architecture=True)
    tie_word_embeddings: bool = setting(True, "one matrix for source embedding, target embedding and the "
                                              "pre-softmax projection (Section 3.4); false: three", architecture=True)
    init_std: float | int | None = setting(None, "standard deviation of the embedding initialisation; None: "
                                                 "d_model ** -0.5 as in t2t v1 (embeddings x sqrt(d_model) then have "
                                                 "unit variance)", min=0, min_exclusive=True, max=100)
    custom_pipelines: dict | None = None
    langs: list[str] | None = None
    # Token ids agree with `vaswani_hf.tokenization`: <pad>=0, <s>=1, </s>=2, <unk>=3.
    # The decoder starts from <pad>, whose embedding row is zero and never trained: this is tensor2tensor's
    # "shift right with a zero vector" start (and Marian's), which the paper does not specify.
    pad_token_id: int | None = setting(0, "padding token id", token_id=True, architecture=True)
    bos_token_id: int | None = setting(1, "<s> token id", token_id=True, architecture=True)
    eos_token_id: int | list[int] | None = setting(2, "</s> token id (or ids)", token_id=True, architecture=True)
    decoder_start_token_id: int | None = setting(0, "the decoder's first input: <pad>, a zero vector",
                                                 token_id=True, architecture=True)
    is_encoder_decoder: bool = True
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        self._check_settings()  # SettingError (a ValueError) here; `@strict` wraps errors raised by validate_* methods
        for name in ("d_k", "d_v"):
            if getattr(self, name) is None:
                if self.d_model % self.num_heads:
                    raise SettingError(f"VaswaniConfig: d_model={self.d_model} is not divisible by num_heads="
                                       f"{self.num_heads}, so {name} cannot default to d_model // num_heads; pass "
                                       f"{name} explicitly (Table 3, rows A/B).")
                setattr(self, name, self.d_model // self.num_heads)
        self.custom_pipelines, self.langs = pipeline_settings(self.custom_pipelines, self.langs)
        register_pipeline_tasks(self.langs)  # the pipeline's task names, with or without the package
        super().__post_init__(**kwargs)

    def validate_vaswani(self):
        """Run by `@strict` after `__init__` and before saving, so that edited attributes are checked again."""
        self._check_settings()

    def _check_settings(self):
        """Every declared setting against its declaration (`MODEL_SETTINGS`; token ids against vocab_size), then the
        rule between settings; SettingError naming the setting otherwise."""
        for declared in MODEL_SETTINGS.values():
            declared.check(getattr(self, declared.name), "VaswaniConfig", vocab_size=self.vocab_size)
        if self.position_encoding == "sinusoidal" and self.d_model % 2:
            raise SettingError(f"VaswaniConfig: sinusoidal positions need an even d_model, got {self.d_model}")

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
        """The paper's base model (Table 3, "base"): N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (eps_ls=0.1 is a
        training setting: `vaswani_hf.training.objective`). Every other Table 3 row is an override, e.g. `base(num_heads=16)` (A; d_k = d_v = d_model / h follow),
        `base(d_k=16)` (B), `base(num_encoder_layers=2, num_decoder_layers=2)` (C), `base(dropout=0.0)` (D),
        `base(position_encoding="learned")` (E).
        """
        return cls(**overrides)

    @classmethod
    def big(cls, **overrides) -> "VaswaniConfig":
        """The paper's big model (Table 3, "big"): d_model=1024, d_ff=4096, h=16, P_drop=0.3 (EN-DE; 0.1 for
        EN-FR, Section 6.1)."""
        return cls(**{"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, **overrides})


MODEL_SETTINGS = declared_settings(VaswaniConfig)  # {name: Setting}: the declarations above, in field order
if VaswaniConfig.__doc__:  # None under `python -OO`
    VaswaniConfig.__doc__ += "".join(f"\n        {s.name}: {s.help}; {s.describe()}, default {s.default!r}."
                                     for s in MODEL_SETTINGS.values()) + "\n"


def _checked_arguments(init):
    """`VaswaniConfig(...)` checks each declared setting it is given (by name or by an `attribute_map` alias)
    before `@strict`'s type validation sees it, whose error is a multi-line exception that is no ValueError."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for name, value in kwargs.items():
            declared = MODEL_SETTINGS.get(VaswaniConfig.attribute_map.get(name, name))
            if declared is not None:
                declared.check(value, "VaswaniConfig")
        init(self, *args, **kwargs)

    return __init__


VaswaniConfig.__init__ = _checked_arguments(VaswaniConfig.__init__)

__all__ = ["VaswaniConfig", "Setting", "SettingError", "Bound", "MODEL_SETTINGS", "MAX_POSITIONS"]
