"""Shared (joint source + target) BPE vocabulary, Section 5.1: "byte-pair encoding [3], which has a shared
source-target vocabulary of about 37000 tokens"; one vocabulary lets encoder, decoder and pre-softmax projection share
one embedding matrix (Section 3.4). Built with `tokenizers`, wrapped in a `PreTrainedTokenizerFast`. Choices:

* Byte-level BPE, not Metaspace: every string is representable (no `<unk>`, WMT test sets have characters unseen in
  training) and `decode(encode(x)) == x`; the cost is 2-4 tokens for a rare character.
* The normaliser prepends one space and the decoder strips exactly one, so a line's first word is tokenised like any
  other and the round trip stays exact.
* NFC by default (lossless); NFKC (lossy: folds NO-BREAK SPACE, "ﬁ", "½") and `lowercase=True` are options (the
  paper's BLEU is cased).
* Fixed special ids the config relies on: `<pad>`=0 (also the decoder start, tensor2tensor's zero start), `<s>`=1,
  `</s>`=2, `<unk>`=3. Every sequence gets `</s>` appended, no `<s>`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .constraints import MAX_TOKENS
from .io import UsageError, check_tokenizer_file, iter_lines, read_json, write_json
from .io.models import check_tokenizer_configs
from .settings import settings_of

logger = logging.getLogger(__name__)

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# Order == id: the BPE trainer assigns ids to special tokens in list order, before any learned symbol.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)

DEFAULT_VOCAB_SIZE = 37000  # paper, Section 5.1 (EN-DE shared vocabulary)
# Longest sequence the tokenizer reports (sinusoidal positions, Section 3.5, have no limit): truncation warnings only
DEFAULT_MODEL_MAX_LENGTH = 1024
TOKENIZER_FOLDER = "tokenizer folder"  # the kind of output vaswani-train-tokenizer writes (vaswani_hf.io.outputs)

_NORMALIZERS = {"NFC": normalizers.NFC, "NFKC": normalizers.NFKC, "NFD": normalizers.NFD, "NFKD": normalizers.NFKD}


@dataclass
class BpeSettings:
    """How the joint BPE is learned (Section 5.1), declared once: the recipe's tokenizer keys, the flags of
    vaswani-train-tokenizer and `train_bpe_tokenizer`'s arguments are these."""

    vocab_size: int = field(
        default=DEFAULT_VOCAB_SIZE,
        metadata={
            "help": "joint BPE vocabulary size (paper: ~37000 EN-DE, 32000 EN-FR); more than the 4 special tokens + "
            "256 byte symbols",
            "min": len(SPECIAL_TOKENS) + 257,
            "max": 2**24,
        },
    )
    min_frequency: int = field(
        default=2, metadata={"help": "minimum pair frequency for a BPE merge", "min": 0, "max": 10**12}
    )
    lowercase: bool = field(default=False, metadata={"help": "lowercase in the tokenizer (the paper's BLEU is cased)"})
    normalization: str | None = field(
        default="NFC",
        metadata={
            "help": "Unicode normalisation: NFC (lossless), NFKC (lossy), NFD, NFKD; None (NONE on the command line): "
            "none",
            "choices": tuple(_NORMALIZERS),
        },
    )
    model_max_length: int = field(
        default=DEFAULT_MODEL_MAX_LENGTH,
        metadata={
            "help": "the longest sequence the tokenizer reports (its truncation warnings; no limit of the model's)",
            "min": 1,
            "max": MAX_TOKENS,
        },
    )


BPE_SETTINGS = settings_of(BpeSettings)


def build_bpe_tokenizer(*, lowercase: bool = False, normalization: str | None = "NFC") -> Tokenizer:
    """An untrained byte-level BPE `tokenizers.Tokenizer` with this project's pipeline (see module docstring);
    `normalization` in any case."""
    norm: list[normalizers.Normalizer] = []
    if normalization is not None:
        key = BPE_SETTINGS["normalization"].check(str(normalization).upper(), "build_bpe_tokenizer")
        norm.append(_NORMALIZERS[key]())
    if lowercase:
        norm.append(normalizers.Lowercase())
    norm.append(normalizers.Prepend(" "))  # first word tokenised like every other word (undone by the decoder)

    tok = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    return tok


def _add_post_processor(tok: Tokenizer) -> None:
    # "$A </s>": source and target alike end with EOS, as in tensor2tensor and fairseq
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, EOS_ID)]
    )


def _looks_like_file(x: Any) -> bool:
    if isinstance(x, os.PathLike):
        return True
    if not isinstance(x, str) or "\n" in x or len(x) > 4096:
        return False
    try:
        return Path(x).is_file()
    except OSError:  # e.g. "File name too long" for a sentence
        return False


def iter_training_text(corpus: Any, languages: Sequence[str] | None = None) -> Iterator[str]:
    """The sentences of `corpus`, both sides alike: path(s) of line files, a `datasets.Dataset` with a `translation`
    column (`languages` or all), or any iterable of strings."""
    import datasets  # local import: the tokenizer module should not require `datasets` for plain files

    if isinstance(corpus, (str, os.PathLike)):
        yield from iter_lines(corpus, what="tokenizer training file")
    elif isinstance(corpus, datasets.Dataset):
        if "translation" not in corpus.column_names:
            raise ValueError(f"dataset has no 'translation' column (columns: {corpus.column_names})")
        for batch in corpus.select_columns(["translation"]).iter(batch_size=1000):
            for pair in batch["translation"]:
                langs = languages or list(pair)
                for lang in langs:
                    if lang not in pair:
                        raise ValueError(f"language {lang!r} not in the dataset (has {sorted(pair)})")
                    yield pair[lang]
    elif isinstance(corpus, (list, tuple)) and corpus and _looks_like_file(corpus[0]):
        # a list whose first item is a Path or an existing file is a list of files (a missing one: an error)
        for p in corpus:
            yield from iter_lines(p, what="tokenizer training file")
    elif isinstance(corpus, Iterable):
        for x in corpus:
            if not isinstance(x, str):
                raise TypeError(f"expected strings in the training iterable, got {type(x).__name__}")
            yield x
    else:
        raise TypeError(f"cannot read training text from a {type(corpus).__name__}")


def wrap_tokenizer(tok: Tokenizer, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH) -> PreTrainedTokenizerFast:
    """Wrap a trained `tokenizers.Tokenizer` as a transformers tokenizer with the fixed special tokens."""
    for token, idx in zip(SPECIAL_TOKENS, (PAD_ID, BOS_ID, EOS_ID, UNK_ID)):
        if tok.token_to_id(token) != idx:
            raise ValueError(f"special token {token!r} has id {tok.token_to_id(token)}, expected {idx}")
    # The ByteLevel decoder already restores exact spacing; the legacy clean-up would e.g. turn " ." into ".".
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def train_bpe_tokenizer(
    corpus: Any,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    min_frequency: int = 2,
    lowercase: bool = False,
    normalization: str | None = "NFC",
    languages: Sequence[str] | None = None,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    save_dir: str | os.PathLike | None = None,
    show_progress: bool = True,
) -> PreTrainedTokenizerFast:
    """Train one BPE vocabulary on both sides together (Section 5.1). `corpus`: see `iter_training_text`.
    `vocab_size` counts the 4 special tokens and 256 byte symbols (paper: ~37000 for EN-DE). `min_frequency` 2 avoids
    merges that memorise one sentence. `languages`: those to read from a `datasets.Dataset`. `save_dir`: saved there."""
    BPE_SETTINGS["vocab_size"].check(vocab_size, "train_bpe_tokenizer")
    tok = build_bpe_tokenizer(lowercase=lowercase, normalization=normalization)
    # All 256 byte symbols are always in the vocabulary: that is what guarantees no <unk> at test time.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=show_progress,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    t0 = time.perf_counter()
    tok.train_from_iterator(iter_training_text(corpus, languages), trainer=trainer)
    _add_post_processor(tok)
    logger.info("trained BPE: %d tokens in %.1fs", tok.get_vocab_size(), time.perf_counter() - t0)
    hf_tok = wrap_tokenizer(tok, model_max_length=model_max_length)
    if save_dir is not None:
        hf_tok.save_pretrained(save_dir)
    return hf_tok


def declare_plain_tokenizer(folder: str | os.PathLike) -> None:
    """Name `PreTrainedTokenizerFast` in the folder's tokenizer_config.json: transformers 5 saves "TokenizersBackend",
    a name transformers 4 does not know; both read tokenizer.json with the plain class, which needs no code of ours."""
    path = Path(folder) / "tokenizer_config.json"
    if path.is_file():
        write_json(path, {**read_json(path), "tokenizer_class": "PreTrainedTokenizerFast"})


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `train_bpe_tokenizer` (a folder or Hub id), checking its tokenizer.json and the fixed
    special ids. Raises UsageError naming the folder or file."""
    folder = Path(path)
    if folder.exists():
        if not folder.is_dir():
            raise UsageError(f"tokenizer {folder} is a file; give the folder that holds tokenizer.json")
        # its declared shape and the tokenizers library's own reading (valid JSON is not yet a tokenizer)
        check_tokenizer_file(folder / "tokenizer.json", what=f"tokenizer.json of tokenizer folder {folder}")
        check_tokenizer_configs(folder)  # tokenizer_config.json, special_tokens_map.json: transformers reads them
    tok = AutoTokenizer.from_pretrained(str(path))
    got = (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id)
    if got != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
        raise UsageError(
            f"tokenizer at {path} has special ids pad/bos/eos/unk={got}, expected {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}; "
            "train it with vaswani-train-tokenizer"
        )
    return tok
