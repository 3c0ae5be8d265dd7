"""Translate text with a trained Transformer (Vaswani et al., 2017): load the model, decode in batches, and build the
translation pipeline.

The decoding itself is `model.generate`, whose defaults for this model are the paper's Section 6.1 settings, stored
in the model's `generation_config` (see `generation_vaswani.default_generation_config`). They are a beam size of 4; a
length penalty with alpha = 0.6 and GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha (`length_penalty_type="gnmt"`, where "hf"
would be transformers' |Y| ** alpha); a maximum output length of the input length + 50 per sentence
(`max_length_a * source_length + max_length_b` with a = 1 and b = 50); and early termination (`early_stopping="never"`,
under which a sentence stops once no running beam can beat its worst finished hypothesis).

This module adds what the paper's decoder did around that: sentences are grouped into batches by a token budget
(as tensor2tensor and fairseq batch by tokens, not sentences; the package's one batcher,
`vaswani_hf.data.batching.make_batches`), sorted by length so that little padding is decoded, and returned in their
original order.

The public API:

- `translate(model, tokenizer, sentences, ...)` returns one translation (a str) per sentence;
- `translate_batch_fn(model_folder or model, ...)` returns a function for `datasets.Dataset.map(..., batched=True)`;
- `load_for_inference(model_dir, device=None, dtype=None)` returns (model, tokenizer);
- `load_for_decoding(model_dir, device=None, dtype="fp32")` returns (model, tokenizer, precision.Choice);
- `translation_pipeline(model, tokenizer, ...)` returns a VaswaniTranslationPipeline;
- `save_pretrained_with_pipeline(model, tokenizer, save_directory)` saves both through the pipeline;
- `register_pipeline()` registers the pipeline's task names with transformers.

The rules every engine shares live in `vaswani_hf.translation.frontend`, so that N lines in give N lines out: an empty
or whitespace-only sentence gives "" without decoding, other sentences are stripped, every output is one line, and a
source longer than a learned position table is refused, naming its line. `translate` is the engine behind them.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import precision
from ..data.batching import TRANSLATE_MAX_TOKENS, make_batches
from ..io import UsageError, load_model_folder
from ..io.progress import progress_bar
from ..pipeline_vaswani import VaswaniTranslationPipeline, register_pipeline_tasks
from ..settings import device_problem
from .frontend import MAX_SOURCE_TOKENS, UNSET, PositionTable, given_options, translate_lines

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
    """Return the torch.dtype of "fp32", "bf16" or "fp16" (or of their long names), a torch.dtype as it is, and None
    for None. "auto" and "int8" raise a UsageError here, because they are chosen when the model is loaded, and so does
    an unknown name."""
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
    """Return a precision spelled as `precision.DTYPE` spells it ("fp32", "bf16", "fp16", "int8", "auto"), given any
    of its names or a torch.dtype; any other value raises a UsageError naming the choices."""
    if isinstance(dtype, torch.dtype) or str(dtype).lower().removeprefix("torch.") in DTYPES:
        names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
        dtype = names.get(resolve_dtype(dtype), dtype)
    if dtype not in precision.DTYPE.choices:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(precision.DTYPE.choices)}")
    return dtype


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Return `device` as a torch.device or, when it is None, the available accelerator (CUDA, MPS, XPU, ...), or
    else the CPU. A name that is no torch device, or a device this machine does not have, raises a UsageError naming
    it (the same check as the tools' `--device`), rather than an error from deep inside torch when the first tensor
    moves there."""
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
    """Return a context that turns gradients off and, when `dtype` is bf16 or fp16, runs autocast to it on `device`
    (None or fp32 means no autocast). Under autocast the context is `no_grad`, not `inference_mode`, because autocast
    keeps its casts of the fp32 weights only outside inference mode: inside it, every weight matrix would be cast
    again at every decoding step, which measured about 17% of the time of a CPU beam search."""
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
        model_dir: a folder written by `save_pretrained` (model and tokenizer), or a Hub id. It is checked by
            `vaswani_hf.io.load_model_folder`, and a missing or broken file raises a UsageError naming it.
        device: where to put the model; None picks the available accelerator, or else the CPU.
        dtype: the decoding precision (`vaswani_hf.precision.DTYPE`). It is None or "fp32" (the default); "bf16" or
            "fp16", which cast the weights once, halving the memory, and are the fast path on GPUs and on CPUs with
            bf16 matrix units; "int8", which on the CPU quantises the linear layers dynamically; or "auto", which
            picks bf16 where this machine and the model's size gain from it and fp32 otherwise (`load_for_decoding`
            also returns the choice and its reason). To keep fp32 weights and compute under autocast instead, load
            in fp32 and pass `dtype=` to `translate`.
        trust_remote_code: needed only for folders of models whose code is not installed (this package registers
            its own classes with the Auto classes when imported).

    Returns:
        (model, tokenizer), the model in eval mode on `device`.
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
    """Load a model folder as `load_for_inference` does, and return (model, tokenizer, choice), where `choice` is the
    precision chosen (a `vaswani_hf.precision.Choice`, whose `line()` is what the tools print). The model is loaded in
    fp32 and then put in the chosen precision once (`precision.prepare_for_decoding`), so that "auto" can weigh the
    model's size; nothing is cast per step."""
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
    """Return the longest sequence (in tokens, `</s>` included) that the model can embed: the number of rows of a
    learned position table (Table 3, row E), where `generate()` also caps its outputs. Return None for sinusoids,
    which extend to any length (Section 3.5), and for models without our generation mixin."""
    learned_positions = getattr(model, "learned_positions", None)  # defined by generation_vaswani's mixin
    return learned_positions() if callable(learned_positions) else None


def _pad(sequences: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad the token lists on the right to the longest one, and return (input_ids, attention_mask) as two (B, S)
    tensors on `device`."""
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
    Lines go in and out through `vaswani_hf.translation.frontend.translate_lines`: an empty or whitespace-only
    sentence gives "" without decoding, other sentences are stripped, and every output is one line.

    Args:
        model: a seq2seq model (`VaswaniForConditionalGeneration`, or any `AutoModelForSeq2SeqLM`).
        tokenizer: the model's tokenizer, which appends `</s>` to the source, as in training.
        sentences: the source sentences.
        max_tokens: the budget of padded source tokens per batch (see `make_batches`), or None for no budget.
        batch_size: at most this many sentences per batch; None lets only the token budget limit it.
        num_beams, length_penalty, early_stopping: as in `generate()`; None keeps the generation config's value.
        length_penalty_type: "gnmt" (the paper's ((5+|Y|)/6)^alpha) or "hf" (|Y|^alpha); only Vaswani models take
            it.
        max_length_a, max_length_b: the per-sentence limit of floor(a * source_length + b) tokens (the paper uses
            a=1 and b=50); only Vaswani models take them. Left unset, they keep the generation config's values;
            `max_length_b=None` turns the limit off (then give `max_new_tokens`, or transformers' global default
            `max_length=20` applies).
        max_input_tokens: the most source tokens, `</s>` included, a sentence may have, or None for no limit; a
            longer sentence is refused before anything is decoded.
        device: where to decode; None keeps the model where it is. The model is moved there if needed.
        dtype: None or "fp32" (the default), or "bf16" or "fp16" to decode an fp32 model under `torch.autocast` on
            `device`; the weights stay fp32, and each is cast once per call. It is faster, and what the tools do, to
            cast the weights once when loading (`load_for_inference(folder, dtype="bf16")`, or "auto" or "int8") and
            leave this None.
        progress: True to show a progress report on stderr, counted in sentences (`io.progress`: a bar on a
            terminal, plain lines elsewhere), or a bar of the caller's to advance.

    Returns:
        One single-line string per input sentence, in the input order.

    Raises:
        InputLineError: a UsageError naming the sentence (counted from 1) that a model with learned positions cannot
            embed (`position_limit`), or that is longer than `max_input_tokens`, before anything is decoded.
        TypeError: `sentences` is not a collection of strings.
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
    # The front end hands the token ids of the sentences it decodes to this function; _generate's other arguments are
    # fixed here.
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
    """Return what `frontend.translate_lines` needs of this engine besides decoding, as (encode, table).
    `encode` returns the token ids of texts, `</s>` included, and `table` is the position table of a model with learned
    positions, or None for sinusoids. While a fast tokenizer's `tokenizers` backend pads and truncates nothing,
    `encode` takes the ids straight from the backend: they are the ids `tokenizer(texts)` would return, since it calls
    the backend, but without building a BatchEncoding, which is 3x faster. A call with `padding=True` leaves padding
    set in the backend, and then `encode` calls the tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)

    def encode(texts: list[str]) -> list[list[int]]:
        if backend is not None and backend.padding is None and backend.truncation is None:
            return [encoding.ids for encoding in backend.encode_batch(texts, add_special_tokens=True)]
        return tokenizer(texts, add_special_tokens=True)["input_ids"]

    limit = position_limit(model)
    return encode, None if limit is None else PositionTable(limit, "the model's learned position embeddings cover")


def token_bound(tokenizer) -> Callable[[str], int] | None:
    """Return a function that bounds from above the token count of a text (`</s>` included) without tokenising it,
    for a byte-level BPE tokenizer (Section 5.1's shared vocabulary, `tokenization.py`). Every token covers at least
    one byte of the normalised text, so the count is at most its UTF-8 length plus the special tokens the
    post-processor adds. For other tokenizers return None; then every line is tokenised to be checked."""
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
    """Return a function for `datasets.Dataset.map(fn, batched=True)` that translates the column `column` into
    `output_column` with `translate`.

    `model` is a model folder or a model object. A folder is loaded with `load_for_inference` on `device`, in the
    precision that a `dtype` keyword names ("fp32", "bf16", "fp16", "int8" or "auto", as in `vaswani_hf.precision`).
    A model object comes with its `tokenizer`, and then a `dtype` keyword goes to `translate`, which decodes under
    autocast. The other keywords of `options` go to `translate` (for example `num_beams=1` or `max_tokens`), with its
    progress report off. The function raises a KeyError naming the batch's columns if a batch has no `column`.

    `datasets` then does the streaming and the processes. `Dataset.map` works through the rows `batch_size` at a
    time, and each batch is sorted by length and split by the token budget here. An `IterableDataset`
    (`load_dataset(..., streaming=True)`) is translated lazily as it is read, and `num_proc=N` splits the rows across
    N processes; give each its own device with `with_rank=True` and a function of your own, or use CPU threads
    (`torch.set_num_threads`). For example:

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
    """Run `model.generate(**options)` over token-budget batches of `encoded`, and return the decoded best output of
    each sentence, in the order of `encoded`."""
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
                per_input = len(texts) // len(batch)  # with num_return_sequences > 1, keep the best (first) output
                for j, text in zip(batch, texts[::per_input]):
                    outputs[j] = text
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return outputs


# ---------------------------------------------------------------------------------------------------------------------
# The "translation" pipeline: transformers 5 removed its own, so this package provides one.
# ---------------------------------------------------------------------------------------------------------------------


def register_pipeline(langs=None) -> None:
    """Register `VaswaniTranslationPipeline` in transformers' `PIPELINE_REGISTRY` under every task name it answers
    ("translation", "text2text-generation", and "translation_{src}_to_{tgt}" for `langs` = [src, tgt]). It calls
    `pipeline_vaswani.register_pipeline_tasks`, which importing the package has already done; calling it again
    changes nothing."""
    register_pipeline_tasks(langs)


def translation_pipeline(
    model, tokenizer, *, device: str | torch.device | None = None, **kwargs
) -> VaswaniTranslationPipeline:
    """Return a translation pipeline around an in-memory model and tokenizer, for users of this package.

    It is the same as `transformers.pipeline("translation", model=model, tokenizer=tokenizer)`, which works because
    importing the package registers the task (`register_pipeline`), but it also works where transformers refuses the
    name (for a model whose code predates that registration: "The task translation has been removed from
    transformers"), because it builds the class directly. `device` defaults to the model's device; other keywords go to
    the pipeline (e.g. `batch_size=32`, `num_beams=1`).

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
    """Save the model and the tokenizer into one folder through the translation pipeline's own `save_pretrained`,
    transformers' mechanism for a custom pipeline, which calls `model.save_pretrained` and `tokenizer.save_pretrained`.
    A plain `model.save_pretrained` already writes `pipeline_vaswani.py` and `custom_pipelines`
    (configuration_vaswani.py imports the pipeline, and transformers copies a saved class's relative imports), so the
    folder loads with `pipeline(model=folder, trust_remote_code=True)` either way. Keywords go to `save_pretrained`
    (e.g. `push_to_hub`)."""
    translation_pipeline(model, tokenizer).save_pretrained(str(save_directory), **kwargs)
