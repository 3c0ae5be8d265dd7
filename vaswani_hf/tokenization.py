"""Shared (joint source + target) BPE vocabulary for the Transformer.

Vaswani et al. (2017), Section 5.1 "Training Data and Batching": "Sentences were encoded using byte-pair encoding
[3], which has a shared source-target vocabulary of about 37000 tokens" (EN-DE). One vocabulary for both sides is
what lets the model share one embedding matrix between encoder, decoder and pre-softmax projection (Section 3.4).

Everything here is built from the `tokenizers` library (training, normalisation, pre-tokenisation, post-processing,
decoding) and wrapped in a transformers `PreTrainedTokenizerFast` (an alias of `TokenizersBackend` in transformers 5)
so that `save_pretrained` / `AutoTokenizer.from_pretrained` and `tok(src, text_target=tgt)` work unchanged.

Design choices (argued):

* Byte-level BPE, not Metaspace.  Byte-level BPE works on UTF-8 bytes mapped to 256 printable symbols, so *every*
  input string is representable: there is never an `<unk>`, and `decode(encode(x)) == x` holds by construction
  (measured: 100% of Multi30k raw lines, see tests/test_tokenization.py).  A Metaspace ("sentencepiece-style")
  BPE maps characters unseen in training to `<unk>`, which cannot be detokenised (WMT test sets do contain such
  characters), and with `prepend_scheme="always"` it silently drops a leading space (" a" decodes to "a").
  Byte-level's regex pre-tokeniser also splits punctuation from words ("world." -> "world" "."), which the
  Metaspace splitter does not.  Cost: tokens are less readable (`Ġ` marks a space) and rare characters cost 2-4
  byte tokens; Multi30k needs ~4% more tokens per sentence at 8k vocab.
* Word-initial tokens are consistent.  GPT-2's byte-level setup gives the first word of a line a different token
  ("Two") from the same word inside the line ("ĠTwo").  We prepend one space in the normaliser (`Prepend(" ")`)
  and strip exactly one leading space in the decoder (`Strip(" ", 1, 0)`), so the first word is tokenised like
  any other word and the round trip stays exact (a line that itself starts with a space keeps it).
* Unicode normalisation defaults to NFC, not NFKC.  NFC only merges canonically equivalent sequences
  (e.g. "a" + combining diaeresis -> "ä"), which are the same text, so it never changes what a reader sees and
  avoids wasting vocabulary on two spellings of one character.  NFKC (sentencepiece's default) also folds
  compatibility characters (NO-BREAK SPACE -> space, "ﬁ" -> "fi", full-width forms, "½" -> "1⁄2"): useful for
  noisy web text, but lossy, so decode(encode(x)) != x on such lines (45 of 93042 Multi30k lines contain U+00A0).
  It is available as an option (`normalization="NFKC"`).
* Lowercasing is off by default (the paper's BLEU is cased); `lowercase=True` adds a `Lowercase` normaliser,
  which of course makes the round trip lossy.
* Special tokens and ids are fixed, because the model config relies on them: `<pad>`=0 (also the decoder start
  token, tensor2tensor-style zero start), `<s>`=1, `</s>`=2, `<unk>`=3.  The post-processor appends `</s>` to every
  sequence (`"$A </s>"`); no `<s>` is prepended (the decoder starts from `<pad>`, the encoder needs no BOS).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .io import UsageError, check_tokenizer_file, iter_lines
from .io.models import check_tokenizer_configs

logger = logging.getLogger(__name__)

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# Order == id: the BPE trainer assigns ids to special tokens in list order, before any learned symbol.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)

DEFAULT_VOCAB_SIZE = 37000  # paper, Section 5.1 (EN-DE shared vocabulary)
# Longest sequence (in tokens, `</s>` included) the tokenizer reports as supported.  The model uses sinusoidal
# positions (Section 3.5) and has no hard limit; 1024 is a generous bound for sentence-level MT (WMT14 EN-DE
# sentences are < 250 tokens after the usual length filtering) and only drives truncation warnings.
DEFAULT_MODEL_MAX_LENGTH = 1024
TOKENIZER_FOLDER = "tokenizer folder"  # the kind of output vaswani-train-tokenizer writes (vaswani_hf.io.outputs)

_NORMALIZERS = {"NFC": normalizers.NFC, "NFKC": normalizers.NFKC, "NFD": normalizers.NFD, "NFKD": normalizers.NFKD}

__all__ = [
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "SPECIAL_TOKENS",
    "build_bpe_tokenizer",
    "train_bpe_tokenizer",
    "wrap_tokenizer",
    "load_tokenizer",
    "iter_training_text",
]


def build_bpe_tokenizer(*, lowercase: bool = False, normalization: str | None = "NFC") -> Tokenizer:
    """An untrained byte-level BPE `tokenizers.Tokenizer` with this project's pipeline (see module docstring)."""
    norm: list[normalizers.Normalizer] = []
    if normalization is not None:
        key = normalization.upper()
        if key not in _NORMALIZERS:
            raise ValueError(f"normalization={normalization!r}: expected one of {sorted(_NORMALIZERS)} or None")
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
    # "$A </s>": every encoded sentence ends with EOS, source and target alike (target EOS is what the decoder learns
    # to emit to stop; source EOS marks the end for the encoder, as in tensor2tensor and fairseq).
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
    """Yield the training sentences of `corpus`, source and target sides alike (joint vocabulary).

    `corpus` may be: a path or a list of paths to plain-text files (one sentence per line, e.g. `train.en` and
    `train.de`); a `datasets.Dataset` with a `translation` column (all languages, or only `languages`); or any
    iterable of strings.
    """
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
        # A list whose first item is a Path or an existing file is a list of files (a missing one is then an error,
        # not a sentence).
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
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD_TOKEN, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN,
                                   unk_token=UNK_TOKEN, model_max_length=model_max_length, padding_side="right",
                                   clean_up_tokenization_spaces=False)


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
    """Train one BPE vocabulary on the source and target sides together (paper, Section 5.1).

    Args:
        corpus: files (path or list of paths), an iterable of strings, or a `datasets.Dataset` with a
            `translation` column; see `iter_training_text`.  Pass both sides (e.g. `[train.en, train.de]`).
        vocab_size: final vocabulary size, the 4 special tokens and the 256 byte symbols included
            (paper: ~37000 for EN-DE; use a few thousand for small corpora such as Multi30k).
        min_frequency: a pair must occur at least this often to be merged (2 avoids merges that only
            memorise one sentence).
        lowercase: lowercase before tokenising (off: the paper reports cased BLEU).
        normalization: "NFC" (default, lossless for reading; see module docstring), "NFKC", "NFD", "NFKD" or None.
        languages: with a `datasets.Dataset`, the languages to read (default: all in the `translation` column).
        model_max_length: recorded in the saved tokenizer config.
        save_dir: if given, `save_pretrained` there.

    Returns:
        A `PreTrainedTokenizerFast` with `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3 that appends `</s>`.
    """
    if vocab_size <= len(SPECIAL_TOKENS) + 256:
        raise ValueError(f"vocab_size={vocab_size} must exceed the 4 special tokens + 256 byte symbols")
    tok = build_bpe_tokenizer(lowercase=lowercase, normalization=normalization)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        # All 256 byte symbols are always in the vocabulary: that is what guarantees no <unk> at test time.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    t0 = time.perf_counter()
    # `train_from_iterator` streams; the Rust trainer shows its own progress bar.
    tok.train_from_iterator(iter_training_text(corpus, languages), trainer=trainer)
    _add_post_processor(tok)
    logger.info("trained BPE: %d tokens in %.1fs", tok.get_vocab_size(), time.perf_counter() - t0)
    hf_tok = wrap_tokenizer(tok, model_max_length=model_max_length)
    if save_dir is not None:
        hf_tok.save_pretrained(save_dir)
    return hf_tok


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
