"""Declare every key of a training recipe once, as a dataclass field with its default, meaning and range.

The keys are grouped in sections (the groups of `vaswani-train --help` and `--list-keys`) and declared as transformers'
`TrainingArguments` declares its own, `field(default=0.1, metadata={"help": "...", "min": 0, "max": 1})`;
validation_vaswani.py lists the metadata's keys. The model's keys are `VaswaniConfig`'s settings declared with
`recipe: True`, and the tokenizer's are the BPE's own (`vaswani_hf.tokenization.BpeSettings`): the same declarations,
with no second copy. `vaswani_hf.training.recipe` builds a recipe from them. Where the paper is silent, defaults
follow tensor2tensor's first release (t2t v1) and say so.
"""

import dataclasses
from dataclasses import dataclass, field

from ..configuration_vaswani import MAX_POSITIONS, PROBABILITY
from ..metrics import SACREBLEU_TOKENIZERS
from ..precision import BF16_AUTO
from ..settings import GENERATION_SETTINGS, MAX_SEED, MAX_SENTENCES, MAX_TOKENS, MODEL_SETTINGS, settings_of
from ..tokenization import BPE_SETTINGS as _BPE
from .objective import PAPER_LABEL_SMOOTHING

BIG = 10**12  # The ceiling of counts that only cost time, such as steps and samples.


@dataclass
class RunKeys:
    _argument_group_name = "run"
    description: str | None = field(default=None, metadata={"help": "free text describing the recipe"})
    output_dir: str = field(
        default="outputs/run", metadata={"help": "checkpoints, logs, metrics, plots and the exported model go here"}
    )
    seed: int = field(
        default=42, metadata={"help": "seed of model init, dropout and batch order", "min": 0, "max": MAX_SEED}
    )
    torch_threads: int = field(
        default=0,
        metadata={"help": "torch.set_num_threads per process (0: leave torch's default)", "min": 0, "max": 1024},
    )
    resume: bool = field(default=False, metadata={"help": "continue from the latest checkpoint in output_dir"})
    logging_steps: int = field(
        default=50, metadata={"help": "log loss and learning rate every N updates", "min": 1, "max": BIG}
    )
    report_to: str = field(
        default="none",
        metadata={
            "help": "Trainer integrations, comma-separated: none, all, tensorboard, ... (each must be installed)"
        },
    )
    disable_tqdm: bool = field(default=False, metadata={"help": "hide progress bars"})
    use_cpu: bool = field(
        default=False, metadata={"help": "train on CPU even if a GPU is present (multi-process CPU DDP over gloo)"}
    )
    bf16: bool | str = field(
        default=False,
        metadata={
            "help": "bf16 mixed precision (Accelerate; CPU autocast where there is no GPU); auto: on a CUDA GPU with "
            "bf16, or a CPU with bf16 matrix units (AMX, AVX-512 BF16) when the model is large enough to gain "
            "(vaswani_hf.precision), else fp32",
            "words": (BF16_AUTO,),
        },
    )
    fp16: bool = field(default=False, metadata={"help": "fp16 mixed precision (Accelerate; needs a CUDA GPU)"})
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "compile the training step with torch.compile (transformers' own TrainingArguments.torch_compile)"
        },
    )
    dataloader_num_workers: int = field(
        default=0,
        metadata={
            "help": "DataLoader worker processes (> 0: collation runs in the workers, so "
            "the tokens/s and padding statistics are not counted; -1: auto, 2 per "
            "process on CUDA, 0 on the CPU)",
            "min": -1,
            "max": 256,
        },
    )
    dataloader_pin_memory: bool | None = field(
        default=None,
        metadata={
            "help": "pinned host memory and non-blocking copies to the device "
            "(null: on for CUDA, off otherwise; "
            "vaswani_hf.training.data_path)"
        },
    )
    dataloader_prefetch_factor: int | None = field(
        default=None,
        metadata={
            "help": "batches each DataLoader worker loads ahead (null: 4 on CUDA, torch's 2 otherwise; only with workers)",
            "min": 1,
            "max": 1024,
        },
    )
    translate_examples: list[str] = field(
        default_factory=list, metadata={"help": "sentences translated and printed at the end"}
    )
    export_dir: str | None = field(default=None, metadata={"help": "Hub-ready folder (default: OUTPUT_DIR/hub)"})
    debug_log_batches: bool = field(
        default=False, metadata={"help": "write a hash of every training example seen, per process (tests)"}
    )


@dataclass
class DataKeys:
    _argument_group_name = "data (Section 5.1; relative paths: current folder, then the repository)"
    data_format: str = field(
        default="sample",
        metadata={
            "help": "where the corpus comes from: sample (bundled); moses (PREFIX.SRC + PREFIX.TGT, a sentence a line); "
            "tsv (a file whose first line names the columns' languages, e.g. en<TAB>de); jsonl (a file, "
            '{"en": ..., "de": ...} or {"translation": {...}} a line); hub (hub_dataset)',
            "choices": ("sample", "moses", "tsv", "jsonl", "hub"),
        },
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "folder that relative train/valid/test paths are joined to"}
    )
    train_data: str = field(
        default="train",
        metadata={"help": "moses: file prefix (PREFIX.src, PREFIX.tgt); tsv/jsonl: file; hub/sample: split"},
    )
    valid_data: str | None = field(
        default="valid", metadata={"help": "like train_data; the dev set for validation loss/BLEU (null: none)"}
    )
    test_data: str | None = field(
        default="test",
        metadata={"help": "like train_data; scored after training with the averaged model (null: none)"},
    )
    hub_dataset: str | None = field(
        default=None, metadata={"help": "data_format hub: dataset name for datasets.load_dataset (e.g. wmt14)"}
    )
    hub_config: str | None = field(
        default=None, metadata={"help": "data_format hub: dataset configuration (e.g. de-en)"}
    )
    src_lang: str = field(default="en", metadata={"help": "source language code"})
    tgt_lang: str = field(default="de", metadata={"help": "target language code"})
    max_length: int | None = field(
        default=256,
        metadata={
            "help": "drop training pairs with a side longer than this many BPE tokens (null: "
            "keep what fits max_tokens_per_device)",
            "min": 1,
            "max": MAX_POSITIONS,
        },
    )
    max_length_ratio: float | None = field(
        default=9.0,
        metadata={
            "help": "drop training pairs whose length ratio exceeds this (null: keep)",
            "min": 1.0,
            "max": 10**6,
        },
    )
    max_train_samples: int = field(
        default=0, metadata={"help": "use only the first N training pairs (0: all)", "min": 0, "max": BIG}
    )
    max_eval_samples: int = field(
        default=0, metadata={"help": "validate on the first N dev pairs (0: all)", "min": 0, "max": BIG}
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "processes for Dataset.map tokenisation", "min": 1, "max": 256}
    )


@dataclass
class TokenizerKeys:
    _argument_group_name = "tokenizer (Section 5.1: one BPE vocabulary shared by source and target)"
    tokenizer_path: str | None = field(
        default=None, metadata={"help": "existing tokenizer folder; null: train a joint BPE on the training data"}
    )
    # The BPE's own declarations (vaswani_hf.tokenization.BpeSettings), as the model keys are VaswaniConfig's own.

    vocab_size: int = field(default=_BPE["vocab_size"].default, metadata=_BPE["vocab_size"].metadata)
    bpe_min_frequency: int = field(default=_BPE["min_frequency"].default, metadata=_BPE["min_frequency"].metadata)
    lowercase: bool = field(default=_BPE["lowercase"].default, metadata=_BPE["lowercase"].metadata)


# The model's settings that a recipe sets are those VaswaniConfig declares with `recipe: True`. Their type, default
# (the base model, Table 3), meaning and range are that declaration; they are a section of their own here only for
# the command line's groups.
ModelKeys = dataclasses.make_dataclass(
    "ModelKeys",
    [
        (s.name, str if s.choices else s.type, field(default=s.default, metadata=s.metadata))
        for s in MODEL_SETTINGS.values()
        if s.recipe
    ],
    namespace={
        "_argument_group_name": "model (Table 3; defaults: base)",
        "__doc__": "The VaswaniConfig settings declared with recipe: True (MODEL_SETTINGS).",
    },
)
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ModelKeys))


@dataclass
class OptimizationKeys:
    _argument_group_name = "optimisation and objective (Sections 5.2-5.4)"
    max_steps: int = field(
        default=100000,
        metadata={
            "help": "optimizer updates (paper: 100k base, 300k big); 0 or -1: use num_train_epochs",
            "min": -1,
            "max": BIG,
        },
    )
    num_train_epochs: float = field(
        default=1.0, metadata={"help": "epochs, only if max_steps <= 0", "min": 0, "max": 10**6}
    )
    warmup_steps: int = field(
        default=4000,
        metadata={"help": "warmup_steps of the learning-rate formula (Section 5.3)", "min": 1, "max": BIG},
    )
    lr_multiplier: float = field(
        default=1.0,
        metadata={
            "help": "constant factor in front of the Section 5.3 formula (paper: 1)",
            "min": 0,
            "min_exclusive": True,
            "max": 1000,
        },
    )
    label_smoothing: float = field(
        default=PAPER_LABEL_SMOOTHING,
        metadata={
            "help": "eps_ls of the training objective (Section 5.4; the model's own loss stays plain cross-entropy)",
            **PROBABILITY,
        },
    )
    adam_beta1: float = field(default=0.9, metadata={"help": "Adam beta1 (Section 5.3)", **PROBABILITY})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (Section 5.3)", **PROBABILITY})
    adam_epsilon: float = field(
        default=1e-9, metadata={"help": "Adam epsilon (Section 5.3)", "min": 0, "min_exclusive": True, "max": 1}
    )
    weight_decay: float = field(
        default=0.0, metadata={"help": "L2 weight decay (the paper uses none)", "min": 0, "max": 1}
    )
    max_grad_norm: float = field(
        default=0.0, metadata={"help": "gradient clipping (0: none, as the paper and t2t v1)", "min": 0, "max": 10**6}
    )
    max_tokens_per_device: int | str = field(
        default=4096,
        metadata={
            "help": "padded source (and target) tokens per micro-batch per process; auto: from tokens_per_step, the "
            "process count and the device's memory (vaswani_hf.training.budget)",
            "min": 1,
            "max": MAX_TOKENS,
            "words": ("auto",),
        },
    )
    tokens_per_step: int = field(
        default=0,
        metadata={
            "help": "target tokens per optimizer update for gradient_accumulation_steps: auto",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )
    gradient_accumulation_steps: int | str = field(
        default=1,
        metadata={
            "help": "micro-batches per update; auto: ceil(tokens_per_step / (max_tokens_per_device x processes))",
            "min": 1,
            "max": 10**6,
            "words": ("auto",),
        },
    )
    max_sentences: int = field(
        default=0, metadata={"help": "cap on pairs per micro-batch (0: none)", "min": 0, "max": MAX_SENTENCES}
    )
    eval_max_tokens: int = field(
        default=0,
        metadata={
            "help": "token budget of evaluation batches (0: max_tokens_per_device)",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )
    pad_to_multiple_of: int = field(
        default=0,
        metadata={
            "help": "pad batch lengths up to a multiple of this (8: tensor-core friendly, 64: "
            "few shapes for torch_compile; 0: to the longest sentence)",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )
    loss_chunk_tokens: int = field(
        default=0,
        metadata={
            "help": "compute the training loss this many target tokens at a time, never the "
            "whole (tokens x vocabulary) logits (GPU memory: e.g. 4096; 0: in one piece)",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )


@dataclass
class CheckpointKeys:
    _argument_group_name = "checkpoints (Section 6.1)"
    save_every_minutes: float = field(
        default=10.0,
        metadata={"help": "checkpoint every N minutes of training (paper: 10; 0: off)", "min": 0, "max": 10**8},
    )
    save_steps: int = field(
        default=0, metadata={"help": "also checkpoint every N updates (0: off)", "min": 0, "max": BIG}
    )
    keep_last: int = field(
        default=5, metadata={"help": "keep the last K checkpoints (0: keep all)", "min": 0, "max": 10**6}
    )
    average_last: int = field(
        default=5,
        metadata={
            "help": "average the last N checkpoints at the end (paper: 5 base, 20 big; 0/1: off)",
            "min": 0,
            "max": 10**6,
        },
    )
    max_train_minutes: float = field(
        default=0.0, metadata={"help": "stop training after this wall-clock budget (0: none)", "min": 0, "max": 10**8}
    )


@dataclass
class EvaluationKeys:
    _argument_group_name = "evaluation"
    eval_steps: int = field(
        default=0,
        metadata={"help": "validation loss + BLEU every N updates (0: only at the end)", "min": 0, "max": BIG},
    )
    eval_num_beams: int = field(
        default=4,
        metadata={
            "help": "beam size for validation BLEU during training (paper decoding: 4)",
            "min": 1,
            "max": GENERATION_SETTINGS["num_beams"].max,
        },
    )
    test_num_beams: int = field(
        default=0,
        metadata={
            "help": "beam size for the final scores (0: the model's generation_config)",
            "min": 0,
            "max": GENERATION_SETTINGS["num_beams"].max,
        },
    )
    bleu_tokenize: str = field(
        default="13a",
        metadata={
            "help": "sacreBLEU tokenizer; 'none' for pre-tokenized references (Multi30k tok)",
            "choices": SACREBLEU_TOKENIZERS,
        },
    )
    eval_on_start: bool = field(default=False, metadata={"help": "validate before the first update"})


SECTIONS = (RunKeys, DataKeys, TokenizerKeys, ModelKeys, OptimizationKeys, CheckpointKeys, EvaluationKeys)
# Every key's Setting, by name; a model key's Setting is VaswaniConfig's own declaration.
SETTINGS = {
    name: MODEL_SETTINGS.get(name, s) if section is ModelKeys else s
    for section in SECTIONS
    for name, s in settings_of(section).items()
}

__all__ = ["SECTIONS", "SETTINGS", "MODEL_KEYS", "ModelKeys"]
