"""Score translations with sacreBLEU, chrF, the paper's tokenized BLEU (with compounds split) and tokenized BLEU.

Translate a source file with a saved model and score it::

    vaswani-evaluate --model outputs/model --source newstest2014.en --references newstest2014.de \\
        --out scores.json [--num_beams 4] [--batch_size 32] [--device cpu] [--dtype auto] [--save_hypotheses hyp.de]

or score an existing output file::

    vaswani-evaluate --hypotheses hyp.de --references newstest2014.de --out scores.json

Several reference files may follow --references (multi-reference BLEU). The tool prints a table and writes the scores
with their signatures as JSON. Text files are read as every tool of the package reads them: they must be strict UTF-8
(a bad byte is named by file:line), a byte-order mark is dropped, and CRLF and CR line ends are accepted. Every input is read and every output checked before anything is
translated, and existing --out or --save_hypotheses files are replaced only with --overwrite. See
vaswani_hf.metrics.scores for what each score is.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import io, precision
from ..hub.ids import language_code
from ..metrics import SACREBLEU_TOKENIZERS, check_sacrebleu_tokenizer
from ..metrics.scores import check_line_counts, compute_all, format_table
from ..settings import GENERATION_SETTINGS, device, flag, settings_of
from ..translation.frontend import BatchSettings
from ..translation.inference import load_for_decoding, resolve_device, translate
from .command import OUTPUT_FILE, TEXT_OR_STDIN, Command, Paths, Use, run_command
from .contract import ArgumentParser


@dataclass
class EvaluateOptions:
    """Hold the settings that belong to this tool alone; the batching settings are in `BatchSettings`."""

    tokenize: str = field(
        default="13a",
        metadata={"help": "sacreBLEU tokenizer for the 'sacrebleu' score", "choices": SACREBLEU_TOKENIZERS},
    )


OPTIONS = {**settings_of(EvaluateOptions), **settings_of(BatchSettings)}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-evaluate", description=__doc__)
    parser.add_argument(
        "--references", nargs="+", required=True, metavar="FILE", help="reference file(s), one segment per line"
    )
    parser.add_argument(
        "--hypotheses", metavar="FILE", help="score this output file instead of translating (default: translate)"
    )
    parser.add_argument(
        "--model", metavar="DIR", help="saved model folder (with its tokenizer) (default: none, with --hypotheses)"
    )
    parser.add_argument(
        "--source", metavar="FILE", help="source file to translate with --model (default: none, with --hypotheses)"
    )
    parser.add_argument(
        "--out", metavar="FILE", help="write the scores as JSON here (default: the table on standard output only)"
    )
    parser.add_argument(
        "--save_hypotheses", metavar="FILE", help="write the model's translations here (default: not written)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing --out / --save_hypotheses files")
    beams = GENERATION_SETTINGS["num_beams"]
    parser.add_argument(
        "--num_beams", **flag(beams, default=None, help=f"{beams.help} (default: the model's generation_config)")
    )
    parser.add_argument("--batch_size", **flag(OPTIONS["batch_size"], default=32, help="sentences per batch"))
    parser.add_argument("--max_input_tokens", **flag(OPTIONS["max_input_tokens"]))
    parser.add_argument(
        "--device", type=device, default=None, help="torch device (default: the accelerator if any, else cpu)"
    )
    parser.add_argument("--dtype", **flag(precision.DTYPE))
    parser.add_argument(
        "--target_lang",
        default="de",
        type=language_code,
        help="target language code for the Moses tokenizer of the paper-style BLEU (e.g. de, fr)",
    )
    parser.add_argument("--tokenize", **flag(OPTIONS["tokenize"]))
    parser.add_argument(
        "--lowercase",
        action="store_true",
        help="case-insensitive sacrebleu, chrf and bleu_tok_none (the paper-style BLEU stays cased)",
    )
    return parser


def check_arguments(args) -> None:
    """Refuse a combination of flags that cannot work, or a sacreBLEU tokenizer whose packages are not installed,
    before any path is looked at."""
    if args.hypotheses and (args.model or args.source):
        raise io.UsageError("give either --hypotheses, or --model with --source, not both")
    if not args.hypotheses and not (args.model and args.source):
        raise io.UsageError("give --hypotheses FILE, or --model DIR and --source FILE")
    check_sacrebleu_tokenizer(args.tokenize, "--tokenize")


def _paths(args) -> Paths:
    """Declare the tool's paths, which are checked in three steps.

    The text files (a file, "-" or a pipe, read by `io.TextInput`) and the output files are checked before anything is
    read. Each text line is checked as it is read, before anything is translated. The model folder is checked once the
    line counts agree (in `_resolve`).
    """
    inputs = [
        Use(f"--references ({i + 1})", path, TEXT_OR_STDIN, what="reference file")
        for i, path in enumerate(args.references)
    ]
    inputs += [
        Use("--hypotheses", args.hypotheses, TEXT_OR_STDIN, what="hypotheses file"),
        Use("--source", args.source, TEXT_OR_STDIN, what="source file"),
        Use("--model", args.model),
    ]
    return Paths(
        inputs=inputs,
        outputs=(Use("--out", args.out, OUTPUT_FILE), Use("--save_hypotheses", args.save_hypotheses, OUTPUT_FILE)),
        overwrite=args.overwrite,
    )


def translate_file(args, sources: list[str]) -> tuple[list[str], int, str]:
    """Load the model folder in the precision --dtype chooses, translate `sources`, and return the result.

    Returns (hypotheses, beam size, the precision's name). A source line the model refuses (one longer than its
    positions, for example) is raised as an InputLineError naming the source file and the line.
    """
    model, tokenizer, choice = load_for_decoding(args.model, args.device, args.dtype)
    if args.dtype != precision.DTYPE.default:
        print(choice.line(), file=sys.stderr)
    num_beams = args.num_beams if args.num_beams is not None else model.generation_config.num_beams
    started = time.perf_counter()
    try:
        hypotheses = translate(
            model,
            tokenizer,
            sources,
            batch_size=args.batch_size,
            num_beams=num_beams,
            max_input_tokens=args.max_input_tokens,
        )
    except io.InputLineError as error:  # For example a line longer than the model's positions, named as file:line.
        raise error.in_file(args.source) from error
    # Reported after the work, so that a refused source stays one line on stderr; translate shows its own progress.
    print(
        f"translated {len(sources)} lines of {args.source} on {resolve_device(args.device)} with "
        f"num_beams={num_beams} in {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
    )
    return hypotheses, num_beams, choice.name


def _resolve(args, checked):
    """Read every input, compare the line counts and check the model folder, all before anything is translated.

    Returns the plan (args, references, lines), where references pairs each reference file's name with its lines and
    lines are the hypotheses, or the source lines when the model is to translate them.
    """

    references = [(name, io.read_lines(name, what="reference file")) for name in args.references]
    if args.hypotheses:
        hypotheses = io.read_lines(args.hypotheses, what="hypotheses file")
        check_line_counts((args.hypotheses, hypotheses), references)
        return args, references, hypotheses
    sources = io.read_lines(args.source, what="source file")
    check_line_counts((args.source, sources), references)
    io.check_model_folder(args.model, what="--model")
    return args, references, sources


def _run(plan) -> int:
    args, references, lines = plan
    meta = {"references": args.references}
    if args.hypotheses:
        hypotheses = lines
        meta["hypotheses"] = args.hypotheses
    else:
        hypotheses, num_beams, chosen = translate_file(args, lines)
        meta.update(model=args.model, source=args.source, num_beams=num_beams, precision=chosen)
        if args.save_hypotheses:
            io.write_lines(args.save_hypotheses, hypotheses, overwrite=args.overwrite, what="--save_hypotheses")
            meta["hypotheses"] = args.save_hypotheses
    meta["num_segments"] = len(hypotheses)
    if not hypotheses:
        raise io.UsageError(f"{args.hypotheses or args.source}: no segments to score (the file is empty)")
    scores = compute_all(
        hypotheses,
        [lines for _, lines in references],
        target_lang=args.target_lang,
        tokenize=args.tokenize,
        lowercase=args.lowercase,
    )
    print(format_table(scores))
    if args.out:
        target = io.check_output_file(args.out, overwrite=args.overwrite, what="--out")
        with io.replace_atomically(target, overwrite=args.overwrite) as tmp:
            tmp.write_text(json.dumps({"scores": scores, "meta": meta}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


COMMAND = Command(
    "evaluate",
    "vaswani-evaluate",
    build_parser,
    _run,
    paths=_paths,
    validate=check_arguments,
    resolve=_resolve,
    script="evaluate_translations.py",
    invoked_name=True,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
