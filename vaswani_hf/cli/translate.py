"""Translate a text file (one sentence per line) with a saved Transformer model folder.

    vaswani-translate input.en --model runs/base/hub > output.de
    cat input.en | vaswani-translate --model DIR --num_beams 1 --output out.de

Decoding defaults come from the model's generation config: the paper's Section 6.1 settings (beam 4, GNMT length
penalty alpha = 0.6, maximum output length = input length + 50, early termination). Options override them.

Line rule: the output has exactly one line per input line, in the same order. Input is read as every tool of the
package reads text (vaswani_hf.io: strict UTF-8, byte-order mark dropped, CRLF/CR line ends accepted). A line that is
empty or only whitespace gives an empty output line without being decoded; other lines are stripped of surrounding
whitespace; a translation never contains a line break. --output is written only when everything is translated,
atomically, and an existing file is replaced only with --overwrite. Bad input (missing or non-UTF-8 file, a folder,
a broken model folder, an existing --output) is reported in one line with exit status 2 before the model is loaded;
a line the model cannot take (longer than its learned positions, or than a CTranslate2 export's position table, or
than --max_input_tokens) is named as file:line before anything is decoded, and a line of more characters than that
limit allows (64 per token: vaswani_hf.translation_frontend) before it is even tokenised. "-" is standard input,
/dev/null an empty input.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from .. import io
from ..constraints import MAX_POSITIONS, MAX_SENTENCES, MAX_TOKENS, device, number, setting_flag
from ..generation_vaswani import GENERATION_SETTINGS
from ..translation_frontend import MAX_SOURCE_TOKENS
from .command import FOLDER, MODEL_FOLDER, OUTPUT_FILE_OR_STDOUT, TEXT_OR_STDIN, Command, Paths, Use, run_command
from .contract import ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-translate", description=__doc__)
    parser.add_argument("input", nargs="?", default=io.STDIO,
                        help="text file to translate, one sentence per line (default: '-', standard input)")
    parser.add_argument("--model", required=True, metavar="DIR", help="model folder (save_pretrained: model + "
                        "tokenizer), or a CTranslate2 folder with --engine ctranslate2")
    parser.add_argument("--output", "-o", metavar="FILE", help="write translations here (default: standard output)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument("--engine", default="pytorch", choices=("pytorch", "ctranslate2"), help="decoding backend")
    batching = parser.add_argument_group("batching")
    batching.add_argument("--max_tokens", type=number(int, min=1, max=MAX_TOKENS), default=None,
                          help="padded source tokens per batch (default: 4096, vaswani_hf.data.TRANSLATE_MAX_TOKENS)")
    batching.add_argument("--batch_size", type=number(int, min=1, max=MAX_SENTENCES), default=None,
                          help="at most this many sentences per batch")
    batching.add_argument("--max_input_tokens", type=number(int, min=1, max=MAX_POSITIONS),
                          default=MAX_SOURCE_TOKENS,
                          help=f"a line with more source tokens (</s> included) is refused, naming it, before "
                               f"anything is decoded (default {MAX_SOURCE_TOKENS})")
    decoding = parser.add_argument_group("decoding (default: the model's generation_config)")
    for name in ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_new_tokens"):
        decoding.add_argument(f"--{name}", default=None, **setting_flag(GENERATION_SETTINGS[name]))
    decoding.add_argument("--max_length_b", default=argparse.SUPPRESS,
                          **setting_flag(GENERATION_SETTINGS["max_length_b"], none="none"))
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--device", type=device, default=None,
                          help="cpu, cuda, cuda:1, mps, ... (default: accelerator if any)")
    hardware.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                          help="compute dtype: bf16/fp16 run under torch.autocast (for GPUs); weights stay fp32")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar on stderr")
    return parser


def decoding_options(args) -> dict:
    """The command-line decoding options that were set (unset ones keep the model's generation config)."""
    names = ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_new_tokens")
    options = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if hasattr(args, "max_length_b"):  # given, possibly as 'none' (= no per-sentence limit)
        options["max_length_b"] = args.max_length_b
    return options


def translate_with_pytorch(args, lines: list[str]) -> list[str]:
    from ..data.batching import TRANSLATE_MAX_TOKENS
    from ..inference import load_for_inference, translate

    model, tokenizer = load_for_inference(args.model, device=args.device)
    return translate(model, tokenizer, lines, max_tokens=args.max_tokens or TRANSLATE_MAX_TOKENS,
                     batch_size=args.batch_size, dtype=args.dtype, progress=not args.no_progress,
                     max_input_tokens=args.max_input_tokens, **decoding_options(args))


def translate_with_ctranslate2(args, lines: list[str]) -> list[str]:
    """CTranslate2 (`pip install vaswani_hf[ct2]`): a folder from vaswani-export-ctranslate2, or a model folder,
    exported on the fly. Differences from `generate()` are documented in vaswani_hf/export/ctranslate2.py."""
    from ..export.ctranslate2 import translate_ctranslate2

    compute_type = {"fp32": "default", "bf16": "bfloat16", "fp16": "float16"}[args.dtype]
    return translate_ctranslate2(args.model, lines, batch_size=args.batch_size, max_tokens=args.max_tokens,
                                 device=args.device or "cpu", compute_type=compute_type,
                                 max_input_tokens=args.max_input_tokens, **decoding_options(args))


ENGINES = {"pytorch": translate_with_pytorch, "ctranslate2": translate_with_ctranslate2}


def _validate(args) -> None:
    if getattr(args, "max_length_b", 0) is None and args.max_new_tokens is None:
        raise io.UsageError("--max_length_b none turns the per-sentence limit off: give --max_new_tokens as the limit")


def _paths(args) -> Paths:
    """The input first (a folder or a device is named as such), the model folder (a CTranslate2 export is a folder
    of its own kind, checked when loaded), --output checked before any work."""
    model = MODEL_FOLDER if args.engine == "pytorch" else FOLDER
    return Paths(inputs=(Use("input", args.input, TEXT_OR_STDIN, what="input file", first=True),
                         Use("--model", args.model, model)),
                 outputs=(Use("--output", args.output, OUTPUT_FILE_OR_STDOUT),), overwrite=args.overwrite)


def _resolve(args, checked) -> tuple:
    return args, io.read_lines(args.input)


def _run(plan) -> int:
    args, lines = plan
    start = time.perf_counter()
    try:
        translations = ENGINES[args.engine](args, lines)
    except io.InputLineError as error:  # e.g. a line longer than the model's positions: named as file:line
        raise error.in_file(args.input) from error
    if len(translations) != len(lines):  # an engine bug must never silently misalign lines
        raise RuntimeError(f"engine {args.engine} returned {len(translations)} lines for {len(lines)} inputs")
    io.write_lines(args.output, translations, overwrite=args.overwrite, what="--output")
    if not args.no_progress:
        print(f"translated {len(lines)} lines in {time.perf_counter() - start:.1f}s with engine {args.engine}",
              file=sys.stderr)
    return 0


COMMAND = Command("translate", "vaswani-translate", build_parser, _run, paths=_paths, validate=_validate,
                  resolve=_resolve, invoked_name=True)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
