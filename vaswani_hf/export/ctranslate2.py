"""Translate with a CTranslate2 export of our model, using our decoding options and their names.

`to_ctranslate2`, which writes the export, is re-exported here.

CTranslate2 runs the exported network exactly: its float32 log-probabilities agree with ours to float32 rounding (the
tests ask for 1e-4 on every token). What it cannot copy one-to-one is the search around the network, so that part is
written here. The options keep the names of `vaswani_hf.translation.inference.translate`, and this docstring says how each one
maps onto CTranslate2 and where the two engines can still differ.

Length penalty (`length_penalty_type`). CTranslate2 ranks finished beam hypotheses by ``log P(Y) / L ** alpha``,
where ``L`` does not count ``</s>`` unless ``return_end_token=True`` is given. It has no GNMT formula.

- ``"gnmt"`` is our `generate()` default and the paper's (Section 6.1): ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, computed
  by `vaswani_hf.generation_vaswani.gnmt_length_penalty`, the function our own beam search uses.
- ``"hf"`` is transformers' ``|Y| ** alpha``.
- For both, ``|Y|`` counts ``</s>``, as our `generate()` does. CTranslate2 returns its ``num_beams`` best finished
  hypotheses with their scores; we undo its normalisation exactly (``score * L ** alpha`` is ``log P(Y)``) and rank
  them again with our formula. What is left to differ is the set of candidates. CTranslate2 stops a sentence once
  ``num_beams * patience`` hypotheses have finished (transformers' ``early_stopping=True``), while our `generate()`
  default ``early_stopping="never"`` keeps searching while a running beam could still win (tensor2tensor's bound), so
  it can find a hypothesis that CTranslate2 never finishes. A ``patience`` above 1 narrows that gap at some cost in
  speed.
- ``"ctranslate2"`` passes CTranslate2's own ranking through, without ranking again.

With ``alpha = 0`` all three are the plain log-probability, and greedy search (``num_beams=1``) ignores them.

Maximum output length (`max_length_a`, `max_length_b`, `max_new_tokens`). Our rule is per sentence: at most
``floor(a * source_length + b)`` tokens, ``</s>`` included, where ``source_length`` counts the source tokens with their
``</s>`` (the paper's "input length + 50", Section 6.1); `generate()` forces ``</s>`` as the last one. CTranslate2's
``max_decoding_length`` is one number per `translate_batch` call and does not force ``</s>``, so we give it
``limit - 1`` free tokens; the ``</s>`` our rule forces has log-probability 0 and is counted in ``|Y|`` when ranking
again. With ``exact_max_length=True`` (the default) the sentences are grouped by their limit, that is by source
length, and each group gets calls of its own, which is exact. ``exact_max_length=False`` gives every sentence the
largest limit, so shorter sentences get a looser one; CTranslate2's ``max_input_length`` is no substitute, because it
truncates the source. The limit only binds for degenerate outputs. ``max_new_tokens`` is a global cap, as in
`generate()`. Both are also capped by the exported position table (``max_positions`` of `to_ctranslate2`), because
CTranslate2 cannot extend the sinusoids on demand as our model does; a longer source is refused naming its line,
never truncated.

Other details:

- ``min_decoding_length`` is set to 0, because transformers lets ``</s>`` come first and CTranslate2's default of 1
  would forbid it.
- Lines go in and come out by the front end both engines share, `vaswani_hf.translation.frontend.translate_lines`: an
  empty or whitespace-only sentence gives "" without being decoded, the others are stripped, and every output is one
  stripped line.
- An option left unset keeps the generation config saved with the export (`vaswani_ctranslate2.json`); an option that
  file does not record takes the paper's value (`default_generation_config`).
- Batches come from the package's one batcher, `vaswani_hf.data.batching.make_batches`: ``max_tokens`` padded source
  tokens (4096 by default), ``batch_size`` sentences, or both, per batch, longest first. Each batch is one
  `translate_batch` call, which CTranslate2 does not split again, and the results come back in input order.
- ``compute_type="default"`` keeps the exported weight type. An int8 export then runs int8 matrix products with
  float32 activations on a CPU, and its accuracy depends on that CPU's int8 kernels; ``"float32"`` dequantises it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..configuration_vaswani import SettingError, VaswaniConfig
from ..data.batching import TRANSLATE_MAX_TOKENS, make_batches
from ..generation_config_vaswani import LENGTH_PENALTY_TYPES as GENERATE_LENGTH_PENALTY_TYPES
from ..generation_vaswani import default_generation_config, gnmt_length_penalty
from ..io import UsageError
from ..io.binary_files import check_ctranslate2_folder
from ..io.files import CT2_VOCABULARY, read_json
from ..settings import GENERATION_SETTINGS, settings_of
from ..translation.frontend import MAX_SOURCE_TOKENS, UNSET, PositionTable, resolve_options, translate_lines
from .ctranslate2_spec import (
    CT2_METADATA_FILE,
    GENERATION_KEYS,
    check_metadata,
    check_one_vocabulary,
    import_ctranslate2,
    to_ctranslate2,
    tokenizer_tokens,
)

# The scorings of generate(), and CTranslate2's own, which keeps the hypotheses in the order CTranslate2 ranked them.
LENGTH_PENALTY_TYPES = (*GENERATE_LENGTH_PENALTY_TYPES, "ctranslate2")


@dataclass
class CTranslate2Decoding:
    """Declare the one decoding setting this translator takes beyond `generate()`'s (`DecodingSettings`).

    It adds a third scoring, CTranslate2's own, to the length-penalty types.
    """

    length_penalty_type: str = field(
        default="gnmt",
        metadata={
            "help": "gnmt or hf: generate()'s scorings, re-ranked exactly; ctranslate2: CTranslate2's own ranking",
            "choices": LENGTH_PENALTY_TYPES,
        },
    )


DECODING = {**GENERATION_SETTINGS, **settings_of(CTranslate2Decoding)}

__all__ = [
    "CTranslate2Translator",
    "translate_ctranslate2",
    "to_ctranslate2",
    "gnmt_length_penalty",
    "LENGTH_PENALTY_TYPES",
]


def _split_device(device: str | None) -> tuple[str, int]:
    """Map a device name ("cpu", "cuda", "cuda:1") to CTranslate2's (device, device_index).

    CTranslate2 runs only on the CPU or on CUDA.
    """
    device = str(device or "cpu")
    name, _, index = device.partition(":")
    if name not in ("cpu", "cuda", "auto"):
        raise UsageError(f"CTranslate2 runs on 'cpu' or 'cuda[:N]', not {device!r}")
    return name, int(index or 0)


def _generation_defaults(saved: dict) -> dict:
    """Return the decoding options an export was saved with, filling in the paper's for those it does not record.

    `saved` is the "generation" entry of `vaswani_ctranslate2.json`, where None means not recorded. The paper's
    options come from `default_generation_config` (Section 6.1).
    """
    paper = default_generation_config(VaswaniConfig())
    defaults = {key: getattr(paper, key, None) for key in (*GENERATION_KEYS, "max_new_tokens")}
    return {**defaults, **{key: value for key, value in saved.items() if key in GENERATION_KEYS and value is not None}}


def _check_tokenizer(folder: Path, tokenizer, given: bool) -> None:
    """Refuse a tokenizer that is not the export's vocabulary, with a UsageError naming both files and the first id
    where they differ (`check_one_vocabulary`).

    CTranslate2 maps token strings to rows through its own vocabulary files, so a tokenizer of other tokens, even one
    of the same size, would translate garbage without any error of its own."""
    which = "the given tokenizer" if given else f"the tokenizer {folder / 'tokenizer.json'}"
    ours = tokenizer_tokens(tokenizer)
    for path in (folder / f"{name}_vocabulary.json" for name in ("shared", "source", "target")):
        if path.is_file():
            check_one_vocabulary(
                ours,
                dict(enumerate(read_json(path, CT2_VOCABULARY))),
                f"{which} and {path}",
                "the tokenizer files were replaced: export the model again (vaswani-export-ctranslate2)",
            )


def _check_compute_type(ctranslate2, compute_type: str, device: str) -> None:
    """Refuse, in one line, a compute type that this CTranslate2 build cannot run on `device`. CTranslate2 raises a
    ValueError for it only when the translator is built, and its CPU builds have no bfloat16 even on processors with
    bf16 units, so the supported types are named here for the user to choose from. "default" (the export's own type)
    and "auto" (CTranslate2's fastest here) always run."""
    if compute_type in ("default", "auto"):
        return
    supported = sorted(ctranslate2.get_supported_compute_types(device))
    if compute_type not in supported:
        raise UsageError(
            f"CTranslate2 cannot compute in {compute_type} on {device} here; it supports {', '.join(supported)} "
            "(--dtype fp32 keeps the export's own type, --dtype auto takes the fastest of them)"
        )


class CTranslate2Translator:
    """Hold a loaded CTranslate2 export and its tokenizer, and translate with our decoding options.

    `translate` maps our decoding options onto CTranslate2's, as the module docstring says.

    Load it once and call `translate` many times: loading reads model.bin and the tokenizer and compares their
    vocabularies, which is not free.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike,
        device: str = "cpu",
        compute_type: str = "default",
        inter_threads: int = 1,
        intra_threads: int = 0,
        tokenizer=None,
    ):
        from transformers import AutoTokenizer

        ctranslate2, _, _ = import_ctranslate2()
        # Checked before CTranslate2 reads it, because CTranslate2 aborts the process on a broken folder.
        self.model_dir = check_ctranslate2_folder(model_dir)
        metadata_path = self.model_dir / CT2_METADATA_FILE
        self.metadata = check_metadata(metadata_path) if metadata_path.is_file() else {}
        device, device_index = _split_device(device)
        _check_compute_type(ctranslate2, compute_type, device)
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(str(self.model_dir))
        _check_tokenizer(self.model_dir, self.tokenizer, given=tokenizer is not None)
        self.translator = ctranslate2.Translator(
            str(self.model_dir),
            device=device,
            device_index=device_index,
            compute_type=compute_type,
            inter_threads=inter_threads,
            intra_threads=intra_threads,
        )
        # It is None for an export not written by us, whose position table is unknown, so sources are not checked
        # against it.
        self.max_positions = self.metadata.get("max_positions")
        self.generation_defaults = _generation_defaults(self.metadata.get("generation", {}))

    # -- tokenisation --------------------------------------------------------------------------------------------------

    def encode(self, sentences: Sequence[str]) -> list[list[str]]:
        """Return the source token strings as our tokenizer makes them, `</s>` included.

        The tokenizer adds `</s>` because the export sets add_source_eos=False.
        """
        ids = self.tokenizer(list(sentences), add_special_tokens=True)["input_ids"]
        return [self.tokenizer.convert_ids_to_tokens(x) for x in ids]

    def decode(self, tokens: list[str]) -> str:
        """Return the text of target token strings; the front end then makes it one line."""
        return self.tokenizer.decode(self.tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True)

    # -- translation ---------------------------------------------------------------------------------------------------

    def _options(self, **options) -> tuple:
        """Return the options as (num_beams, alpha, penalty type, a, b, max_new_tokens).

        Each option is the one given, else the export's (`resolve_options`). The beam size and the scoring are checked
        against their declarations, and turning the per-sentence limit off needs `max_new_tokens`, so that no sentence
        decodes without a limit; a problem raises a UsageError.
        """
        o = resolve_options(self.generation_defaults, **options)
        try:
            for name in ("num_beams", "length_penalty_type"):
                DECODING[name].check(o[name], "CTranslate2")
        except SettingError as error:
            raise UsageError(str(error)) from None
        if o["max_length_b"] is None and o["max_new_tokens"] is None:
            raise UsageError("max_length_b=None turns the per-sentence limit off: give max_new_tokens as the limit")
        return (
            o["num_beams"],
            o["length_penalty"],
            o["length_penalty_type"],
            o["max_length_a"],
            o["max_length_b"],
            o["max_new_tokens"],
        )

    def _limits(self, sources, a, b, max_new_tokens) -> tuple[list[int], list[bool]]:
        """Return, per sentence, the free tokens CTranslate2 may produce and whether our rule forces </s> after them.

        Our `generate()` allows `limit` tokens with </s> included, forcing </s> as the limit-th token (the per-sentence
        rule) or stopping after `max_new_tokens` (a global cap), so CTranslate2 may produce limit - 1 free tokens. The
        position table caps both; the sources were checked against it before (`translate_lines`)."""
        steps, forced_eos = [], []
        for tokens in sources:
            rule = int(a * len(tokens) + b) if b is not None else None
            rule_steps = max(rule, 1) - 1 if rule is not None else None
            cap = min(x for x in (rule_steps, max_new_tokens) if x is not None)
            if self.max_positions is not None:
                cap = min(cap, self.max_positions)  # The decoder's input positions run from 0 to cap - 1.
            steps.append(cap)
            forced_eos.append(rule_steps is not None and cap == rule_steps)
        return steps, forced_eos

    def translate(
        self,
        sentences: Sequence[str],
        *,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        length_penalty_type: str | None = None,
        max_length_a: float | None = None,
        max_length_b: int | None = UNSET,
        max_new_tokens: int | None = None,
        exact_max_length: bool = True,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        patience: float = 1.0,
        max_input_tokens: int | None = MAX_SOURCE_TOKENS,
    ) -> list[str]:
        """Translate `sentences` (plain text) into one single-line string per sentence, in input order.

        The options have the names and meanings of `vaswani_hf.translation.inference.translate` and `generate()`, mapped onto
        CTranslate2 as the module docstring says. An option left as None (or `max_length_b` left unset) keeps the
        export's generation config, which is the paper's decoding (beam 4, GNMT alpha 0.6, input length + 50) unless
        the model was saved with another. `num_beams=1` is greedy search. `length_penalty_type` is "gnmt", "hf" or
        "ctranslate2" (CTranslate2's own ranking). `max_length_a` and `max_length_b` set the per-sentence limit of
        floor(a * source_length + b) tokens, </s> included; `max_length_b=None` turns it off, and then
        `max_new_tokens` is required. `exact_max_length` groups the sentences by their limit. `max_tokens` and
        `batch_size` are the budget of `make_batches` (4096 tokens when neither is given), and `patience` is
        CTranslate2's beam patience. A source longer than the exported position table, or than `max_input_tokens`,
        is refused with a UsageError naming its line (1-based)."""
        options = self._options(
            num_beams=num_beams,
            length_penalty=length_penalty,
            length_penalty_type=length_penalty_type,
            max_length_a=max_length_a,
            max_length_b=max_length_b,
            max_new_tokens=max_new_tokens,
        )
        if max_tokens is None and batch_size is None:
            max_tokens = TRANSLATE_MAX_TOKENS

        def decode(sources: list[list[str]]) -> list[str]:
            found = self._translate_tokens(
                sources,
                *options,
                exact_max_length=exact_max_length,
                batch_size=batch_size,
                max_tokens=max_tokens,
                patience=patience,
            )
            return [self.decode(tokens) for tokens in found]

        return translate_lines(sentences, self.encode, decode, self.position_table, max_source_tokens=max_input_tokens)

    @property
    def position_table(self) -> PositionTable | None:
        """Return the longest source the export embeds, which the front end checks, or None if it is unknown.

        It is unknown, and not checked, for an export not written by us.
        """
        return (
            None
            if self.max_positions is None
            else PositionTable(
                self.max_positions,
                "this CTranslate2 export has position encodings for",
                ", or re-export with a larger --max_positions",
            )
        )

    def _translate_tokens(
        self,
        sources,
        num_beams,
        alpha,
        penalty_type,
        a,
        b,
        max_new_tokens,
        *,
        exact_max_length,
        batch_size,
        max_tokens,
        patience,
    ) -> list[list[str]]:
        """Return the best hypothesis of each source as token strings without `</s>`, in input order.

        The sources are grouped by their length limit (all in one group unless `exact_max_length`), each group is cut
        into `make_batches`' batches, and each batch is one `_search`.
        """
        steps, forced_eos = self._limits(sources, a, b, max_new_tokens)
        groups: dict[int, list[int]] = defaultdict(list)
        for k, cap in enumerate(steps):
            groups[cap if exact_max_length else max(steps)].append(k)
        hypotheses: list[list[str]] = [[] for _ in sources]
        for cap, members in groups.items():
            if cap <= 0:  # The rule leaves room for </s> only.
                continue
            for batch in make_batches([len(sources[k]) for k in members], max_tokens, batch_size):
                chosen = [members[j] for j in batch]
                found = self._search(
                    [sources[k] for k in chosen],
                    cap,
                    num_beams,
                    alpha,
                    penalty_type,
                    patience,
                    [forced_eos[k] and exact_max_length for k in chosen],
                )
                for k, tokens in zip(chosen, found):
                    hypotheses[k] = tokens
        return hypotheses

    def _search(self, sources, cap, num_beams, alpha, penalty_type, patience, forced_eos):
        """Run one `translate_batch` call on one of our batches and return each sentence's best hypothesis.

        The best hypothesis is the one our length penalty ranks first.
        """
        eos = self.tokenizer.eos_token
        options = dict(
            beam_size=num_beams,
            patience=patience,
            max_decoding_length=cap,
            min_decoding_length=0,
            max_input_length=0,  # Never truncate silently; the lengths were checked against the table before.
            max_batch_size=0,  # Pass our batch as it is, because make_batches already sized it.
        )
        if num_beams == 1 or alpha == 0 or penalty_type == "ctranslate2":
            results = self.translator.translate_batch(sources, length_penalty=alpha, **options)
            return [result.hypotheses[0] for result in results]
        # CTranslate2 ranks finished hypotheses by score / L ** alpha, L counting </s> with return_end_token=True.
        # We undo that exactly (score * L ** alpha = log P(Y)) and re-rank the finished beam with our formula, where
        # |Y| counts </s>, also the </s> our generate() forces at the per-sentence limit (log-prob 0 there).
        results = self.translator.translate_batch(
            sources,
            length_penalty=alpha,
            return_end_token=True,
            return_scores=True,
            num_hypotheses=num_beams,
            **options,
        )
        best = []
        for result, forced in zip(results, forced_eos):
            ranked = []
            for tokens, score in zip(result.hypotheses, result.scores):
                log_prob = score * max(len(tokens), 1) ** alpha
                ended = bool(tokens) and tokens[-1] == eos
                our_length = len(tokens) + (0 if ended or not forced else 1)
                penalty = (
                    gnmt_length_penalty(our_length, alpha) if penalty_type == "gnmt" else max(our_length, 1) ** alpha
                )
                ranked.append((log_prob / penalty, tokens[:-1] if ended else tokens))
            best.append(max(ranked, key=lambda item: item[0])[1])
        return best


def translate_ctranslate2(
    model_dir: str | os.PathLike,
    sentences: Sequence[str],
    *,
    device: str | None = "cpu",
    compute_type: str = "default",
    quantization: str | None = None,
    inter_threads: int = 1,
    intra_threads: int = 0,
    **options,
) -> list[str]:
    """Translate with CTranslate2 into one single-line string per sentence, in input order.

    `model_dir` is a folder written by `to_ctranslate2` (it has model.bin), or a saved Vaswani model folder, which is
    then exported to a temporary folder first with `quantization` (None: float32 weights). The decoding options go
    to `CTranslate2Translator.translate` and have the names of `vaswani_hf.translation.inference.translate`; an option left unset
    keeps the model's generation config. Each call loads the model, so build a `CTranslate2Translator` once for
    repeated calls."""
    import tempfile

    loader = dict(device=device, compute_type=compute_type, inter_threads=inter_threads, intra_threads=intra_threads)
    if (Path(model_dir) / "model.bin").is_file():
        return CTranslate2Translator(model_dir, **loader).translate(sentences, **options)
    with tempfile.TemporaryDirectory(prefix="vaswani_ct2_") as tmp:
        folder = to_ctranslate2(model_dir, Path(tmp) / "ct2", quantization=quantization)
        return CTranslate2Translator(folder, **loader).translate(sentences, **options)
