"""Translating text with a trained Transformer (Vaswani et al., 2017): loading, batched decoding, the pipeline.

The decoding itself is `model.generate`, whose defaults for this model are the paper's Section 6.1 settings, stored
in the model's `generation_config` (see `generation_vaswani.default_generation_config`):

    beam size 4, length penalty alpha = 0.6 with GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha
    (`length_penalty_type="gnmt"`; "hf" is transformers' |Y| ** alpha), maximum output length = input length + 50
    per sentence (`max_length_a * source_length + max_length_b` with a = 1, b = 50), and early termination
    (`early_stopping="never"`: a sentence stops once no running beam can beat its worst finished hypothesis).

This module adds what the paper's decoder did around that: sentences are grouped into batches by a token budget
(as tensor2tensor and fairseq batch by tokens, not sentences; the package's one batcher,
`vaswani_hf.data.batching.make_batches`), sorted by length so that little padding is decoded, and returned in their
original order.

Public API:
    translate(model, tokenizer, sentences, ...) -> list[str]
    translate_batch_fn(model_folder or model, ...) -> function for `datasets.Dataset.map(..., batched=True)`
    load_for_inference(model_dir, device=None, dtype=None) -> (model, tokenizer)
    load_for_decoding(model_dir, device=None, dtype="fp32") -> (model, tokenizer, precision.Choice)
    translation_pipeline(model, tokenizer, ...) -> VaswaniTranslationPipeline
    save_pretrained_with_pipeline(model, tokenizer, save_directory)
    register_pipeline()

Lines in, lines out: the rules every engine shares (an empty or whitespace-only sentence gives "" without decoding,
others are stripped, every output is one line, a source longer than a learned position table is refused naming its
line) are `vaswani_hf.translation_frontend`'s; `translate` is the engine behind them.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import precision
from .constraints import device_problem
from .data.batching import TRANSLATE_MAX_TOKENS, make_batches
from .io import UsageError, load_model_folder
from .io.progress import progress_bar
from .pipeline_vaswani import VaswaniTranslationPipeline, register_pipeline_tasks
from .translation_frontend import MAX_SOURCE_TOKENS, UNSET, PositionTable, given_options, translate_lines

__all__ = [
    "DTYPES",
    "translate",
    "translate_batch_fn",
    "front_end",
    "position_limit",
    "load_for_inference",
    "load_for_decoding",
    "resolve_device",
    "resolve_dtype",
    "translation_pipeline",
    "save_pretrained_with_pipeline",
    "register_pipeline",
    "VaswaniTranslationPipeline",
]

DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """The torch.dtype of "fp32", "bf16" or "fp16" (or of their long names; a torch.dtype is returned as it is),
    and None for None. "auto" and "int8" are refused here: they are chosen when the model is loaded."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key in ("auto", "int8"):
        raise UsageError(
            f"dtype {key} is chosen when the model is loaded: load_for_inference(folder, dtype={key!r}) (or "
            "load_for_decoding), then translate without dtype"
        )
    if key not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16")
    return DTYPES[key]


def precision_name(dtype: str | torch.dtype) -> str:
    """A precision as `precision.DTYPE` spells it ("fp32", "bf16", "fp16", "int8", "auto") from any of its names or
    a torch.dtype; UsageError naming the choices otherwise."""
    if isinstance(dtype, torch.dtype) or str(dtype).lower().removeprefix("torch.") in DTYPES:
        names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
        dtype = names.get(resolve_dtype(dtype), dtype)
    if dtype not in precision.DTYPE.choices:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(precision.DTYPE.choices)}")
    return dtype


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """`device`, or the available accelerator (CUDA, MPS, XPU, ...) when None, else the CPU. A device this machine
    does not have is a UsageError naming it (the same check as the tools' `--device`), not an error from deep inside
    torch when the first tensor moves there."""
    if device is not None:
        try:
            chosen = torch.device(device)
        except (RuntimeError, ValueError, TypeError):
            raise UsageError(f"device {device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)") from None
        problem = device_problem(str(chosen)) if chosen.type in ("cuda", "mps") else None
        if problem:
            raise UsageError(f"device {problem}")
        return chosen
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator()
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _decoding_mode(device: torch.device, dtype: torch.dtype | None) -> contextlib.ExitStack:
    """No gradients, and autocast for `dtype` (bf16/fp16) on `device` (None / fp32: none). Under autocast this is
    `no_grad`, not `inference_mode`: autocast keeps its casts of the fp32 weights only outside inference mode, and
    inside it would cast every weight matrix again at every decoding step (measured: ~17% of a CPU beam search)."""
    stack = contextlib.ExitStack()
    if dtype is None or dtype == torch.float32:
        stack.enter_context(torch.inference_mode())
    else:
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.autocast(device_type=device.type, dtype=dtype))
    return stack


def load_for_inference(
    model_dir: str | os.PathLike,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    *,
    trust_remote_code: bool = False,
):
    """Load a saved model folder (weights, config, generation config, tokenizer) for decoding.

    Args:
        model_dir: folder written by `save_pretrained` (model and tokenizer), or a Hub id. Checked by
            `vaswani_hf.io.load_model_folder`: a missing or broken file is a UsageError naming it.
        device: where to put the model; None picks the available accelerator, else the CPU.
        dtype: the decoding precision (`vaswani_hf.precision.DTYPE`): None or "fp32" (default), "bf16" or "fp16"
            (the weights cast once: half the memory, and the fast path on GPUs and on CPUs with bf16 matrix
            units), "int8" (CPU: the linear layers quantised dynamically), or "auto" (bf16 where this machine and
            the model's size gain from it, else fp32; `load_for_decoding` also returns the choice and its reason).
            To keep fp32 weights and compute under autocast instead, load in fp32 and pass `dtype=` to `translate`.
        trust_remote_code: needed only for folders of models whose code is not installed (this package registers
            its own classes with the Auto classes when imported).

    Returns:
        (model in eval mode on `device`, tokenizer).
    """
    model, tokenizer, _ = load_for_decoding(
        model_dir, device, "fp32" if dtype is None else dtype, trust_remote_code=trust_remote_code
    )
    return model, tokenizer


def load_for_decoding(
    model_dir: str | os.PathLike,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype = precision.DTYPE.default,
    *,
    trust_remote_code: bool = False,
) -> tuple:
    """`load_for_inference`, which also returns the precision chosen (`vaswani_hf.precision.Choice`: its `line()`
    is what the tools print). The model is loaded in fp32 and then put in the chosen precision once
    (`precision.prepare_for_decoding`), so that `auto` can weigh the model's size; nothing is cast per step."""
    asked = precision_name(dtype)
    device = resolve_device(device)
    hardware = precision.hardware_of(device)
    precision.choose(asked, hardware, 0)  # an impossible request (int8 on a GPU) is refused before loading
    model, tokenizer = load_model_folder(
        model_dir, device=device, dtype=torch.float32, trust_remote_code=trust_remote_code
    )
    choice = precision.choose(asked, hardware, model.num_parameters())
    return precision.prepare_for_decoding(model, choice), tokenizer, choice


def position_limit(model) -> int | None:
    """The longest sequence (in tokens, `</s>` included) the model can embed: the rows of a learned position table
    (Table 3, row E), as `generate()` caps its outputs there; None for sinusoids, which extend to any length
    (Section 3.5), and for models without our generation mixin."""
    learned_positions = getattr(model, "learned_positions", None)  # generation_vaswani.VaswaniGenerationMixin
    return learned_positions() if callable(learned_positions) else None


def _pad(sequences: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The token lists padded on the right to the longest, as (input_ids (B, S), attention_mask (B, S))."""
    longest = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention_mask[row, : len(seq)] = 1
    return input_ids.to(device), attention_mask.to(device)


def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    *,
    max_tokens: int | None = TRANSLATE_MAX_TOKENS,
    batch_size: int | None = None,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    length_penalty_type: str | None = None,
    max_length_a: float | None = None,
    max_length_b: int | None = UNSET,
    early_stopping: bool | str | None = None,
    max_input_tokens: int | None = MAX_SOURCE_TOKENS,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    progress: bool | Any = True,
    progress_desc: str = "translating",
    **generate_kwargs,
) -> list[str]:
    """Translate `sentences` with `model.generate`, batched by a token budget, in the original order.

    Decoding settings left as None come from `model.generation_config` (for this model the paper's, Section 6.1);
    any `generate()` argument can be added as a keyword (e.g. `max_new_tokens`, `num_beams=1` for greedy decoding).
    Lines in, lines out by `vaswani_hf.translation_frontend.translate_lines`: empty / whitespace-only sentences give
    "" without decoding, others are stripped, every output is one line.

    Args:
        model: a seq2seq model (`VaswaniForConditionalGeneration`, or any `AutoModelForSeq2SeqLM`).
        tokenizer: its tokenizer (appends `</s>` to the source, as in training).
        sentences: the source sentences.
        max_tokens: budget of padded source tokens per batch (see `make_batches`); None for no budget.
        batch_size: at most this many sentences per batch (None: only the token budget limits it).
        num_beams, length_penalty, early_stopping: as in `generate()`; None keeps the generation config's value.
        length_penalty_type: "gnmt" (the paper, ((5+|Y|)/6)^alpha) or "hf" (|Y|^alpha); Vaswani models only.
        max_length_a, max_length_b: per-sentence limit floor(a * source_length + b) tokens (paper: a=1, b=50);
            Vaswani models only. Unset keeps the generation config's; `max_length_b=None` turns the limit off
            (then give `max_new_tokens`, or transformers' global default `max_length=20` applies).
        max_input_tokens: the longest source a sentence may have, in tokens with `</s>` (None: no limit); a longer
            one is refused before anything is decoded.
        device: where to decode; None keeps the model where it is. The model is moved there if needed.
        dtype: None/"fp32" (default), or "bf16"/"fp16" to decode an fp32 model under `torch.autocast` on `device`
            (the weights stay fp32 and each is cast once per call). Faster, and what the tools do: cast the weights
            once when loading (`load_for_inference(folder, dtype="bf16")`, or "auto", "int8") and leave this None.
        progress: show a progress report on stderr (`io.progress`: a bar on a terminal, plain lines elsewhere),
            counted in sentences; or a bar of the caller's to advance.

    Returns:
        One single-line string per input sentence, in the input order.

    Raises:
        InputLineError (a UsageError) naming the sentence (1-based) when a model with learned positions cannot embed
        it (`position_limit`), before anything is decoded.
    """
    device = torch.device(device) if device is not None else model.device
    if model.device != device:
        model.to(device)
    options = given_options(
        num_beams=num_beams,
        length_penalty=length_penalty,
        length_penalty_type=length_penalty_type,
        max_length_a=max_length_a,
        max_length_b=max_length_b,
        early_stopping=early_stopping,
    )
    # the front end hands the token ids of the sentences it decodes to this (the rest of _generate's arguments fixed)
    decode = functools.partial(
        _generate,
        model,
        tokenizer,
        options=options | generate_kwargs,
        device=device,
        dtype=dtype,
        max_tokens=max_tokens,
        batch_size=batch_size,
        progress=progress,
        progress_desc=progress_desc,
    )
    encode, table = front_end(model, tokenizer)
    return translate_lines(sentences, encode, decode, table, max_source_tokens=max_input_tokens)


def front_end(model, tokenizer) -> tuple:
    """What `translation_frontend.translate_lines` needs of this engine besides decoding: `encode` (texts -> token
    ids, `</s>` included) and the position table of a model with learned positions (None for sinusoids). A fast
    tokenizer's ids come straight from its `tokenizers` backend while that pads and truncates nothing (a call with
    `padding=True` leaves padding set there): the ids of `tokenizer(texts)`, which calls it, without building a
    BatchEncoding (3x faster)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)

    def encode(texts: list[str]) -> list[list[int]]:
        if backend is not None and backend.padding is None and backend.truncation is None:
            return [encoding.ids for encoding in backend.encode_batch(texts, add_special_tokens=True)]
        return tokenizer(texts, add_special_tokens=True)["input_ids"]

    limit = position_limit(model)
    return encode, None if limit is None else PositionTable(limit, "the model's learned position embeddings cover")


def token_bound(tokenizer) -> Callable[[str], int] | None:
    """An upper bound on the token count of a text (`</s>` included) without tokenising it, for a byte-level BPE
    tokenizer (Section 5.1's shared vocabulary, `tokenization.py`): every token covers at least one byte of the
    normalised text, so the count is at most its UTF-8 length plus the special tokens the post-processor adds.
    None for other tokenizers (then every line is tokenised to be checked)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.model).__name__ != "BPE" or type(backend.pre_tokenizer).__name__ != "ByteLevel":
        return None
    normalize = backend.normalizer.normalize_str if backend.normalizer is not None else str
    specials = backend.num_special_tokens_to_add(is_pair=False)
    return lambda text: len(normalize(text).encode("utf-8", "surrogatepass")) + specials


def translate_batch_fn(
    model,
    tokenizer=None,
    *,
    column: str = "text",
    output_column: str = "translation",
    device: str | torch.device | None = None,
    **options,
) -> Callable[[dict], dict]:
    """A function for `datasets.Dataset.map(fn, batched=True)` that translates the column `column` into
    `output_column` with `translate` (`options`: its keywords, e.g. `num_beams=1`, `max_tokens`; progress is off).

    `model` is a model folder, loaded with `load_for_inference` on `device` in the precision `dtype` ("fp32", "bf16",
    "int8" or "auto": `vaswani_hf.precision`), or a model given with its `tokenizer`, in which case `dtype` is
    `translate`'s (autocast).

    `datasets` then does the streaming and the processes: `Dataset.map` works through the rows `batch_size` at a

    time (each batch length-sorted and token-batched here), an `IterableDataset` (`load_dataset(...,
    streaming=True)`) translates lazily as it is read, and `num_proc=N` splits the rows across N processes (give
    each a device with `with_rank=True` and your own function, or use CPU threads: `torch.set_num_threads`):

        fn = translate_batch_fn("runs/base/hub", column="en", output_column="de", num_beams=4)
        dataset = dataset.map(fn, batched=True, batch_size=2000)
    """
    if tokenizer is None:
        model, tokenizer = load_for_inference(model, device=device, dtype=options.pop("dtype", None))
    options = {"progress": False, **options}

    def translate_batch(batch: dict) -> dict:
        if column not in batch:
            raise KeyError(f"translate_batch_fn: no column {column!r} in the batch (its columns: {sorted(batch)})")
        return {output_column: translate(model, tokenizer, batch[column], device=device, **options)}

    return translate_batch


def _generate(
    model,
    tokenizer,
    encoded: list[list[int]],
    options: dict,
    *,
    device: torch.device,
    dtype,
    max_tokens: int | None,
    batch_size: int | None,
    progress,
    progress_desc: str,
) -> list[str]:
    """`model.generate(**options)` over token-budget batches of `encoded`; the decoded best output of each sentence,
    in the order of `encoded`."""
    outputs = [""] * len(encoded)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id
    was_training = model.training
    model.eval()
    try:
        bar = (
            progress
            if not isinstance(progress, bool)
            else progress_bar(total=len(encoded), desc=progress_desc, unit="sent", disable=not progress, leave=False)
        )
        with (
            _decoding_mode(device, resolve_dtype(dtype)),
            contextlib.nullcontext(bar) if bar is progress else bar,
        ):
            for batch in make_batches([len(ids) for ids in encoded], max_tokens, batch_size):
                input_ids, attention_mask = _pad([encoded[j] for j in batch], pad_id, device)
                generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, **options)
                texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
                per_input = len(texts) // len(batch)  # num_return_sequences > 1: keep the best (first) one
                for j, text in zip(batch, texts[::per_input]):
                    outputs[j] = text
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return outputs


# ---------------------------------------------------------------------------------------------------------------------
# The "translation" pipeline (transformers 5 removed its own)
# ---------------------------------------------------------------------------------------------------------------------


def register_pipeline(langs=None) -> None:
    """Register `VaswaniTranslationPipeline` in transformers' `PIPELINE_REGISTRY` under every task name it answers
    ("translation", "text2text-generation", and "translation_{src}_to_{tgt}" for `langs` = [src, tgt]):
    `pipeline_vaswani.register_pipeline_tasks`, which importing the package and building any `VaswaniConfig`
    already did. Idempotent."""
    register_pipeline_tasks(langs)


def translation_pipeline(
    model, tokenizer, *, device: str | torch.device | None = None, **kwargs
) -> VaswaniTranslationPipeline:
    """A translation pipeline around an in-memory model and tokenizer, for users of this package.

    The same as `transformers.pipeline("translation", model=model, tokenizer=tokenizer)`, which works because every
    `VaswaniConfig` registers the task (`register_pipeline`), but also where transformers refuses the name (a model
    whose code predates that registration: "The task translation has been removed from transformers"), as it builds
    the class directly. `device` defaults to the model's device; other keywords go to the pipeline (e.g.
    `batch_size=32`, `num_beams=1`).

        pipe = translation_pipeline(model, tokenizer)
        pipe(["A dog runs.", "Two men talk."], batch_size=16)  # -> [{"translation_text": ...}, ...]
    """
    register_pipeline(getattr(model.config, "langs", None))
    return VaswaniTranslationPipeline(
        model=model,
        tokenizer=tokenizer,
        task="translation",
        device=model.device if device is None else device,
        **kwargs,
    )


def save_pretrained_with_pipeline(model, tokenizer, save_directory: str | os.PathLike, **kwargs) -> None:
    """`model.save_pretrained` + `tokenizer.save_pretrained` in one folder, through the translation pipeline's own
    `save_pretrained` (transformers' mechanism for a custom pipeline). A plain `model.save_pretrained` already writes
    `pipeline_vaswani.py` and `custom_pipelines` (configuration_vaswani.py imports the pipeline, and transformers
    copies a saved class's relative imports), so the folder loads with `pipeline(model=folder,
    trust_remote_code=True)` either way. Keywords go to `save_pretrained` (e.g. `push_to_hub`)."""
    translation_pipeline(model, tokenizer).save_pretrained(str(save_directory), **kwargs)
