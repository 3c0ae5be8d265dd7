"""Translate a text file (one sentence per line) with a saved Transformer model folder.

    vaswani-translate input.en --model runs/base/hub > output.de
    cat input.en | vaswani-translate --model DIR --num_beams 1 --output out.de

Decoding defaults come from the model's generation config: the paper's Section 6.1 settings (beam 4, GNMT length
penalty alpha = 0.6, maximum output length = input length + 50, early termination). Options override them.

Line rule: the output has exactly one line per input line, in the same order. Input is read as every tool of the
package reads text (vaswani_hf.io: strict UTF-8, byte-order mark dropped, CRLF/CR line ends accepted). A line that is
empty or only whitespace gives an empty output line without being decoded; other lines are stripped of surrounding
whitespace; a translation never contains a line break. Bad paths and flags (a missing input, a folder, a broken model
folder, an existing --output) are reported in one line with exit status 2 before the model is loaded; a bad line (not
UTF-8, longer than the model's learned positions, than a CTranslate2 export's position table or than
--max_input_tokens) is named as file:line before anything is decoded, and a line of more characters than that limit
allows (64 per token: vaswani_hf.translation_frontend) before it is even tokenised. "-" is standard input (copied to
a temporary file, as it is read twice), /dev/null an empty input.

Any size (vaswani_hf.translate_stream): the input is decoded --buffer_lines lines at a time, so memory depends on
that window, not on the file. --output appears only when everything is translated, in one rename, and an existing
file is replaced only with --overwrite; meanwhile the finished windows are kept in <output>.partial/, so that an
interrupted run (Ctrl-C, SIGTERM, a crash, a full disk) continues with --resume and gives the same bytes. A folder
left by an interrupted run is continued only with --resume (and the same input, model and settings), replaced only
with --overwrite. Standard output receives each window when it is done.

Several processes, one per GPU (or CPU processes with a few threads each):

    accelerate launch --num_processes 4 scripts/translate.py big.en --model DIR --output big.de

Process r decodes windows r, r + N, ... on its own device; the first process writes --output, byte-identical to one
process's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import torch

from .. import inference, io, precision
from ..constraints import MAX_POSITIONS, MAX_SENTENCES, MAX_TOKENS, device, number, setting_flag
from ..data.batching import TRANSLATE_MAX_TOKENS
from ..generation_vaswani import GENERATION_SETTINGS
from ..translate_stream import BUFFER_LINES, Engine, Processes, translate_file
from ..translation_frontend import MAX_SOURCE_TOKENS
from .command import FOLDER, MODEL_FOLDER, OUTPUT_FILE_OR_STDOUT, TEXT_OR_STDIN, Command, Paths, Use, run_command
from .contract import ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-translate", description=__doc__)
    parser.add_argument(
        "input",
        nargs="?",
        default=io.STDIO,
        help="text file to translate, one sentence per line (default: '-', standard input)",
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="model folder (save_pretrained: model + tokenizer), or a CTranslate2 folder with --engine ctranslate2",
    )
    parser.add_argument("--output", "-o", metavar="FILE", help="write translations here (default: standard output)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted translation kept in "
        "<output>.partial (the same input, model and settings; refused otherwise)",
    )
    parser.add_argument("--engine", default="pytorch", choices=("pytorch", "ctranslate2"), help="decoding backend")
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--buffer_lines",
        type=number(int, min=1, max=10_000_000),
        default=BUFFER_LINES,
        help=f"lines read, length-sorted and decoded together: memory depends on this, not on the "
        f"file; each of N processes takes every N-th window (default {BUFFER_LINES:,})",
    )
    batching.add_argument(
        "--max_tokens",
        type=number(int, min=1, max=MAX_TOKENS),
        default=None,
        help="padded source tokens per batch (default: 4096, vaswani_hf.data.TRANSLATE_MAX_TOKENS)",
    )
    batching.add_argument(
        "--batch_size",
        type=number(int, min=1, max=MAX_SENTENCES),
        default=None,
        help="at most this many sentences per batch",
    )
    batching.add_argument(
        "--max_input_tokens",
        type=number(int, min=1, max=MAX_POSITIONS),
        default=MAX_SOURCE_TOKENS,
        help=f"a line with more source tokens (</s> included) is refused, naming it, before "
        f"anything is decoded (default {MAX_SOURCE_TOKENS})",
    )
    decoding = parser.add_argument_group("decoding (default: the model's generation_config)")
    for name in ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_new_tokens"):
        decoding.add_argument(f"--{name}", default=None, **setting_flag(GENERATION_SETTINGS[name]))
    decoding.add_argument(
        "--max_length_b", default=argparse.SUPPRESS, **setting_flag(GENERATION_SETTINGS["max_length_b"], none="none")
    )
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument(
        "--device", type=device, default=None, help="cpu, cuda, cuda:1, mps, ... (default: accelerator if any)"
    )
    hardware.add_argument(
        "--threads",
        type=number(int, min=1, max=1024),
        default=None,
        help="CPU threads of this process (default: torch's, i.e. OMP_NUM_THREADS, or the cores)",
    )
    hardware.add_argument("--dtype", default=precision.DTYPE.default, **setting_flag(precision.DTYPE))
    parser.add_argument("--no_progress", action="store_true", help="no progress bar on stderr")
    return parser


def decoding_options(args) -> dict:
    """The command-line decoding options that were set (unset ones keep the model's generation config)."""
    names = ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_new_tokens")
    options = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if hasattr(args, "max_length_b"):  # given, possibly as 'none' (= no per-sentence limit)
        options["max_length_b"] = args.max_length_b
    return options


def _fingerprint(args) -> dict:
    """The model folder (path, and name, size and time of each file) and every setting that decides the output: what
    a resumed run must repeat."""
    folder = Path(args.model).resolve()
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())
    settings = {
        name: getattr(args, name) for name in ("engine", "max_tokens", "batch_size", "max_input_tokens", "dtype")
    }
    return {
        "model": {"folder": str(folder), "files": [list(f) for f in files]},
        "settings": settings | decoding_options(args),
    }


def pytorch_engine(args, device, stack: ExitStack) -> Engine:
    """The model in the precision --dtype chooses (weights cast or quantised once, `precision.prepare_for_decoding`:
    nothing is cast per step), its choice in one line on stderr unless it is the default fp32."""
    model, tokenizer, choice = inference.load_for_decoding(args.model, device, args.dtype)
    if args.dtype != precision.DTYPE.default and Processes().rank == 0:
        print(choice.line(), file=sys.stderr)
    encode, table = inference.front_end(model, tokenizer)
    options = dict(
        max_tokens=args.max_tokens or TRANSLATE_MAX_TOKENS,
        batch_size=args.batch_size,
        max_input_tokens=args.max_input_tokens,
        **decoding_options(args),
    )

    def run(lines: list[str], bar) -> list[str]:
        return inference.translate(model, tokenizer, lines, progress=bar, **options)

    fingerprint = _fingerprint(args)
    fingerprint["settings"]["precision"] = choice.name  # what `auto` chose here: a resume elsewhere must agree
    return Engine(run, encode, table, args.max_input_tokens, fingerprint, inference.token_bound(tokenizer))


def ctranslate2_engine(args, device, stack: ExitStack) -> Engine:
    """CTranslate2 (`pip install vaswani_hf[ct2]`): a folder from vaswani-export-ctranslate2, or a model folder,
    exported on the fly. Differences from `generate()` are documented in vaswani_hf/export/ctranslate2.py."""
    from ..export.ctranslate2 import CTranslate2Translator, to_ctranslate2  # optional dependency: ctranslate2

    folder = Path(args.model)
    if not (folder / "model.bin").is_file():
        folder = to_ctranslate2(folder, Path(stack.enter_context(tempfile.TemporaryDirectory())) / "ct2")
    # CTranslate2's own names; its "auto" is the fastest type this device supports, its "default" the export's
    compute_type = {"fp32": "default", "bf16": "bfloat16", "fp16": "float16", "int8": "int8", "auto": "auto"}[
        args.dtype
    ]
    translator = CTranslate2Translator(
        folder, device=device or "cpu", compute_type=compute_type, intra_threads=args.threads or 0
    )
    options = dict(
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_input_tokens=args.max_input_tokens,
        **decoding_options(args),
    )

    def run(lines: list[str], bar) -> list[str]:
        return translator.translate(lines, **options)

    return Engine(run, translator.encode, translator.position_table, args.max_input_tokens, _fingerprint(args))


ENGINES = {"pytorch": pytorch_engine, "ctranslate2": ctranslate2_engine}


def _validate(args) -> None:
    if getattr(args, "max_length_b", 0) is None and args.max_new_tokens is None:
        raise io.UsageError("--max_length_b none turns the per-sentence limit off: give --max_new_tokens as the limit")
    to_stdout = args.output is None or str(args.output) == io.STDIO
    if args.resume and to_stdout:
        raise io.UsageError("--resume continues an interrupted --output file: give --output")
    processes = Processes().size
    if processes > 1 and (to_stdout or str(args.input) == io.STDIO):
        raise io.UsageError(
            f"{processes} processes (WORLD_SIZE) read one input file and write one --output file: give both as files"
        )


def _paths(args) -> Paths:
    """The input first (a folder or a device is named as such), the model folder (a CTranslate2 export is a folder
    of its own kind, checked when loaded), --output checked before any work."""
    model = MODEL_FOLDER if args.engine == "pytorch" else FOLDER
    return Paths(
        inputs=(
            Use("input", args.input, TEXT_OR_STDIN, what="input file", first=True),
            Use("--model", args.model, model),
        ),
        outputs=(Use("--output", args.output, OUTPUT_FILE_OR_STDOUT),),
        overwrite=args.overwrite,
    )


def _run(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    with Processes() as world, ExitStack() as stack:
        engine = ENGINES[args.engine](args, world.device(args.device), stack)
        done = translate_file(
            args.input,
            args.output,
            engine,
            buffer_lines=args.buffer_lines,
            resume=args.resume,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            world=world,
        )
    if not args.no_progress and world.rank == 0:
        seconds = max(done["seconds"], 1e-9)
        print(
            f"translated {done['lines']} lines in {seconds:.1f}s with engine {args.engine} on {world.size} "
            f"process(es): {done['lines'] / seconds:.1f} sentences/s, {done['tokens'] / seconds:.0f} target "
            "tokens/s",
            file=sys.stderr,
        )
    return 0


COMMAND = Command(
    "translate", "vaswani-translate", build_parser, _run, paths=_paths, validate=_validate, invoked_name=True
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
