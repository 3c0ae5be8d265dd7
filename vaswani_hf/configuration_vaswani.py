"""Configure the original Transformer ("Attention Is All You Need", Vaswani et al., 2017) and check its settings.

This file is copied next to the weights when a model is saved, and runs under `trust_remote_code=True` on machines
without `vaswani_hf`. It therefore imports only `transformers` and validation_vaswani.py, which checks a value.
pipeline_vaswani.py, whose pipeline every config names (`custom_pipelines`), is imported only where a pipeline loads
the config (`VaswaniConfig.from_pretrained`), so that building or loading a config changes nothing in transformers, as
with any of transformers' own configs. Because transformers copies the files a saved class's code imports relatively
(it reads the import lines, wherever they stand), both imports make every `save_pretrained`, by any client, copy the
two files too.

Every setting is a dataclass field whose metadata declares its meaning and the values it may take, in the form of
transformers' own `TrainingArguments` (`field(default=..., metadata={"help": ..., "min": ..., "choices": ...})`).
validation_vaswani.py's `check_setting` is the one check of a value against such a declaration. The config runs it on
every field when it is built and before it is saved, and vaswani_hf, which derives its recipe keys, command-line flags
and file fields from the same metadata (`vaswani_hf.settings`), calls it too.

Field names follow the paper (Section 3 and Table 3); transformers' generic names (`hidden_size`,
`num_attention_heads`, `encoder_layers`, ...) are mapped onto them through `attribute_map`.
Where the paper is silent we follow tensor2tensor's first release (`transformer_base`, June 2017) and say so.
"""

import copy
import difflib
import re
from dataclasses import field

from transformers.configuration_utils import PreTrainedConfig
from transformers.utils import logging

from .validation_vaswani import SettingError, check_setting, declared_fields, shown

logger = logging.get_logger(__name__)

POSITION_ENCODINGS = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "concatenated")
PROBABILITY = {"min": 0.0, "max": 1.0, "max_exclusive": True}  # A probability in [0, 1): 1 would leave nothing.
MAX_WIDTH = 65536  # The widest d_model, d_k or d_v: far above any real model, below an allocation failure.
MAX_POSITIONS = 65536  # The most rows of a position table, and the longest output a decoding setting may ask for.
TASK = "translation"  # config.json names this one task, so that `pipeline(model=folder)` infers it.
PIPELINE_IMPL = (
    "pipeline_vaswani.VaswaniTranslationPipeline"  # The "module.Class" form Pipeline.save_pretrained writes.
)
PAIR_TASK = re.compile(r"^translation_(.+)_to_(.+)$")


def pair_task(langs) -> str | None:
    """Return the task name "translation_{src}_to_{tgt}" for a config's `langs` ([src, tgt]), or None where the
    config knows no pair."""
    if not langs or len(langs) != 2 or not all(isinstance(lang, str) and lang for lang in langs):
        return None
    return f"translation_{langs[0]}_to_{langs[1]}"


def custom_pipelines() -> dict:
    """Return the `custom_pipelines` entry of config.json, in the form `Pipeline.save_pretrained` writes it, with the
    one task `TASK`. `pipeline(task, model=folder, trust_remote_code=True)` looks a task up there by its exact name,
    and `pipeline(model=folder, trust_remote_code=True)` takes the only one there is; the other names come from the
    registry (`pipeline_vaswani.register_pipeline_tasks`, which `from_pretrained` runs for a pipeline)."""
    return {TASK: {"impl": PIPELINE_IMPL, "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}}


def pipeline_settings(pipelines: dict | None, langs) -> tuple[dict, list | None]:
    """Return a config's `custom_pipelines` and `langs`, brought to today's form. Where `pipelines` is None, the config
    gets `custom_pipelines()`. A config.json written before `langs` existed named this pipeline under several task
    names, one of them the pair ("translation_xx_to_yy"): it gets this pipeline under `TASK` only, keeps the other
    pipelines it names, and has the pair moved to `langs`."""
    if pipelines is None:
        return custom_pipelines(), langs
    ours = [
        task
        for task, info in pipelines.items()
        if isinstance(info, dict) and str(info.get("impl", "")).endswith(".VaswaniTranslationPipeline")
    ]
    if not ours:
        return pipelines, langs
    for task in ours:
        match = PAIR_TASK.match(task)
        if match and not langs:
            langs = [match.group(1), match.group(2)]
    kept = {task: info for task, info in pipelines.items() if task not in ours}
    return {**custom_pipelines(), **kept}, langs


def completed_auto_map(auto_map: dict, is_encoder_decoder: bool) -> dict:
    """Return a copy of config.json's `auto_map` that names `VaswaniForCausalLM` under `AutoModelForCausalLM`
    beside the translation model it names under `AutoModelForSeq2SeqLM`, from the same modeling file (with the same
    `repo--` prefix, which transformers adds to a model loaded from the Hub). For a config of the decoder alone
    (`is_encoder_decoder=False`) it drops the encoder-decoder classes (`AutoModel`, `AutoModelForSeq2SeqLM`), whose
    encoder such a folder does not hold.

    transformers writes into config.json only the Auto class of the model that was saved, so a translation model's
    folder would name its seq2seq class alone. The decoder stack of that folder is also a language model (Marian's
    folders load as `MarianForCausalLM`), and with this entry `AutoModelForCausalLM.from_pretrained(folder,
    trust_remote_code=True)` loads it on a machine without this package. An entry already there is kept."""
    completed = dict(auto_map)
    seq2seq = auto_map.get("AutoModelForSeq2SeqLM")
    if isinstance(seq2seq, str) and seq2seq.endswith(".VaswaniForConditionalGeneration"):
        completed.setdefault("AutoModelForCausalLM", seq2seq.rsplit(".", 1)[0] + ".VaswaniForCausalLM")
    if not is_encoder_decoder:
        for name in ("AutoModel", "AutoModelForSeq2SeqLM"):
            completed.pop(name, None)
    return completed


class VaswaniConfig(PreTrainedConfig):
    r"""
    Hold the settings of [`VaswaniModel`], [`VaswaniForConditionalGeneration`] and the decoder alone,
    [`VaswaniForCausalLM`]. The defaults are the paper's base model (Table 3, first row) with the ~37k shared BPE
    vocabulary of its EN-DE experiments (Section 5.1).

    Every setting is a field below whose metadata gives its meaning and the values it may take. Metadata
    `architecture` marks a setting on which the weights' meaning depends, so a checkpoint resumes only with the same
    value; `recipe` marks one that a training recipe sets. `validate()` checks every setting (`check_setting`) and the
    rules between them, once when a config is built (by keyword, by a generic name of `attribute_map` or from
    config.json) and again before it is saved (transformers' `save_pretrained` calls it), so that an edited attribute
    is checked too. A value that breaks its declaration raises a `SettingError`, a `ValueError` that names the
    setting. The class does not use `@strict`, whose wrappers would turn that one line into a multi-line error that is
    no `ValueError`. A key that is no setting is kept, as transformers keeps it, because a config.json of a newer
    version or of another tool must load; a key that looks like a misspelt setting is logged as a warning.

    `custom_pipelines` lists the pipelines that `transformers.pipeline(task, model=folder, trust_remote_code=True)`
    finds in config.json (`custom_pipelines()` below). `langs` is the language pair `[source, target]`, as
    FSMT's config names it, and is checked against the pipeline's `src_lang` and `tgt_lang`.
    """

    model_type = "vaswani"
    # The cache's output name, from transformers 5.24 on and before it.
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

    vocab_size: int = field(
        default=37000,
        metadata={
            "help": "size of the one vocabulary shared by source and target (Section 3.4)",
            "min": 1,
            "max": 2**24,
            "architecture": True,
        },
    )
    d_model: int = field(
        default=512,
        metadata={
            "help": "model width (paper: 512 base, 1024 big)",
            "min": 1,
            "max": MAX_WIDTH,
            "architecture": True,
            "recipe": True,
        },
    )
    d_ff: int = field(
        default=2048,
        metadata={
            "help": "inner width of the position-wise feed-forward network, Eq. (2) (paper: 2048 / 4096)",
            "min": 1,
            "max": 2**20,
            "architecture": True,
            "recipe": True,
        },
    )
    num_heads: int = field(
        default=8,
        metadata={
            "help": "attention heads h (paper: 8 / 16)",
            "min": 1,
            "max": 1024,
            "architecture": True,
            "recipe": True,
        },
    )
    d_k: int | None = field(
        default=None,
        metadata={
            "help": "per-head query/key width; None: d_model // num_heads (Section 3.2.2)",
            "min": 1,
            "max": MAX_WIDTH,
            "architecture": True,
            "recipe": True,
        },
    )
    d_v: int | None = field(
        default=None,
        metadata={
            "help": "per-head value width; None: d_model // num_heads (Table 3 (B) changes d_k alone)",
            "min": 1,
            "max": MAX_WIDTH,
            "architecture": True,
            "recipe": True,
        },
    )
    num_encoder_layers: int = field(
        default=6,
        metadata={"help": "encoder layers N (paper: 6)", "min": 1, "max": 1000, "architecture": True, "recipe": True},
    )
    num_decoder_layers: int = field(
        default=6,
        metadata={"help": "decoder layers N (paper: 6)", "min": 1, "max": 1000, "architecture": True, "recipe": True},
    )
    dropout: float | int = field(
        default=0.1,
        metadata={
            "help": "residual dropout P_drop, on each sub-layer output and on the "
            "embedding+position sums (Section 5.4; 0.1 base, 0.3 big EN-DE)",
            "recipe": True,
            **PROBABILITY,
        },
    )
    attention_dropout: float | int = field(
        default=0.0,
        metadata={"help": "dropout on attention weights (not in the paper; t2t v1: 0)", "recipe": True, **PROBABILITY},
    )
    relu_dropout: float | int = field(
        default=0.0,
        metadata={
            "help": "dropout after the ReLU of the feed-forward network (not in the paper; t2t v1: 0)",
            "recipe": True,
            **PROBABILITY,
        },
    )
    max_position_embeddings: int = field(
        default=1024,
        metadata={
            "help": "rows of the learned position table; sinusoids are computed for "
            "this many positions and extended on demand (Section 3.5)",
            "min": 1,
            "max": MAX_POSITIONS,
            "architecture": True,
        },
    )
    position_encoding: str = field(
        default="sinusoidal",
        metadata={
            "help": "sinusoidal (Section 3.5) or learned (Table 3, row E)",
            "choices": POSITION_ENCODINGS,
            "architecture": True,
            "recipe": True,
        },
    )
    sinusoid_layout: str = field(
        default="interleaved",
        metadata={
            "help": "interleaved: the paper's PE(pos, 2i) = sin, PE(pos, 2i+1) = cos; "
            "concatenated: all sines, then all cosines (tensor2tensor, fairseq, "
            "Marian)",
            "choices": SINUSOID_LAYOUTS,
            "architecture": True,
            "recipe": True,
        },
    )
    attention_bias: bool = field(
        default=False,
        metadata={
            "help": "biases on the Q/K/V/output projections (the paper's Eq. (1) has none)",
            "architecture": True,
        },
    )
    layer_norm_eps: float | int = field(
        default=1e-6,
        metadata={
            "help": "epsilon of LayerNorm (not in the paper; t2t v1: 1e-6)",
            "min": 0,
            "min_exclusive": True,
            "max": 1,
            "architecture": True,
        },
    )
    scale_embedding: bool = field(
        default=True, metadata={"help": "multiply embeddings by sqrt(d_model) (Section 3.4)", "architecture": True}
    )
    tie_word_embeddings: bool = field(
        default=True,
        metadata={
            "help": "one matrix for source embedding, target embedding and the pre-softmax projection "
            "(Section 3.4); false: three",
            "architecture": True,
            "recipe": True,
        },
    )
    init_std: float | int | None = field(
        default=None,
        metadata={
            "help": "standard deviation of the embedding initialisation; None: "
            "d_model ** -0.5 as in t2t v1 (embeddings x sqrt(d_model) then have "
            "unit variance)",
            "min": 0,
            "min_exclusive": True,
            "max": 100,
        },
    )
    custom_pipelines: dict | None = field(
        default=None,
        metadata={
            "help": "the pipelines transformers.pipeline finds; None: this model's "
            'translation pipeline under "translation" alone'
        },
    )
    langs: list[str] | None = field(
        default=None,
        metadata={
            "help": 'the language pair [source, target] (e.g. ["en", "de"]); it adds '
            "the task name translation_{source}_to_{target}"
        },
    )
    # Token ids agree with `vaswani_hf.tokenization`: <pad>=0, <s>=1, </s>=2, <unk>=3.
    # The decoder starts from <pad>, whose embedding row is zero and never trained: this is tensor2tensor's
    # "shift right with a zero vector" start (and Marian's), which the paper does not specify.
    pad_token_id: int | None = field(
        default=0, metadata={"help": "padding token id", "token_id": True, "architecture": True}
    )
    bos_token_id: int | None = field(
        default=1, metadata={"help": "<s> token id", "token_id": True, "architecture": True}
    )
    eos_token_id: int | list[int] | None = field(
        default=2, metadata={"help": "</s> token id (or ids)", "token_id": True, "architecture": True}
    )
    decoder_start_token_id: int | None = field(
        default=0,
        metadata={"help": "the decoder's first input: <pad>, a zero vector", "token_id": True, "architecture": True},
    )
    is_encoder_decoder: bool = field(
        default=True,
        metadata={
            "help": "an encoder and a decoder (the paper's model); false: the decoder stack alone "
            "(VaswaniForCausalLM sets it)"
        },
    )
    # The two settings transformers' decoders read (Marian's config declares `is_decoder`, BERT's reads both), set by
    # VaswaniForCausalLM and by EncoderDecoderModel on the config of the decoder it composes. Neither is marked
    # `architecture`: a translation model has encoder-decoder attention whatever they say, so its checkpoints stay
    # comparable with those saved before these settings existed (checkpoint averaging compares architecture fields).
    is_decoder: bool = field(
        default=False,
        metadata={"help": "the decoder stack alone, as a language model (VaswaniForCausalLM sets it)"},
    )
    add_cross_attention: bool = field(
        default=False,
        metadata={
            "help": "give the decoder alone its encoder-decoder attention (Section 3.2.3), to attend to another "
            "model's encoder (EncoderDecoderModel sets it); a seq2seq model always has it"
        },
    )
    use_cache: bool = field(
        default=True, metadata={"help": "reuse the keys and values of earlier steps when decoding"}
    )

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Load a config as transformers does; where a pipeline loads it (`transformers.pipeline` passes
        `_from_pipeline`), first register the pipeline's task names (`pipeline_vaswani.register_pipeline_tasks`).

        transformers 5 refuses the names "text2text-generation" and "translation_xx_to_yy" before it builds any
        pipeline, so they must be known before `pipeline()` resolves the task, and loading the config is the one step
        of `pipeline(task, model=folder, trust_remote_code=True)` that comes before. Loading a config for anything
        else leaves transformers as it is."""
        if "_from_pipeline" in kwargs:
            from .pipeline_vaswani import register_pipeline_tasks

            register_pipeline_tasks()
        return super().from_pretrained(*args, **kwargs)

    def __post_init__(self, **kwargs):
        settings = [f.name for f in declared_fields(type(self))]
        for key in kwargs.keys() - self.attribute_map.keys():  # Unknown keys are kept, as transformers keeps them.
            if near := difflib.get_close_matches(key, settings, n=1, cutoff=0.85):
                logger.warning(f"VaswaniConfig: {key!r} is no setting (kept as given); did you mean {near[0]}?")
        self._check_other_names(kwargs)
        super().__post_init__(**kwargs)  # transformers' part sets generic names (attribute_map) onto settings.
        self.validate()
        self.d_k, self.d_v = (self.d_model // self.num_heads if d is None else d for d in (self.d_k, self.d_v))
        self.custom_pipelines, self.langs = pipeline_settings(self.custom_pipelines, self.langs)

    def _check_other_names(self, kwargs: dict) -> None:
        """Refuse a setting given twice with two values, once by its name and once by a generic name of
        `attribute_map` (d_model=64 with hidden_size=128), or by two generic names. transformers would silently keep
        the generic one; a setting given as 512, its default, cannot be told from one not given, and is not
        refused."""
        defaults = {f.name: f.default for f in declared_fields(type(self))}
        given = {alias: kwargs[alias] for alias in kwargs.keys() & self.attribute_map.keys()}
        for alias, value in sorted(given.items()):
            name = self.attribute_map[alias]
            current = getattr(self, name)
            twice = [(other, given[other]) for other in given if self.attribute_map[other] == name]
            if current != defaults.get(name) and current != value:
                twice.append((name, current))
            if len({repr(v) for _, v in twice}) > 1:
                shown_twice = " and ".join(f"{n}={v!r}" for n, v in sorted(twice))
                raise SettingError(f"VaswaniConfig: {shown_twice} name the same setting, {name}; give it once")

    def validate(self):
        """Check every declared setting against its declaration (`check_setting`, token ids against vocab_size), then
        the rules between settings, then transformers' own checks; raise a SettingError naming the setting that
        fails."""
        for declared in declared_fields(type(self)):
            value = getattr(self, declared.name)
            check_setting(declared.name, declared.type, declared.metadata, value, "VaswaniConfig", self.vocab_size)
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
        """Return the config that transformers reads text settings from; for the decoder alone, a copy whose layer
        count is the decoder's. transformers sizes decoder caches from the `num_hidden_layers` of
        `get_text_config(decoder=True)`, which the attribute map points at the encoder's layer count."""
        if decoder and not encoder and self.num_decoder_layers != self.num_encoder_layers:
            decoder_view = copy.deepcopy(self)
            decoder_view.num_encoder_layers = self.num_decoder_layers
            return decoder_view
        return super().get_text_config(decoder=decoder, encoder=encoder)

    def to_dict(self) -> dict:
        """Return transformers' dictionary of this config (what config.json holds), its `auto_map` completed by
        `completed_auto_map`."""
        output = super().to_dict()
        if output.get("auto_map"):
            output["auto_map"] = completed_auto_map(output["auto_map"], self.is_encoder_decoder)
        return output

    @classmethod
    def base(cls, **overrides) -> "VaswaniConfig":
        """Return the paper's base model (Table 3, "base"): N=6, d_model=512, d_ff=2048, h=8 and P_drop=0.1, with
        `overrides` applied. (Its eps_ls=0.1 is a training setting, in `vaswani_hf.training.objective`.)

        Every other row of Table 3 is an override, for example `base(num_heads=16)` for row A (d_k = d_v = d_model / h
        follow), `base(d_k=16)` for B, `base(num_encoder_layers=2, num_decoder_layers=2)` for C, `base(dropout=0.0)`
        for D and `base(position_encoding="learned")` for E.
        """
        return cls(**overrides)

    @classmethod
    def big(cls, **overrides) -> "VaswaniConfig":
        """Return the paper's big model (Table 3, "big"): d_model=1024, d_ff=4096, h=16 and P_drop=0.3, with
        `overrides` applied. P_drop=0.3 is the EN-DE value; EN-FR used 0.1 (Section 6.1)."""
        return cls(**{"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, **overrides})


__all__ = ["VaswaniConfig", "SettingError", "MAX_POSITIONS", "PROBABILITY", "shown"]
