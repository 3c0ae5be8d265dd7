r"""Compute translation quality metrics for the Transformer (Vaswani et al., 2017), each clearly labelled
(`DESCRIPTIONS`).

The scores :func:`compute_all` reports:

``sacrebleu``
    sacreBLEU's corpus BLEU on detokenized text (by default with the tokenizer 13a), reported with its signature
    (Post, 2018). This is the number that is comparable across papers and toolkits.
``chrf``
    chrF (the character n-gram F-score, with beta=2), computed by sacreBLEU and reported with its signature.
``bleu_tok_compound_split``
    The paper's tokenized BLEU. Section 6.1 reports newstest2014 EN-DE BLEU as computed by tensor2tensor's
    ``utils/get_ende_bleu.sh``: Moses ``tokenizer.perl -l de`` (here its port ``sacremoses``, after
    replace-unicode-punctuation), the compound splitting ``s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g`` on hypothesis
    and reference, then ``multi-bleu.perl`` (case-sensitive BLEU on whitespace tokens, no smoothing). The
    splitting inflates it, so it is comparable only with numbers computed the same way, such as the 27.3 and
    28.4 of the paper's Table 2.
``bleu_tok_none``
    BLEU on the whitespace tokens as given (sacreBLEU ``tokenize="none"``), for references that are already
    tokenized (and lowercased), such as Multi30k's tok files; this is the kind of number fairseq reports.

The computations live in ``evaluate`` metric modules shipped in ``vaswani_hf/metrics/<name>/<name>.py`` and loaded by
path with :func:`load_metric`, which needs no network (``evaluate.load`` of a Hub name fails offline). The same modules
back :func:`make_compute_metrics` for ``Seq2SeqTrainer``, so that the scores during training and the final scores come
from the same code.
"""

from __future__ import annotations

from pathlib import Path

import evaluate
import numpy as np

from ..io import UsageError
from . import check_sacrebleu_tokenizer

METRICS_DIR = Path(__file__).resolve().parent  # the metric scripts' folders sit beside this module
METRIC_NAMES = ("sacrebleu_local", "chrf_local", "tok_bleu")

DESCRIPTIONS = {
    "sacrebleu": "sacreBLEU corpus BLEU on detokenized text (the comparable number)",
    "chrf": "chrF via sacreBLEU, character n-gram F-score (beta=2)",
    "bleu_tok_compound_split": (
        "paper-style tokenized BLEU (Vaswani et al. 2017, sec. 6.1; t2t get_ende_bleu.sh): Moses tokenization "
        "(sacremoses) + ##AT##-##AT## compound splitting + multi-bleu-style BLEU, case-sensitive"
    ),
    "bleu_tok_none": "BLEU on whitespace tokens as given (sacreBLEU tokenize=none), for pre-tokenized references",
}


def load_metric(name: str, **kwargs) -> evaluate.EvaluationModule:
    """Load one of the package's metric modules with ``evaluate.load`` by its path, which works offline, and return it.

    ``name`` is one of ``METRIC_NAMES`` (``"sacrebleu_local"``, ``"chrf_local"``, ``"tok_bleu"``). Keyword arguments go
    to ``evaluate.load``; ``keep_in_memory`` defaults to True, so that no cache files are written (pass False for
    distributed use).
    """
    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; available: {', '.join(METRIC_NAMES)}")
    kwargs.setdefault("keep_in_memory", True)
    return evaluate.load(str(METRICS_DIR / name), **kwargs)


def check_line_counts(hypotheses: tuple[str, list], references: list[tuple[str, list]]) -> None:
    """Raise a ``UsageError`` naming both sides if a reference has another number of lines than the hypotheses; each
    side is given as (name, lines)."""
    hyp_name, hyp_lines = hypotheses
    for ref_name, ref_lines in references:
        if len(ref_lines) != len(hyp_lines):
            raise UsageError(
                f"line count mismatch: {hyp_name} has {len(hyp_lines)} lines but {ref_name} has {len(ref_lines)} "
                "lines; a reference file has one line per segment of the hypotheses"
            )


def _reference_streams(references) -> list[list[str]]:
    """Return the references as a list of streams, given one reference stream (a list of str) or several (a list of
    lists, sacreBLEU's layout). A string or an empty list raises a ValueError."""
    if isinstance(references, (str, bytes)) or not len(references):
        raise ValueError("references must be a non-empty list of strings or a list of reference streams")
    if isinstance(references[0], str):
        return [list(references)]
    return [list(stream) for stream in references]


def compute_all(
    hypotheses: list[str],
    references: list[str] | list[list[str]],
    target_lang: str = "de",
    tokenize: str = "13a",
    lowercase: bool = False,
) -> dict:
    """Compute every score with its signature through the package's ``evaluate`` modules, and return them.

    Args:
        hypotheses: one detokenized translation per segment.
        references: one reference per segment (a list of str), or several reference streams (a list of such lists,
            each as long as ``hypotheses``, as in ``sacrebleu.corpus_bleu``).
        target_lang: the language of the Moses tokenizer of the paper-style BLEU.
        tokenize: the sacreBLEU tokenizer of ``sacrebleu`` (default "13a").
        lowercase: whether ``sacrebleu``, ``chrf`` and ``bleu_tok_none`` ignore case; the paper-style BLEU stays
            case-sensitive, as in the paper.

    Returns:
        ``{name: {"score", "signature", "description", ...details}}`` for the names ``sacrebleu``, ``chrf``,
        ``bleu_tok_compound_split`` and ``bleu_tok_none``.

    Raises:
        UsageError: a reference stream has another number of lines than the hypotheses, or the packages of the
            sacreBLEU tokenizer ``tokenize`` are not installed (``metrics.check_sacrebleu_tokenizer``).
        ValueError: there are no segments to score, or no references.
    """
    check_sacrebleu_tokenizer(tokenize, "tokenize")
    hypotheses = list(hypotheses)
    streams = _reference_streams(references)
    check_line_counts(("hypotheses", hypotheses), [(f"references[{i}]", stream) for i, stream in enumerate(streams)])
    if not hypotheses:
        raise ValueError("no segments to score")
    per_segment = [list(refs) for refs in zip(*streams)]

    sacrebleu_metric = load_metric("sacrebleu_local")
    chrf_metric = load_metric("chrf_local")
    tok_bleu_metric = load_metric("tok_bleu")
    scores = {
        "sacrebleu": sacrebleu_metric.compute(
            predictions=hypotheses, references=per_segment, tokenize=tokenize, lowercase=lowercase
        ),
        "chrf": chrf_metric.compute(predictions=hypotheses, references=per_segment, lowercase=lowercase),
        "bleu_tok_compound_split": tok_bleu_metric.compute(
            predictions=hypotheses, references=per_segment, lang=target_lang
        ),
        "bleu_tok_none": sacrebleu_metric.compute(
            predictions=hypotheses, references=per_segment, tokenize="none", lowercase=lowercase, force=True
        ),
    }
    for name, result in scores.items():
        result["description"] = DESCRIPTIONS[name]
    return scores


def format_table(scores: dict) -> str:
    """Return a readable table of :func:`compute_all`'s result: each score's name, value and signature, then what each
    score is."""
    width = max(len(name) for name in scores)
    lines = [f"{'metric':<{width}}  {'score':>6}  signature", "-" * (width + 2 + 6 + 2 + 60)]
    for name, result in scores.items():
        lines.append(f"{name:<{width}}  {result['score']:>6.2f}  {result.get('signature', '')}")
    lines.append("")
    for name, result in scores.items():
        if result.get("description"):
            lines.append(f"{name}: {result['description']}")
    return "\n".join(lines)


class TranslationMetrics:
    """Compute the metrics of ``Seq2SeqTrainer(predict_with_generate=True)``, as its ``compute_metrics``: sacreBLEU,
    chrF and the mean output length.

    It decodes the generated ids and the labels (the label positions the collator set to -100, and any -100 in the
    predictions, become the pad id first), strips special tokens and surrounding whitespace, and scores with the
    package's ``sacrebleu_local`` (tokenizer ``tokenize``, default 13a) and ``chrf_local`` modules. It returns
    ``{"bleu", "chrf", "gen_len"}``, where ``gen_len`` is the mean number of non-pad generated tokens. The sacreBLEU
    signatures of the last computation are kept in ``signatures``, because the Trainer's metrics are numbers only and a
    model card must name exactly how its scores were computed.
    """

    def __init__(self, tokenizer, tokenize: str = "13a"):
        # Checked when the Trainer is built, so that a missing package is not found at the first validation.
        self.tokenizer, self.tokenize = tokenizer, check_sacrebleu_tokenizer(tokenize, "tokenize")
        self.bleu_metric, self.chrf_metric = load_metric("sacrebleu_local"), load_metric("chrf_local")
        self.signatures: dict[str, str] = {}

    def __call__(self, eval_prediction) -> dict[str, float]:
        pad_id = self.tokenizer.pad_token_id
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(np.asarray(predictions) != -100, predictions, pad_id)
        labels = np.where(np.asarray(labels) != -100, labels, pad_id)
        decode = self.tokenizer.batch_decode
        hypotheses = [t.strip() for t in decode(predictions, skip_special_tokens=True)]
        references = [t.strip() for t in decode(labels, skip_special_tokens=True)]
        bleu = self.bleu_metric.compute(predictions=hypotheses, references=references, tokenize=self.tokenize)
        chrf = self.chrf_metric.compute(predictions=hypotheses, references=references)
        self.signatures = {"bleu": bleu["signature"], "chrf": chrf["signature"]}
        gen_len = float(np.mean(np.count_nonzero(predictions != pad_id, axis=-1))) if len(predictions) else 0.0
        return {"bleu": bleu["score"], "chrf": chrf["score"], "gen_len": gen_len}


def make_compute_metrics(tokenizer, tokenize: str = "13a") -> TranslationMetrics:
    """Return the Trainer's ``compute_metrics``, a `TranslationMetrics` that scores with sacreBLEU's tokenizer
    `tokenize`."""
    return TranslationMetrics(tokenizer, tokenize)
