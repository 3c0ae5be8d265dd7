#!/usr/bin/env python
"""Translate a text file (one sentence per line) with a saved Transformer model folder.

    python scripts/translate.py --model runs/base/final newstest2014.en > newstest2014.hyp.de
    cat input.en | python scripts/translate.py --model DIR --num_beams 1 --output out.de

Decoding defaults come from the model's generation config: the paper's Section 6.1 settings (beam 4, GNMT length
penalty alpha = 0.6, maximum output length = input length + 50, early termination). Options override them.

Line rule: the output has exactly one line per input line, in the same order. A line that is empty or only
whitespace gives an empty output line without being decoded; other lines are stripped of surrounding whitespace
before translation; a translation never contains a line break (any is replaced by a space). A last input line
without a final newline still counts as a line; "\\r\\n" line ends are accepted. The output is written only when
everything is translated (with --output, atomically: an existing file is replaced only on success).

Input errors (missing, unreadable, a folder, or not UTF-8) are reported with the file name (and line number for
encoding errors) and exit status 2, before the model is loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

STDIN = "-"


class InputError(Exception):
    """An input problem to report as one clear line (no traceback)."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", default=STDIN, help="text file to translate, one sentence per line "
                        "(default: '-', standard input)")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="model folder (save_pretrained: model + tokenizer)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write translations here (default: standard output)")
    parser.add_argument("--engine", default="pytorch", choices=sorted(ENGINES), help="decoding backend")
    batching = parser.add_argument_group("batching")
    batching.add_argument("--max_tokens", type=int, default=None,
                          help="padded source tokens per batch (default: vaswani_hf.generation.DEFAULT_MAX_TOKENS)")
    batching.add_argument("--batch_size", type=int, default=None, help="at most this many sentences per batch")
    decoding = parser.add_argument_group("decoding (default: the model's generation_config)")
    decoding.add_argument("--num_beams", type=int, default=None, help="beam size (paper: 4; 1 = greedy)")
    decoding.add_argument("--length_penalty", type=float, default=None, help="alpha of the length penalty (paper: 0.6)")
    decoding.add_argument("--length_penalty_type", choices=("gnmt", "hf"), default=None,
                          help="gnmt: ((5+|Y|)/6)^alpha as in the paper; hf: transformers' |Y|^alpha")
    decoding.add_argument("--max_length_a", type=float, default=None,
                          help="per-sentence limit a * source_length + b tokens (paper: a=1)")
    decoding.add_argument("--max_length_b", type=_int_or_none, default=argparse.SUPPRESS,
                          help="the b of --max_length_a (paper: 50); 'none' turns the per-sentence limit off")
    decoding.add_argument("--max_new_tokens", type=int, default=None, help="global cap on generated tokens")
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps, ... (default: accelerator if any)")
    hardware.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                          help="compute dtype: bf16/fp16 run under torch.autocast (for GPUs); weights stay fp32")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    if getattr(args, "max_length_b", 0) is None and args.max_new_tokens is None:
        parser.error("--max_length_b none turns the per-sentence limit off: give --max_new_tokens as the limit")
    for name in ("max_tokens", "batch_size", "num_beams", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name} must be positive, got {value}")
    return args


def _int_or_none(text: str):
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {text!r}") from None


def read_input(name: str) -> list[str]:
    """The lines of file `name` ('-' = stdin) without line ends, decoded as UTF-8; InputError names the problem."""
    label = "<stdin>" if name == STDIN else name
    if name == STDIN:
        data = sys.stdin.buffer.read()
    else:
        path = Path(name)
        if not path.exists():
            raise InputError(f"input file not found: {name}")
        if path.is_dir():
            raise InputError(f"input is a directory, not a file: {name}")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise InputError(f"cannot read input file {name}: {error.strerror or error}") from None
    if not data:
        return []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":  # the file ends with a newline: no extra empty line
        raw_lines.pop()
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise InputError(
                f"{label}: line {number} is not valid UTF-8 (byte 0x{raw[error.start]:02x} at byte offset "
                f"{error.start} of the line); convert the file to UTF-8, e.g. with iconv"
            ) from None
    return lines


def write_output(lines: list[str], output: str | None) -> None:
    text = "".join(line + "\n" for line in lines)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(output)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def decoding_options(args) -> dict:
    """The command-line decoding options that were set (unset ones keep the model's generation config)."""
    options = {name: getattr(args, name) for name in ("num_beams", "length_penalty", "length_penalty_type",
                                                        "max_length_a", "max_new_tokens")}
    options = {name: value for name, value in options.items() if value is not None}
    if hasattr(args, "max_length_b"):  # given, possibly as 'none' (= no per-sentence limit)
        options["max_length_b"] = args.max_length_b
    return options


# ---------------------------------------------------------------------------------------------------------------------
# Engines: each takes (args, lines) and returns one translation per line, in order. To add a backend (e.g.
# CTranslate2), write `translate_with_<name>(args, lines)` and register it in ENGINES.
# ---------------------------------------------------------------------------------------------------------------------


def translate_with_pytorch(args, lines: list[str]) -> list[str]:
    from vaswani_hf.generation import DEFAULT_MAX_TOKENS, load_for_inference, translate

    model, tokenizer = load_for_inference(args.model, device=args.device)
    options = decoding_options(args)
    return translate(
        model,
        tokenizer,
        lines,
        max_tokens=args.max_tokens if args.max_tokens is not None else DEFAULT_MAX_TOKENS,
        batch_size=args.batch_size,
        dtype=args.dtype,
        progress=not args.no_progress,
        **options,
    )


def translate_with_ctranslate2(args, lines: list[str]) -> list[str]:
    """CTranslate2 (`pip install vaswani_hf[ct2]`): a folder from scripts/export_ctranslate2.py, or a model folder,
    exported on the fly. Differences from `generate()` are documented in vaswani_hf/ctranslate2_backend.py."""
    from vaswani_hf.ctranslate2_backend import translate_ctranslate2

    compute_type = {None: "default", "fp32": "default", "bf16": "bfloat16", "fp16": "float16"}[args.dtype]
    return translate_ctranslate2(args.model, lines, batch_size=args.batch_size, max_tokens=args.max_tokens,
                                 device=args.device or "cpu", compute_type=compute_type, **decoding_options(args))


ENGINES = {
    "pytorch": translate_with_pytorch,
    "ctranslate2": translate_with_ctranslate2,
}


def main(argv=None) -> int:
    args = parse_args(argv)
    prog = Path(sys.argv[0]).name if argv is None else "translate.py"
    try:
        lines = read_input(args.input)
        if not Path(args.model).is_dir():
            raise InputError(f"model folder not found: {args.model}")
        if args.output is not None and not Path(args.output).resolve().parent.is_dir():
            raise InputError(f"output folder does not exist: {Path(args.output).parent}")
    except InputError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    translations = ENGINES[args.engine](args, lines)
    if len(translations) != len(lines):  # an engine bug must never silently misalign lines
        raise RuntimeError(f"engine {args.engine} returned {len(translations)} lines for {len(lines)} inputs")
    write_output(translations, args.output)
    if not args.no_progress:
        elapsed = time.perf_counter() - start
        print(f"{prog}: translated {len(lines)} lines in {elapsed:.1f}s with engine {args.engine}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
