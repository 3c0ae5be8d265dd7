"""Translate with a CTranslate2 export of our model (`vaswani_hf.convert.to_ctranslate2`), with our decoding options.

CTranslate2 runs the exported network exactly (float32 log-probabilities agree with ours to ~1e-6); what it cannot
copy one-to-one is the search around it. Options keep the names of `vaswani_hf.generation.translate`; how each maps:

Length penalty (`length_penalty_type`):
    CTranslate2 ranks finished beam hypotheses by ``log P(Y) / L ** alpha`` with ``L`` NOT counting ``</s>``
    (counting it with ``return_end_token=True``), and has no GNMT formula.
    - ``"gnmt"`` (our `generate()` default, the paper's Section 6.1): ``lp(Y) = ((5 + |Y|) / 6) ** alpha``;
    - ``"hf"``: transformers' ``|Y| ** alpha``;
      for both, ``|Y|`` counts ``</s>`` as our `generate()` does. CTranslate2 returns its ``num_beams`` best finished
      hypotheses with their scores; we undo its normalisation exactly (``score * L ** alpha``) and re-rank them
      with our formula. Difference left: the candidate set. CTranslate2 stops a sentence once ``num_beams *
      patience`` hypotheses have finished (transformers' ``early_stopping=True``); our `generate()` default
      ``early_stopping="never"`` keeps searching while a running beam could still win (t2t's bound), so it can
      find a hypothesis CTranslate2 never finishes. ``patience`` > 1 narrows the gap at some speed cost.
    - ``"ctranslate2"``: CTranslate2's native ranking, passed through (no re-ranking).
    With ``alpha = 0`` all are the plain log-probability; greedy search (``num_beams=1``) ignores them.

Maximum output length (`max_length_a`, `max_length_b`, `max_new_tokens`):
    Our rule is per sentence: at most ``floor(a * source_length + b)`` tokens, ``</s>`` included (paper: input length
    + 50; ``source_length`` counts the source tokens with ``</s>``); `generate()` forces ``</s>`` as the last one.
    CTranslate2's ``max_decoding_length`` is ONE number per `translate_batch` call and it does not force ``</s>``:
    we give it ``limit - 1`` free tokens (``</s>`` forced by our rule has log-prob 0 and is counted in ``|Y|`` when
    re-ranking). With ``exact_max_length=True`` (default) sentences are grouped by their limit (i.e. by source
    length) and each group gets its own call, which is exact; CTranslate2 still sorts and batches inside a group.
    ``exact_max_length=False`` makes one call with the largest limit (shorter sentences get a looser limit;
    CTranslate2's ``max_input_length`` is no substitute: it truncates the source). The limit only binds for
    degenerate outputs. ``max_new_tokens`` is a global cap, as in `generate()`.
    Both are also capped by the exported position table (``max_positions`` of `to_ctranslate2`): CTranslate2 cannot
    extend sinusoids on demand as our model does. A longer source is an error, never silently truncated.

Other details:
    - ``min_decoding_length=0``: transformers lets ``</s>`` come first; CTranslate2's default (1) would forbid it.
    - Empty / whitespace-only sentences give "" without decoding, others are stripped, outputs are single lines
      (`vaswani_hf.generation`'s rule, so that N lines in give N lines out).
    - Batching: ``batch_size`` examples (default 32) or ``max_tokens`` tokens per batch; CTranslate2 sorts inputs
      by length and re-batches them; results come back in input order.
    - ``compute_type``: ``"default"`` keeps the exported weight type (an int8 export runs int8 matmuls with float32
      activations on CPU); ``"float32"`` dequantises it.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

LENGTH_PENALTY_TYPES = ("gnmt", "hf", "ctranslate2")
_METADATA_FILE = "vaswani_ctranslate2.json"  # written by vaswani_hf.convert.to_ctranslate2
_UNSET = object()  # "keep the exported generation config's value" where None is itself meaningful
_PAPER_DEFAULTS = dict(num_beams=4, length_penalty=0.6, length_penalty_type="gnmt", max_length_a=1.0,
                       max_length_b=50, max_new_tokens=None)
DEFAULT_BATCH_SIZE = 32

__all__ = ["CTranslate2Translator", "translate_ctranslate2", "gnmt_length_penalty", "LENGTH_PENALTY_TYPES"]


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016), used by the paper with alpha = 0.6 (Section 6.1)."""
    return ((5.0 + length) / 6.0) ** alpha


def _split_device(device: str | None) -> tuple[str, int]:
    """"cpu", "cuda", "cuda:1" -> (CTranslate2 device, device_index)."""
    device = str(device or "cpu")
    name, _, index = device.partition(":")
    if name not in ("cpu", "cuda", "auto"):
        raise ValueError(f"CTranslate2 runs on 'cpu' or 'cuda[:N]', not {device!r}")
    return name, int(index or 0)


class CTranslate2Translator:
    """A loaded CTranslate2 export plus its tokenizer; `translate` maps our decoding options (see module docstring).

    Load once and call `translate` many times (loading is not free: the benchmark keeps it out of the timings).
    """

    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu", compute_type: str = "default",
                 inter_threads: int = 1, intra_threads: int = 0, tokenizer=None):
        from transformers import AutoTokenizer

        from .convert import _import_ctranslate2

        ctranslate2, _, _ = _import_ctranslate2()

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "model.bin").is_file():
            raise FileNotFoundError(
                f"{self.model_dir} is not a CTranslate2 model folder (no model.bin); create one with "
                "`python scripts/export_ctranslate2.py --model_dir ... --out_dir ...`."
            )
        device, device_index = _split_device(device)
        self.translator = ctranslate2.Translator(
            str(self.model_dir), device=device, device_index=device_index, compute_type=compute_type,
            inter_threads=inter_threads, intra_threads=intra_threads,
        )
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(str(self.model_dir))
        metadata_path = self.model_dir / _METADATA_FILE
        self.metadata = json.loads(metadata_path.read_text(encoding="utf-8")) if metadata_path.is_file() else {}
        self.max_positions = self.metadata.get("max_positions")  # None: unknown (not exported by us), no check
        self.generation_defaults = {**_PAPER_DEFAULTS, **{
            k: v for k, v in self.metadata.get("generation", {}).items() if k in _PAPER_DEFAULTS and v is not None
        }}

    # -- tokenisation --------------------------------------------------------------------------------------------------

    def encode(self, sentences: Sequence[str]) -> list[list[str]]:
        """Source token strings as our tokenizer makes them, `</s>` included (the export sets add_source_eos=False)."""
        ids = self.tokenizer(list(sentences), add_special_tokens=True)["input_ids"]
        return [self.tokenizer.convert_ids_to_tokens(x) for x in ids]

    def decode(self, tokens: list[str]) -> str:
        text = self.tokenizer.decode(self.tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True)
        return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text

    # -- translation ---------------------------------------------------------------------------------------------------

    def translate(
        self,
        sentences: Sequence[str],
        *,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        length_penalty_type: str | None = None,
        max_length_a: float | None = None,
        max_length_b: int | None = _UNSET,
        max_new_tokens: int | None = None,
        exact_max_length: bool = True,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        patience: float = 1.0,
        return_tokens: bool = False,
    ) -> list[str] | list[list[str]]:
        """Translate `sentences` (plain text); one single-line string per sentence, in input order.

        Options have the names and meanings of `vaswani_hf.generation.translate` / `generate()`; None (or unset
        `max_length_b`) keeps the exported model's generation config (the paper's: beam 4, GNMT alpha 0.6,
        input length + 50). Empty or whitespace-only sentences give "" without being decoded; others are stripped.

        Args:
            num_beams: beam size, 1 = greedy.
            length_penalty: alpha.
            length_penalty_type: "gnmt" (paper), "hf" (|Y|^alpha) or "ctranslate2" (CTranslate2's own ranking).
            max_length_a, max_length_b: per-sentence limit floor(a * source_length + b) tokens, </s> included;
                `max_length_b=None` turns it off (then `max_new_tokens` is required).
            max_new_tokens: global cap on generated tokens (</s> included).
            exact_max_length: group sentences by their limit so the per-sentence rule is exact (module docstring).
            batch_size: examples per CTranslate2 batch (default 32); `max_tokens` instead batches by tokens.
            patience: CTranslate2's beam patience (search stops after num_beams * patience finished hypotheses).
            return_tokens: return output token strings (`</s>` excluded) instead of text.
        """
        if isinstance(sentences, str):
            raise TypeError("translate: `sentences` must be a sequence of strings, not a single string")
        g = self.generation_defaults
        num_beams = g["num_beams"] if num_beams is None else num_beams
        alpha = g["length_penalty"] if length_penalty is None else length_penalty
        penalty_type = g["length_penalty_type"] if length_penalty_type is None else length_penalty_type
        a = g["max_length_a"] if max_length_a is None else max_length_a
        b = g["max_length_b"] if max_length_b is _UNSET else max_length_b
        if penalty_type not in LENGTH_PENALTY_TYPES:
            raise ValueError(f"length_penalty_type must be one of {LENGTH_PENALTY_TYPES}, got {penalty_type!r}")
        if num_beams < 1:
            raise ValueError(f"num_beams must be >= 1, got {num_beams}")
        if b is None and max_new_tokens is None:
            raise ValueError("max_length_b=None turns the per-sentence limit off: give max_new_tokens as the limit")

        sentences = list(sentences)
        todo = [i for i, sentence in enumerate(sentences) if sentence.strip()]
        sources = self.encode([sentences[i].strip() for i in todo])
        # Per sentence: at most `limit` tokens, </s> included. Our generate() forces </s> as the limit-th token
        # (the rule) or stops after max_new_tokens (a global cap), so CTranslate2 may produce limit - 1 free tokens.
        steps, forced_eos = [], []
        for src in sources:
            self._check_source_length(len(src))
            rule = int(a * len(src) + b) if b is not None else None
            rule_steps = max(rule, 1) - 1 if rule is not None else None
            cap = min(x for x in (rule_steps, max_new_tokens) if x is not None)
            if self.max_positions is not None:
                cap = min(cap, self.max_positions)  # decoder input positions 0 .. cap - 1
            steps.append(cap)
            forced_eos.append(rule_steps is not None and cap == rule_steps)
        groups: dict[int, list[int]] = defaultdict(list)
        for k, cap in enumerate(steps):
            groups[cap if exact_max_length else max(steps)].append(k)

        batching = (dict(max_batch_size=max_tokens, batch_type="tokens") if max_tokens
                    else dict(max_batch_size=batch_size or DEFAULT_BATCH_SIZE, batch_type="examples"))
        hypotheses: list[list[str]] = [[] for _ in sources]
        for cap, members in groups.items():
            if cap <= 0:  # the rule leaves room for </s> only
                continue
            found = self._search([sources[k] for k in members], cap, num_beams, alpha, penalty_type, patience,
                                 [forced_eos[k] and exact_max_length for k in members], batching)
            for k, tokens in zip(members, found):
                hypotheses[k] = tokens

        outputs: list = [[] if return_tokens else "" for _ in sentences]
        for i, tokens in zip(todo, hypotheses):
            outputs[i] = tokens if return_tokens else self.decode(tokens)
        return outputs

    def _check_source_length(self, source_length: int) -> None:
        if self.max_positions is not None and source_length > self.max_positions:
            raise ValueError(
                f"a source sentence has {source_length} tokens but this CTranslate2 export has position encodings "
                f"for {self.max_positions} positions; re-export with a larger `max_positions`."
            )

    def _search(self, sources, cap, num_beams, alpha, penalty_type, patience, forced_eos, batching):
        eos = self.tokenizer.eos_token
        options = dict(
            beam_size=num_beams, patience=patience, max_decoding_length=cap, min_decoding_length=0,
            max_input_length=0,  # never truncate silently; lengths are checked against the table before
            **batching,
        )
        if num_beams == 1 or alpha == 0 or penalty_type == "ctranslate2":
            results = self.translator.translate_batch(sources, length_penalty=alpha, **options)
            return [result.hypotheses[0] for result in results]
        # CTranslate2 ranks finished hypotheses by score / L ** alpha, L counting </s> with return_end_token=True.
        # We undo that exactly (score * L ** alpha = log P(Y)) and re-rank the finished beam with our formula, where
        # |Y| counts </s>, also the </s> our generate() forces at the per-sentence limit (log-prob 0 there).
        results = self.translator.translate_batch(
            sources, length_penalty=alpha, return_end_token=True, return_scores=True, num_hypotheses=num_beams,
            **options,
        )
        best = []
        for result, forced in zip(results, forced_eos):
            ranked = []
            for tokens, score in zip(result.hypotheses, result.scores):
                length = max(len(tokens), 1)
                log_prob = score * length ** alpha
                ended = bool(tokens) and tokens[-1] == eos
                our_length = len(tokens) + (0 if ended or not forced else 1)
                penalty = (gnmt_length_penalty(our_length, alpha) if penalty_type == "gnmt"
                           else max(our_length, 1) ** alpha)
                ranked.append((log_prob / penalty, tokens[:-1] if ended else tokens))
            best.append(max(ranked, key=lambda item: item[0])[1])
        return best


def translate_ctranslate2(
    model_dir: str | os.PathLike,
    sentences: Sequence[str],
    *,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    length_penalty_type: str | None = None,
    max_length_a: float | None = None,
    max_length_b: int | None = _UNSET,
    max_new_tokens: int | None = None,
    exact_max_length: bool = True,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    device: str | None = "cpu",
    compute_type: str = "default",
    quantization: str | None = None,
    inter_threads: int = 1,
    intra_threads: int = 0,
) -> list[str]:
    """Translate with CTranslate2; one single-line string per sentence, in input order.

    `model_dir` is a folder written by `vaswani_hf.convert.to_ctranslate2` (has model.bin), or a saved Vaswani model
    folder, which is then exported to a temporary folder first (`quantization`: None = float32, "int8", ...).
    Decoding options have the names of `vaswani_hf.generation.translate`; None keeps the model's generation config
    (the paper's: beam 4, GNMT alpha 0.6, input length + 50). The module docstring explains how each maps onto
    CTranslate2 and where it differs. For repeated calls, build a `CTranslate2Translator` once.
    """
    import tempfile

    options = dict(num_beams=num_beams, length_penalty=length_penalty, length_penalty_type=length_penalty_type,
                   max_length_a=max_length_a, max_new_tokens=max_new_tokens, exact_max_length=exact_max_length,
                   batch_size=batch_size, max_tokens=max_tokens)
    if max_length_b is not _UNSET:
        options["max_length_b"] = max_length_b
    loader = dict(device=device, compute_type=compute_type, inter_threads=inter_threads,
                  intra_threads=intra_threads)
    if (Path(model_dir) / "model.bin").is_file():
        return CTranslate2Translator(model_dir, **loader).translate(sentences, **options)
    from .convert import to_ctranslate2

    with tempfile.TemporaryDirectory(prefix="vaswani_ct2_") as tmp:
        folder = to_ctranslate2(model_dir, Path(tmp) / "ct2", quantization=quantization)
        return CTranslate2Translator(folder, **loader).translate(sentences, **options)
