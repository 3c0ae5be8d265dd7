"""Train, wrap and load the Transformer's shared BPE vocabulary, one vocabulary for source and target together.

Vaswani et al. (2017), Section 5.1 "Training Data and Batching": "Sentences were encoded using byte-pair encoding
[3], which has a shared source-target vocabulary of about 37000 tokens" (EN-DE). One vocabulary for both sides is
what lets the model share one embedding matrix between the encoder, the decoder and the pre-softmax projection
(Section 3.4).

Everything here is built from the `tokenizers` library (training, normalisation, pre-tokenisation, post-processing,
decoding) and wrapped in a transformers `PreTrainedTokenizerFast` (an alias of `TokenizersBackend` in transformers 5),
so that `save_pretrained`, `AutoTokenizer.from_pretrained` and `tok(src, text_target=tgt)` work unchanged.

The design choices, and why:

* Byte-level BPE, not Metaspace. Byte-level BPE works on UTF-8 bytes mapped to 256 printable symbols, so every input
  string is representable: there is never an `<unk>`, and `decode(encode(x)) == x` holds by construction
  (tests/test_tokenization.py checks it on every raw Multi30k line). A Metaspace ("sentencepiece-style") BPE maps
  characters unseen in training to `<unk>`, which cannot be turned back into text, and WMT test sets do contain such
  characters; with `prepend_scheme="always"` it also silently drops a leading space (" a" decodes to "a").
  Byte-level's regex pre-tokeniser splits punctuation from words ("world." becomes "world" and "."), which the
  Metaspace splitter does not. The cost is that tokens are less readable (`Ġ` marks a space) and that a rare
  character costs 2 to 4 byte tokens. With an 8k vocabulary learned on Multi30k's training set, its validation set
  takes about 5% more tokens than with a Metaspace BPE of the same size.
* A word is tokenised the same way at the start of a line as inside it. GPT-2's byte-level set-up gives the first word
  of a line a different token ("Two") from the same word inside the line ("ĠTwo"). The normaliser therefore prepends
  one space (`Prepend(" ")`) and the decoder strips exactly one leading space (`Strip(" ", 1, 0)`), so the first word
  is tokenised like any other word and the round trip stays exact (a line that itself starts with a space keeps it).
* Unicode normalisation defaults to NFC, not NFKC. NFC only merges canonically equivalent sequences (for example "a"
  followed by a combining diaeresis becomes "ä"), which are the same text: it never changes what a reader sees, and it
  keeps the vocabulary from spending entries on two spellings of one character. NFKC (sentencepiece's default) also
  folds compatibility characters (NO-BREAK SPACE to a space, "ﬁ" to "fi", full-width forms, "½" to "1⁄2"). That helps
  with noisy web text but loses information, so `decode(encode(x)) != x` on such lines (45 of the 93,042 Multi30k
  lines contain U+00A0). It is available as an option (`normalization="NFKC"`).
* Lowercasing is off by default, because the paper's BLEU is cased; `lowercase=True` adds a `Lowercase` normaliser,
  which makes the round trip lossy.
* The special tokens and their ids are fixed, because the model's config relies on them: `<pad>`=0 (also the decoder's
  start token, tensor2tensor's zero start vector), `<s>`=1, `</s>`=2, `<unk>`=3. The post-processor appends `</s>` to
  every sequence (`"$A </s>"`) and prepends no `<s>`: the decoder starts from `<pad>`, and the encoder needs no
  begin-of-sentence token.
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

from .io import UsageError, check_tokenizer_file, iter_lines, read_json, write_json
from .io.models import check_tokenizer_configs
from .io.outputs import library_path
from .settings import MAX_TOKENS, settings_of

logger = logging.getLogger(__name__)

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# The order is the ids' order: the BPE trainer gives the special tokens their ids in list order, before any learned
# symbol.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)

DEFAULT_VOCAB_SIZE = 37000  # the size of the paper's shared EN-DE vocabulary (Section 5.1)
# DEFAULT_MODEL_MAX_LENGTH is the longest sequence (in tokens, `</s>` included) that the tokenizer reports as
# supported. The model's sinusoidal positions (Section 3.5) have no hard limit; 1024 is a generous bound for
# sentence-level translation (WMT14 EN-DE sentences are under 250 tokens after the usual length filtering), and it only
# drives transformers' truncation warnings.
DEFAULT_MODEL_MAX_LENGTH = 1024
# TOKENIZER_FOLDER names the kind of output folder vaswani-train-tokenizer writes. It is recorded in the folder's
# marker (vaswani_hf.io.outputs), so that `--overwrite` replaces only a folder this tool wrote.
TOKENIZER_FOLDER = "tokenizer folder"

_NORMALIZERS = {"NFC": normalizers.NFC, "NFKC": normalizers.NFKC, "NFD": normalizers.NFD, "NFKD": normalizers.NFKD}


@dataclass
class BpeSettings:
    """Declare once how the joint BPE is learned (Section 5.1): the recipe's tokenizer keys, the flags of
    vaswani-train-tokenizer and the arguments of `train_bpe_tokenizer` are these fields."""

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
    """Return an untrained byte-level BPE `tokenizers.Tokenizer` with this project's normaliser, pre-tokeniser and
    decoder (the module docstring says why each is chosen). `normalization` may be given in any case ("nfc" or
    "NFC")."""
    norm: list[normalizers.Normalizer] = []
    if normalization is not None:
        key = BPE_SETTINGS["normalization"].check(str(normalization).upper(), "build_bpe_tokenizer")
        norm.append(_NORMALIZERS[key]())
    if lowercase:
        norm.append(normalizers.Lowercase())
    # Prepend one space, so that the first word is tokenised like every other word; the decoder strips it again.
    norm.append(normalizers.Prepend(" "))

    tok = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    return tok


def _add_post_processor(tok: Tokenizer) -> None:
    # "$A </s>": every encoded sentence ends with EOS, source and target alike. The target's EOS is what the decoder
    # learns to emit to stop; the source's marks the end for the encoder, as in tensor2tensor and fairseq.
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
    except OSError:  # for example "File name too long", when the string is a sentence
        return False


def iter_training_text(corpus: Any, languages: Sequence[str] | None = None) -> Iterator[str]:
    """Yield the training sentences of `corpus`, source and target sides alike (one joint vocabulary).

    `corpus` may be a path or a list of paths to plain-text files (one sentence per line, for example `train.en` and
    `train.de`), a `datasets.Dataset` with a `translation` column (all its languages, or only `languages`), or any
    iterable of strings.
    """
    import datasets  # imported here, because training from plain files should not need `datasets` loaded

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
        # A list whose first item is a Path or an existing file is a list of files: a missing file later in the list
        # is then an error, not a sentence.
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
    """Train one BPE vocabulary on the source and target sides together (Section 5.1).

    Args:
        corpus: files (a path or a list of paths), an iterable of strings, or a `datasets.Dataset` with a
            `translation` column (see `iter_training_text`). Pass both sides, for example `[train.en, train.de]`.
        vocab_size: the final vocabulary size, the 4 special tokens and the 256 byte symbols included (the paper
            used about 37000 for EN-DE; a few thousand suit a small corpus such as Multi30k).
        min_frequency: a pair must occur at least this often to be merged; 2 avoids merges that only memorise one
            sentence.
        lowercase: lowercase before tokenising (off by default, because the paper reports cased BLEU).
        normalization: "NFC" (the default, lossless for a reader; see the module docstring), "NFKC", "NFD", "NFKD"
            or None.
        languages: with a `datasets.Dataset`, the languages to read (by default all of the `translation` column).
        model_max_length: the longest sequence the tokenizer reports, recorded in its saved config.
        save_dir: if given, the tokenizer is saved there with `save_pretrained` (a folder whose name is not UTF-8
            included).
        show_progress: whether to show the `tokenizers` trainer's progress bar.

    Returns:
        A `PreTrainedTokenizerFast` with `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3 that appends `</s>` to every sequence.
    """
    BPE_SETTINGS["vocab_size"].check(vocab_size, "train_bpe_tokenizer")
    tok = build_bpe_tokenizer(lowercase=lowercase, normalization=normalization)
    # All 256 byte symbols are always in the vocabulary: that is what guarantees that no text ever maps to <unk>.
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
        # The tokenizers library writes tokenizer.json, and takes only a UTF-8 path: a folder whose name is not UTF-8
        # is given to it by its descriptor's name (`library_path`).
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        with library_path(save_dir) as folder:
            hf_tok.save_pretrained(folder)
    return hf_tok


def declare_plain_tokenizer(folder: str | os.PathLike) -> None:
    """Name `PreTrainedTokenizerFast` as the tokenizer class in the folder's tokenizer_config.json. transformers 5
    saves "TokenizersBackend" there, a name transformers 4 does not know; both versions read tokenizer.json with the
    plain class, which needs no code of ours, so the folder loads under either."""
    path = Path(folder) / "tokenizer_config.json"
    if path.is_file():
        write_json(path, {**read_json(path), "tokenizer_class": "PreTrainedTokenizerFast"})


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `train_bpe_tokenizer` (a folder or a Hub id), checking its tokenizer.json and the
    fixed special ids. A problem raises a UsageError that names the folder or the file."""
    folder = Path(path)
    if folder.exists():
        if not folder.is_dir():
            raise UsageError(f"tokenizer {folder} is a file; give the folder that holds tokenizer.json")
        # This checks the file's declared shape and then lets the tokenizers library read it, because valid JSON is
        # not yet a tokenizer.
        check_tokenizer_file(folder / "tokenizer.json", what=f"tokenizer.json of tokenizer folder {folder}")
        # tokenizer_config.json and special_tokens_map.json are read by transformers too, so they are checked first.
        check_tokenizer_configs(folder)
    tok = AutoTokenizer.from_pretrained(str(path))
    got = (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id)
    if got != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
        raise UsageError(
            f"tokenizer at {path} has special ids pad/bos/eos/unk={got}, expected {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}; "
            "train it with vaswani-train-tokenizer"
        )
    return tok
