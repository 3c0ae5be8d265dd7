"""Configuration of the original Transformer ("Attention Is All You Need", Vaswani et al., 2017).

This file is copied next to the weights when a model is saved, and is run by `trust_remote_code=True` on machines
without `vaswani_hf`: it imports only `transformers` and its sibling pipeline_vaswani.py, whose pipeline every config
names (`custom_pipelines`): the relative import is what makes every `save_pretrained`, by any client, copy that file
too (transformers copies a saved class's relative imports).

`Setting` is the one form of a rule about a value: its type, range, default and meaning. The model's settings are
`VaswaniConfig`'s fields (`setting(...)`, collected in `MODEL_SETTINGS`), the decoding settings are declared with it
in generation_vaswani.py, and vaswani_hf derives from it its recipe keys, command-line flags, file fields and
environment variables.

Field names follow the paper (Section 3 and Table 3); transformers' generic names (`hidden_size`,
`num_attention_heads`, `encoder_layers`, ...) are mapped onto them through `attribute_map`.
Where the paper is silent we follow tensor2tensor's first release (`transformer_base`, June 2017) and say so.
"""

import copy
import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field

from transformers.configuration_utils import PreTrainedConfig

from .pipeline_vaswani import pipeline_settings, register_pipeline_tasks

POSITION_ENCODINGS = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "concatenated")
PROBABILITY = {"min": 0.0, "max": 1.0, "max_exclusive": True}  # a probability that must leave something: [0, 1)
MAX_WIDTH = 65536  # widths of the model (d_model, d_k, d_v): far above any real model, below an allocation failure
MAX_POSITIONS = 65536  # rows of a position table, and the longest output a decoding setting may ask for


class SettingError(ValueError):
    """A value that its setting's declaration refuses (`Setting`): one line naming the setting, the value and what
    it may be (`phrase`: the part after the setting's name, "must be ..., got ..."). A `ValueError`, so that callers
    without this package catch it as one."""

    exit_code = 2  # bad input, as the command line reports it

    def __init__(self, message: str, phrase: str | None = None):
        super().__init__(message)
        self.phrase = phrase or message


def shown(value, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def _number(x) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10**4 else f"{x:g}" if isinstance(x, float) else str(x)


_KIND_NAMES = {
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    str: "a string",
    list: "a list",
    dict: "an object",
}
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


@dataclass(frozen=True)
class Setting:
    """One setting, declared once: its name, type (int, float, bool, str, list (of strings) or dict; a float
    setting takes ints), default, meaning (`help`) and the values it may take: `min` <= value <= `max` (`<` with
    `min_exclusive` / `max_exclusive`; numbers are always finite unless `finite` is False), or one of `choices`;
    `words`: text values it takes besides ("auto"); `nullable`: None is allowed. `token_id`: a token id of the
    model's vocabulary, checked against its size (`many`: a list of ids is allowed too). `architecture`: the
    weights' meaning depends on it (a checkpoint resumes only with the same value). `recipe`: a training recipe
    sets it (a recipe key of the same name).

    `check` refuses a value however it arrives (`VaswaniConfig(...)`, config.json, generation_config.json,
    `generate()`, a recipe, a file field); `parse` reads one from text (a command-line flag, an environment
    variable); `narrowed` is the same setting with fewer values (what a tool or the Space offers of it)."""

    name: str
    type: type
    default: object = None
    help: str = ""
    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False
    choices: tuple = ()
    words: tuple = ()
    nullable: bool = False
    token_id: bool = False
    many: bool = False
    finite: bool = True
    architecture: bool = False
    recipe: bool = False

    def limits(self) -> str:
        """The range as a phrase ("in [1, 1,024]", "> 0", "<= 10"), or "" where there is none."""
        low, high = self.min, self.max
        if low is not None and high is not None:
            return (
                f"in {'(' if self.min_exclusive else '['}{_number(low)}, {_number(high)}"
                f"{')' if self.max_exclusive else ']'}"
            )
        if low is not None:
            return f"{'>' if self.min_exclusive else '>='} {_number(low)}"
        return f"{'<' if self.max_exclusive else '<='} {_number(high)}" if high is not None else ""

    def describe(self) -> str:
        """What the setting may be, as a phrase: "an integer in [1, 1,024]", "one of 'gnmt', 'hf'"."""
        if self.choices:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.token_id:
            text = "a token id (an integer in [0, vocab_size))" + (" or a list of them" if self.many else "")
        else:
            limits = self.limits() if self.type in (int, float) else ""
            text = _KIND_NAMES.get(self.type, self.type.__name__) + (f" {limits}" if limits else "")
            text += " of strings" if self.type is list else ""
        text += "".join(f" or {w!r}" for w in self.words)
        return text + (" or None" if self.nullable else "")

    def right_type(self, value) -> bool:
        """Whether `value` has the declared type (a bool is no number; an int is a float)."""
        if self.choices:
            return any(type(value) is type(c) for c in self.choices)
        if self.type is list or (self.many and isinstance(value, (list, tuple))):
            item = int if self.token_id else str
            return isinstance(value, (list, tuple)) and all(
                isinstance(v, item) and not isinstance(v, bool) for v in value
            )
        if isinstance(value, bool):
            return self.type is bool
        return isinstance(value, (int, float) if self.type is float else self.type)

    def problem(self, value, vocab_size: int | None = None) -> str | None:
        """Why `value` breaks the declaration (a phrase to follow "must ..."), or None. `vocab_size` bounds a
        token id."""
        if value is None:
            return None if self.nullable else f"be {self.describe()}"
        if isinstance(value, str) and value in self.words:
            return None
        if self.token_id:
            return self._token_id_problem(value, vocab_size)
        if not self.right_type(value):
            return f"be {self.describe()}"
        if self.choices:
            found = any(value is c or (type(value) is type(c) and value == c) for c in self.choices)
            return None if found else f"be {self.describe()}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return None if not self.finite else "be a finite number" + (f" {self.limits()}" if self.limits() else "")
        low = self.min is not None and (value <= self.min if self.min_exclusive else value < self.min)
        high = self.max is not None and (value >= self.max if self.max_exclusive else value > self.max)
        return f"be {self.limits()}" if low or high else None

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
        if problem is None:
            return value
        kind = "" if value is None or self.right_type(value) else f" ({type(value).__name__})"
        phrase = f"must {problem}, got {shown(value)}{kind}"
        raise SettingError(f"{where}: {self.name} {phrase}", phrase)

    def parse(self, text: str, where: str, none: tuple = ()):
        """The value that `text` (a command-line flag's, an environment variable's) spells, checked: a word of
        `none` ("none", "null") gives None, a word of `words` itself, "true"/"false" (yes/no, 1/0, on/off) a
        boolean, digits a number (an integer setting refuses "1.5" and "1e3" as numbers); SettingError otherwise."""
        word = text.strip()
        value = text
        if word.lower() in none:
            value = None
        elif text in self.words or self.type is str or self.choices:
            value = text
        elif self.type is bool and word.lower() in _TRUE + _FALSE:
            value = word.lower() in _TRUE
        elif self.type in (int, float):
            for read in (int, float) if self.type is int else (float,):
                try:
                    value = read(word)
                    break
                except ValueError:
                    continue
        problem = self.problem(value)
        if problem is None:
            return value
        problem = problem.replace(" or None", f" or {none[0]!r}") if none else problem
        phrase = f"must {problem}, got {shown(text) if isinstance(value, str) else shown(value)}"
        raise SettingError(f"{where}: {self.name} {phrase}", phrase)

    def narrowed(self, **limits) -> "Setting":
        """This setting with fewer allowed values (`min`, `max`, `choices`, a `default` among them, `nullable` False;
        `help`): what a tool or the Space offers of it, e.g. `GENERATION_SETTINGS["num_beams"].narrowed(max=12)`.
        A value the narrower setting allows, this one allows: ValueError for limits beyond this setting's."""
        narrow = dataclasses.replace(self, **limits)
        unbounded = any(
            new is None and old is not None for new, old in ((narrow.min, self.min), (narrow.max, self.max))
        )
        wider = any(
            v is not None and self.problem(v) for v in (narrow.min, narrow.max, *narrow.choices, narrow.default)
        )
        if (
            set(limits) - {"min", "max", "choices", "default", "help", "nullable"}
            or unbounded
            or wider
            or narrow.nullable > self.nullable
        ):
            raise ValueError(f"{self.name}: {limits} does not narrow {self.describe()}")
        return narrow


def setting(default, help: str, **declaration):  # noqa: A002
    """A dataclass field declared as a `Setting` (its name and type come from the field; `declaration`: the other
    fields of `Setting`), kept in the field's metadata (`declared_settings` collects them)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"setting": dict(help=help, **declaration)})
    return field(default=default, metadata={"setting": dict(help=help, **declaration)})


def declared_settings(cls) -> dict:
    """{name: Setting} of the fields of dataclass `cls` declared with `setting(...)` (or holding a `Setting`), in
    field order."""
    table = {}
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("setting")
        if spec is None or isinstance(spec, Setting):  # a Setting: declared elsewhere (a recipe's model keys)
            table.update({f.name: spec} if spec else {})
            continue
        kinds = typing.get_args(f.type) if typing.get_origin(f.type) in (typing.Union, types.UnionType) else (f.type,)
        concrete = [k for k in kinds if k is not type(None)]
        kind = float if float in concrete else typing.get_origin(concrete[0]) or concrete[0]
        many = any(typing.get_origin(k) is list for k in concrete)
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        table[f.name] = Setting(f.name, kind, default, nullable=type(None) in kinds, many=many, **spec)
    return table


class VaswaniConfig(PreTrainedConfig):
    r"""
    Configuration of [`VaswaniModel`] / [`VaswaniForConditionalGeneration`]. The defaults are the paper's base model
    (Table 3, first row) with the ~37k shared BPE vocabulary of its EN-DE experiments (Section 5.1).

    Every setting is a field below, declared with its meaning and the values it may take (`setting(...)`;
    `MODEL_SETTINGS` lists them as `Setting`s). `validate()` checks them all, and the rules between them, once when
    a config is built (by keyword, by a generic name of `attribute_map`, from config.json) and again before it is
    saved (transformers' `save_pretrained` calls it), so that an edited attribute is checked too: a value that
    breaks its declaration is a `SettingError` (a `ValueError`) naming it. (Not `@strict`, whose wrappers would
    turn that one line into a multi-line error that is no `ValueError`.)

    `custom_pipelines`: the pipelines `transformers.pipeline(task, model=folder, trust_remote_code=True)` finds in
    config.json (`pipeline_vaswani.custom_pipelines`); `langs`: the language pair `[source, target]`, as FSMT's
    config names it, checked against the pipeline's `src_lang` / `tgt_lang`.
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

    vocab_size: int = setting(
        37000,
        "size of the one vocabulary shared by source and target (Section 3.4)",
        min=1,
        max=2**24,
        architecture=True,
    )
    d_model: int = setting(
        512, "model width (paper: 512 base, 1024 big)", min=1, max=MAX_WIDTH, architecture=True, recipe=True
    )
    d_ff: int = setting(
        2048,
        "inner width of the position-wise feed-forward network, Eq. (2) (paper: 2048 / 4096)",
        min=1,
        max=2**20,
        architecture=True,
        recipe=True,
    )
    num_heads: int = setting(8, "attention heads h (paper: 8 / 16)", min=1, max=1024, architecture=True, recipe=True)
    d_k: int | None = setting(
        None,
        "per-head query/key width; None: d_model // num_heads (Section 3.2.2)",
        min=1,
        max=MAX_WIDTH,
        architecture=True,
    )
    d_v: int | None = setting(
        None,
        "per-head value width; None: d_model // num_heads (Table 3 (B) changes d_k alone)",
        min=1,
        max=MAX_WIDTH,
        architecture=True,
    )
    num_encoder_layers: int = setting(
        6, "encoder layers N (paper: 6)", min=1, max=1000, architecture=True, recipe=True
    )
    num_decoder_layers: int = setting(
        6, "decoder layers N (paper: 6)", min=1, max=1000, architecture=True, recipe=True
    )
    dropout: float | int = setting(
        0.1,
        "residual dropout P_drop, on each sub-layer output and on the "
        "embedding+position sums (Section 5.4; 0.1 base, 0.3 big EN-DE)",
        recipe=True,
        **PROBABILITY,
    )
    attention_dropout: float | int = setting(
        0.0, "dropout on attention weights (not in the paper; t2t v1: 0)", recipe=True, **PROBABILITY
    )
    relu_dropout: float | int = setting(
        0.0,
        "dropout after the ReLU of the feed-forward network (not in the paper; t2t v1: 0)",
        recipe=True,
        **PROBABILITY,
    )
    max_position_embeddings: int = setting(
        1024,
        "rows of the learned position table; sinusoids are computed for "
        "this many positions and extended on demand (Section 3.5)",
        min=1,
        max=MAX_POSITIONS,
        architecture=True,
    )
    position_encoding: str = setting(
        "sinusoidal",
        "sinusoidal (Section 3.5) or learned (Table 3, row E)",
        choices=POSITION_ENCODINGS,
        architecture=True,
        recipe=True,
    )
    sinusoid_layout: str = setting(
        "interleaved",
        "interleaved: the paper's PE(pos, 2i) = sin, PE(pos, 2i+1) = cos; "
        "concatenated: all sines, then all cosines (tensor2tensor, fairseq, "
        "Marian)",
        choices=SINUSOID_LAYOUTS,
        architecture=True,
        recipe=True,
    )
    attention_bias: bool = setting(
        False, "biases on the Q/K/V/output projections (the paper's Eq. (1) has none)", architecture=True
    )
    layer_norm_eps: float | int = setting(
        1e-6,
        "epsilon of LayerNorm (not in the paper; t2t v1: 1e-6)",
        min=0,
        min_exclusive=True,
        max=1,
        architecture=True,
    )
    scale_embedding: bool = setting(True, "multiply embeddings by sqrt(d_model) (Section 3.4)", architecture=True)
    tie_word_embeddings: bool = setting(
        True,
        "one matrix for source embedding, target embedding and the pre-softmax projection (Section 3.4); false: three",
        architecture=True,
        recipe=True,
    )
    init_std: float | int | None = setting(
        None,
        "standard deviation of the embedding initialisation; None: "
        "d_model ** -0.5 as in t2t v1 (embeddings x sqrt(d_model) then have "
        "unit variance)",
        min=0,
        min_exclusive=True,
        max=100,
    )
    custom_pipelines: dict | None = setting(
        None,
        "the pipelines transformers.pipeline finds; None: this model's "
        'translation pipeline under "translation" alone',
    )
    langs: list[str] | None = setting(
        None,
        'the language pair [source, target] (e.g. ["en", "de"]); it adds '
        "the task name translation_{source}_to_{target}",
    )
    # Token ids agree with `vaswani_hf.tokenization`: <pad>=0, <s>=1, </s>=2, <unk>=3.
    # The decoder starts from <pad>, whose embedding row is zero and never trained: this is tensor2tensor's
    # "shift right with a zero vector" start (and Marian's), which the paper does not specify.
    pad_token_id: int | None = setting(0, "padding token id", token_id=True, architecture=True)
    bos_token_id: int | None = setting(1, "<s> token id", token_id=True, architecture=True)
    eos_token_id: int | list[int] | None = setting(2, "</s> token id (or ids)", token_id=True, architecture=True)
    decoder_start_token_id: int | None = setting(
        0, "the decoder's first input: <pad>, a zero vector", token_id=True, architecture=True
    )
    is_encoder_decoder: bool = setting(True, "an encoder and a decoder (always)", choices=(True,))
    use_cache: bool = setting(True, "reuse the keys and values of earlier steps when decoding")

    def __post_init__(self, **kwargs):
        for key in kwargs.keys() - self.attribute_map.keys():  # transformers keeps unknown keys; not a near miss
            if near := difflib.get_close_matches(key, MODEL_SETTINGS, n=1, cutoff=0.85):
                raise SettingError(f"VaswaniConfig: unknown setting {key!r}; did you mean {near[0]}?")
        super().__post_init__(**kwargs)  # transformers' part; it sets generic names (attribute_map) onto settings
        self.validate()
        self.d_k, self.d_v = (self.d_model // self.num_heads if d is None else d for d in (self.d_k, self.d_v))
        self.custom_pipelines, self.langs = pipeline_settings(self.custom_pipelines, self.langs)
        register_pipeline_tasks(self.langs)  # the pipeline's task names, with or without the package

    def validate(self):
        """Every declared setting against its declaration (`MODEL_SETTINGS`; token ids against vocab_size), the
        rules between settings, then transformers' own checks; SettingError naming the setting otherwise."""
        for declared in MODEL_SETTINGS.values():
            declared.check(getattr(self, declared.name), "VaswaniConfig", vocab_size=self.vocab_size)
        if self.position_encoding == "sinusoidal" and self.d_model % 2:
            raise SettingError(f"VaswaniConfig: sinusoidal positions need an even d_model, got {self.d_model}")
        for name in ("d_k", "d_v"):
            if getattr(self, name) is None and self.d_model % self.num_heads:
                raise SettingError(
                    f"VaswaniConfig: d_model={self.d_model} is not divisible by num_heads={self.num_heads}, so "
                    f"{name} cannot default to d_model // num_heads; pass {name} explicitly (Table 3, rows A/B)."
                )
        super().validate()

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
        training setting: `vaswani_hf.training.objective`). Every other Table 3 row is an override, e.g.
        `base(num_heads=16)` (A; d_k = d_v = d_model / h follow), `base(d_k=16)` (B),
        `base(num_encoder_layers=2, num_decoder_layers=2)` (C), `base(dropout=0.0)` (D),
        `base(position_encoding="learned")` (E).
        """
        return cls(**overrides)

    @classmethod
    def big(cls, **overrides) -> "VaswaniConfig":
        """The paper's big model (Table 3, "big"): d_model=1024, d_ff=4096, h=16, P_drop=0.3 (EN-DE; 0.1 for
        EN-FR, Section 6.1)."""
        return cls(**{"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, **overrides})


MODEL_SETTINGS = declared_settings(VaswaniConfig)  # {name: Setting}: the declarations above, in field order

__all__ = [
    "VaswaniConfig",
    "Setting",
    "SettingError",
    "MODEL_SETTINGS",
    "MAX_POSITIONS",
    "PROBABILITY",
    "setting",
    "declared_settings",
    "shown",
]
