"""Train the shared source+target BPE tokenizer (paper, Section 5.1) and save it for `AutoTokenizer.from_pretrained`.

    # the bundled EN-DE sample corpus
    vaswani-train-tokenizer --sample --vocab_size 8000 --out_dir outputs/tokenizer
    # Moses-style files, both sides into one vocabulary
    vaswani-train-tokenizer --files data/train.en data/train.de --vocab_size 37000 --out_dir outputs/tok
    # any format vaswani_hf.data.load_parallel reads (prefix, .tsv with a header line, .jsonl, Hub name)
    vaswani-train-tokenizer --corpus data/train --src_lang en --tgt_lang de --out_dir outputs/tok

Text files are read as every tool of the package reads them: they must be strict UTF-8 (a bad byte is named by
file:line), a byte-order mark is dropped, and CRLF and CR line ends are accepted; "-" is standard input, and /dev/null is an empty file. --out_dir must be absent or empty
unless --overwrite is given. It appears whole when training is done, and Ctrl-C, SIGTERM or SIGHUP leave nothing
behind.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from .. import io
from ..data.corpora import load_parallel, load_sample_corpus
from ..io.progress import library_bars
from ..settings import flag
from ..tokenization import BPE_SETTINGS, TOKENIZER_FOLDER, iter_training_text, train_bpe_tokenizer
from .command import TEXT_OR_STDIN, Command, Paths, Use, output_folder
from .contract import ArgumentParser
from .library_reports import HeldReports
from .surroundings import raise_if_stopped


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-train-tokenizer", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--files",
        nargs="+",
        type=Path,
        help=f"plain-text files, one sentence per line (all sides); {io.STDIO} is standard input",
    )
    source.add_argument("--corpus", help="anything vaswani_hf.data.load_parallel reads (needs --src_lang/--tgt_lang)")
    source.add_argument("--sample", action="store_true", help="the bundled EN-DE sample corpus (train split)")
    parser.add_argument("--src_lang", default="en", help="source language of --corpus or --sample")
    parser.add_argument("--tgt_lang", default="de", help="target language of --corpus or --sample")
    parser.add_argument(
        "--hub_config", default=None, help="config name for a Hub dataset (e.g. de-en for wmt14; default: none)"
    )
    parser.add_argument("--split", default="train", help="split of --corpus read from a Hub dataset")
    for name in ("vocab_size", "min_frequency", "model_max_length"):
        parser.add_argument(f"--{name}", **flag(BPE_SETTINGS[name]))
    parser.add_argument("--lowercase", action="store_true", help=BPE_SETTINGS["lowercase"].help)
    parser.add_argument("--normalization", **flag(BPE_SETTINGS["normalization"], none="NONE", type=str.upper))
    parser.add_argument("--out_dir", type=Path, required=True, help="the tokenizer folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing, non-empty --out_dir")
    return parser


def _corpus(args):
    """Return the training text: the --files paths, or a parallel corpus (--sample or --corpus) loaded in full.

    The files were checked by the runner and are streamed while training; loading a corpus checks every line.
    """
    if args.files:
        return args.files
    if args.sample:
        return load_sample_corpus("train", args.src_lang, args.tgt_lang)
    return load_parallel(args.corpus, args.src_lang, args.tgt_lang, config=args.hub_config, split=args.split)


def _source(args) -> str:
    """Return the training text as the command line named it, for error messages."""
    if args.files:
        return "--files " + ", ".join(map(str, args.files))
    return f"--corpus {args.corpus}" if args.corpus else "--sample"


def _counted(lines, source: str):
    """Yield `lines` unchanged, and raise a UsageError at the end if none of them held any text.

    The tokenizers library pulls the lines from its own threads, where Python runs no signal handler, so this
    generator stops on SIGTERM or SIGHUP itself (`raise_if_stopped`).
    """
    count = non_empty = 0
    for count, line in enumerate(lines, 1):
        non_empty += bool(line.strip())
        if count % 1024 == 0:
            raise_if_stopped()
        yield line
    if non_empty == 0:
        raise io.UsageError(f"{source}: no text to learn from ({count} lines, all empty); give the training corpus")


def _paths(args) -> Paths:
    """Declare the tool's paths: --files, --corpus and --out_dir.

    In --files, "-" is standard input, as for every tool that reads text. --corpus is checked when it is loaded.
    """
    inputs = [
        Use(f"--files ({i + 1})", path, TEXT_OR_STDIN, what="--files") for i, path in enumerate(args.files or [])
    ]
    inputs.append(Use("--corpus", args.corpus))
    return Paths(
        inputs=inputs,
        outputs=(Use("--out_dir", args.out_dir, output_folder(TOKENIZER_FOLDER)),),
        overwrite=args.overwrite,
    )


def _run(args) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    languages = None if args.files else [args.src_lang, args.tgt_lang]
    # The corpus loader's warnings (about empty sides, for example) are shown only once the corpus is accepted, so
    # that a refused corpus is one line on stderr.
    with HeldReports(("vaswani_hf.data",), hold_warnings=False):
        corpus = _corpus(args)
        # A loaded corpus is checked now; files are streamed, and checked when they end, in _counted.
        if not args.files and not any(line.strip() for line in iter_training_text(corpus, languages)):
            raise io.UsageError(
                f"{_source(args)}: no text to learn from ({len(corpus)} pairs, all empty); give the training corpus"
            )
    lines = _counted(iter_training_text(corpus, languages), _source(args))
    started = time.perf_counter()
    with io.atomic_output_dir(args.out_dir, kind=TOKENIZER_FOLDER, overwrite=args.overwrite) as tmp:
        tok = train_bpe_tokenizer(
            lines,
            vocab_size=args.vocab_size,
            min_frequency=args.min_frequency,
            lowercase=args.lowercase,
            normalization=None if args.normalization == "NONE" else args.normalization,
            model_max_length=args.model_max_length,
            save_dir=tmp,
            show_progress=library_bars(),
        )
    print(
        json.dumps(
            {"out_dir": str(args.out_dir), "vocab_size": len(tok), "seconds": round(time.perf_counter() - started, 2)}
        )
    )


COMMAND = Command("train_tokenizer", "vaswani-train-tokenizer", build_parser, _run, paths=_paths, invoked_name=True)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
