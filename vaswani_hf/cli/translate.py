"""Translate a text file (one sentence per line) with a saved Transformer model folder.

    vaswani-translate input.en --model runs/base/hub > output.de
    cat input.en | vaswani-translate --model DIR --num_beams 1 --output out.de

Decoding defaults come from the model's generation config: the paper's Section 6.1 settings (beam 4, GNMT length
penalty alpha = 0.6, maximum output length = input length + 50, early termination). Options override them.

The line rule: the output has exactly one line per input line, in the same order. Input is read as every tool of the
package reads text (vaswani_hf.io): it must be strict UTF-8, a byte-order mark is dropped, and CRLF and CR line ends
are accepted. A line that is
empty or only whitespace gives an empty output line without being decoded; other lines are stripped of surrounding
whitespace; a translation never contains a line break. Bad paths and flags (a missing input, a folder, a broken model
folder, an existing --output) are reported in one line with exit status 2 before the model is loaded. A bad line is
named as file:line before anything is decoded: one that is not UTF-8, or that has more tokens than the model's learned
positions, a CTranslate2 export's position table or --max_input_tokens allow. A line with more characters than that
token limit can hold (64 per token, see vaswani_hf.translation.frontend) is named before it is even tokenised. The
input may be a file, "-" (standard input), /dev/stdin, a named pipe or a process substitution such as <(zcat
corpus.en.gz): an input that can be read only once is copied as the check reads it into a temporary file (at most 90%
of the space free in TMPDIR), which the decoding reads and which is removed at exit (vaswani_hf.io.TextInput);
/dev/null is an empty input. A file changed while it is read is refused, naming it.

Files of any size are translated (vaswani_hf.translation.stream): the input is decoded --buffer_lines lines at a time, so
memory depends on that window, not on the file. --output appears only when everything is translated, in one rename, and
an existing file is replaced only with --overwrite; meanwhile the finished windows are kept in <output>.partial/, so
that an interrupted run (Ctrl-C, SIGTERM, a crash, a full disk) continues with --resume and gives the same bytes. A
folder left by an interrupted run is continued only with --resume (and the same input, model and settings), replaced
only with --overwrite. Each finished window is recorded with its line count and SHA-256: --resume reuses only windows
that match their record (any other is named and translated again), and the join into --output checks every window
again. Standard output receives each window when it is done. Progress goes to stderr: a bar on a terminal, else a plain
line every 5% or every minute (vaswani_hf.io.progress).

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
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import io, precision
from ..data.batching import TRANSLATE_MAX_TOKENS
from ..settings import GENERATION_SETTINGS, device, flag, settings_of
from ..translation import inference
from ..translation.frontend import BatchSettings
from ..translation.stream import BUFFER_LINES, Engine, Processes, translate_file
from .command import FOLDER, MODEL_FOLDER, OUTPUT_FILE_OR_STDOUT, TEXT_OR_STDIN, Command, Paths, Use, run_command
from .contract import ArgumentParser


@dataclass
class TranslateOptions:
    """Hold the settings that belong to this tool alone.

    The batching settings are in `BatchSettings` and the decoding settings in `DecodingSettings`.
    """

    engine: str = field(
        default="pytorch", metadata={"help": "decoding backend", "choices": ("pytorch", "ctranslate2")}
    )
    buffer_lines: int = field(
        default=BUFFER_LINES,
        metadata={
            "help": "lines read, length-sorted and decoded together: memory depends on this, not on the file; each "
            "of N processes takes every N-th window",
            "min": 1,
            "max": 10_000_000,
        },
    )
    threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads of this process (default: torch's, i.e. OMP_NUM_THREADS, or the cores)",
            "min": 1,
            "max": 1024,
        },
    )


OPTIONS = {**settings_of(TranslateOptions), **settings_of(BatchSettings)}
DECODING_FLAGS = ("num_beams", "length_penalty", "length_penalty_type", "max_length_a", "max_new_tokens")


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
    parser.add_argument("--engine", **flag(OPTIONS["engine"]))
    batching = parser.add_argument_group("batching")
    for name in ("buffer_lines", "max_tokens", "batch_size", "max_input_tokens"):
        batching.add_argument(f"--{name}", **flag(OPTIONS[name]))
    decoding = parser.add_argument_group("decoding (default: the model's generation_config)")
    for name in DECODING_FLAGS:
        decoding.add_argument(f"--{name}", **flag(GENERATION_SETTINGS[name], default=None, help=_unset_help(name)))
    decoding.add_argument(
        "--max_length_b",
        **flag(
            GENERATION_SETTINGS["max_length_b"],
            none="none",
            default=argparse.SUPPRESS,
            help=_unset_help("max_length_b"),
        ),
    )
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument(
        "--device", type=device, default=None, help="cpu, cuda, cuda:1, mps, ... (default: accelerator if any)"
    )
    hardware.add_argument("--threads", **flag(OPTIONS["threads"]))
    hardware.add_argument("--dtype", **flag(precision.DTYPE))
    parser.add_argument("--no_progress", action="store_true", help="no progress report on stderr")
    return parser


def _unset_help(name: str) -> str:
    return f"{GENERATION_SETTINGS[name].help} (default: the model's generation_config)"


def decoding_options(args) -> dict:
    """Return the decoding options set on the command line; those not set keep the model's generation config."""
    options = {name: getattr(args, name) for name in DECODING_FLAGS if getattr(args, name) is not None}
    if hasattr(args, "max_length_b"):  # It was given, possibly as 'none', which means no per-sentence limit.
        options["max_length_b"] = args.max_length_b
    return options


def _fingerprint(args) -> dict:
    """Return what a resumed run must repeat: the model folder and every setting that decides the output.

    The folder is recorded by its path and the name, size and modification time of each file in it. A Hub id is
    recorded by the snapshot of the Hub's cache it was loaded from (loading it put it there).
    """
    folder = Path(args.model).resolve()
    if isinstance(args.model, str) and not folder.exists():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(args.model, local_files_only=True)).resolve()
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())
    settings = {
        name: getattr(args, name) for name in ("engine", "max_tokens", "batch_size", "max_input_tokens", "dtype")
    }
    return {
        "model": {"folder": str(folder), "files": [list(f) for f in files]},
        "settings": settings | decoding_options(args),
    }


def pytorch_engine(args, device, stack: ExitStack) -> Engine:
    """Return the PyTorch engine, which runs the model in the precision --dtype chooses.

    The weights are cast or quantised once (`precision.prepare_for_decoding`), so that nothing is cast per step. The
    choice is printed in one line on stderr unless it is the default, fp32.
    """
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
    # Record what `auto` chose here, so that a resume elsewhere must agree.
    fingerprint["settings"]["precision"] = choice.name
    return Engine(run, encode, table, args.max_input_tokens, fingerprint, inference.token_bound(tokenizer))


def ctranslate2_engine(args, device, stack: ExitStack) -> Engine:
    """Return the CTranslate2 engine (`pip install vaswani_hf[ct2]`) for a CTranslate2 folder or a model folder.

    A folder from vaswani-export-ctranslate2 is used as it is; a model folder is exported on the fly into a temporary
    folder. The engine's differences from `generate()` are documented in vaswani_hf/export/ctranslate2.py.
    """
    from ..export.ctranslate2 import CTranslate2Translator, to_ctranslate2  # ctranslate2 is an optional dependency.

    folder = Path(args.model)
    if not (folder / "model.bin").is_file():
        folder = to_ctranslate2(folder, Path(stack.enter_context(tempfile.TemporaryDirectory())) / "ct2")
    # These are CTranslate2's own names. Its "auto" is the fastest type this device supports, and its "default" is the
    # type the export was saved in.
    compute_type = {"fp32": "default", "bf16": "bfloat16", "fp16": "float16", "int8": "int8", "auto": "auto"}[
        args.dtype
    ]
    translator = CTranslate2Translator(
        folder, device=device or "cpu", compute_type=compute_type, intra_threads=args.threads or 0
    )
    if args.dtype != precision.DTYPE.default and Processes().rank == 0:
        # As the PyTorch engine does, the precision asked for is answered in one line: CTranslate2's own choice.
        chosen = translator.translator.compute_type
        reason = "CTranslate2's fastest type on this device" if args.dtype == "auto" else f"--dtype {args.dtype}"
        print(f"precision: CTranslate2 compute type {chosen} ({reason})", file=sys.stderr)
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
    if processes > 1 and (to_stdout or io.reads_once(args.input)):  # Each process reads the whole input.
        raise io.UsageError(
            f"{processes} processes (WORLD_SIZE) read one input file and write one --output file: give both as files "
            "(the input a regular file: a pipe or standard input can be read only once)"
        )


def _paths(args) -> Paths:
    """Declare the paths checked before any work: the input first, then the model folder, then --output.

    An input that is a folder or a device is named as such. A CTranslate2 export is a folder of its own kind, which is
    checked when it is loaded.
    """

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
