#!/usr/bin/env python
"""Translation at corpus scale: peak resident memory and throughput of `vaswani-translate` against input size.

Not a test. Each measurement is one launch of a command line, as a user runs it, on synthetic input (random words,
3-20 per line) with a tiny untrained model (d_model 32, 2+2 layers, a BPE of 1,000): the point is the tool's memory
and overhead, not translation quality, so decoding is greedy with a fixed output length (`--num_beams 1
--max_length_a 0 --max_length_b 6`). Systems:

- streaming: today's tool (`--buffer_lines`, default 10,000 lines per window);
- in-memory: the tool before streaming (commit 2760ba8, taken from git with `git archive`), which reads, tokenises
  and decodes the whole file at once;
- ctranslate2: CTranslate2's own `Translator.translate_file` on the model's export (`read_batch_size` = the same
  window), when `ctranslate2` is installed;
- processes: 1 process x 2 threads (`--threads 2`) against 2 processes x 1 thread (`ACCELERATE_USE_CPU=1
  accelerate launch --multi_gpu --num_processes 2`), on the same input and windows; outputs compared byte for byte;
- refusal: a file whose last line is too long (`--max_input_tokens 64`): time and memory until the one-line refusal.

Peak resident memory is that of the largest process of the command (`os.wait4`'s ru_maxrss). Throughput is
sentences per second of wall time and per CPU second (user + system of the whole command), model loading included:
on a shared machine wall time follows the load (`os.getloadavg`, recorded before each launch), CPU time much less.

    python benchmarks/bench_translate_stream.py [--sizes 10000,100000] [--process_lines 20000]
        [--refusal_lines 1000000] [--work /tmp/translate-stream]

Results: benchmarks/results/translate_stream.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BASELINE = "2760ba8"  # the last commit whose translate tool held the whole input in memory
DECODING = ["--num_beams", "1", "--max_length_a", "0", "--max_length_b", "6", "--no_progress", "--device", "cpu"]
WORDS = [f"w{i}{chr(97 + i % 26)}" for i in range(200)]


def positive_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"want positive numbers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=positive_list, default=[10_000, 100_000], help="input lines per measurement")
    parser.add_argument("--threads", type=int, default=1, help="threads of each single-process command")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved launches per size and system (median)")
    parser.add_argument("--process_lines", type=int, default=20_000, help="input of the processes comparison (0: off)")
    parser.add_argument("--process_window", type=int, default=5_000, help="--buffer_lines of that comparison")
    parser.add_argument("--refusal_lines", type=int, default=1_000_000, help="lines before the bad one (0: off)")
    parser.add_argument(
        "--systems",
        default="streaming,in-memory,ctranslate2",
        help="comma-separated: streaming, in-memory, ctranslate2",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/translate-stream"), help="scratch folder")
    parser.add_argument("--results_dir", type=Path, default=RESULTS)
    return parser


def write_input(path: Path, lines: int, bad_last: bool = False) -> Path:
    if not path.exists():
        rng = random.Random(lines)
        with open(path, "w", encoding="utf-8") as handle:
            for _ in range(lines):
                handle.write(" ".join(rng.choices(WORDS, k=rng.randint(3, 20))) + "\n")
            if bad_last:
                handle.write(" ".join(WORDS) + "\n")
    return path


def make_model(folder: Path) -> Path:
    if (folder / "config.json").is_file():
        return folder
    import torch

    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.tokenization import train_bpe_tokenizer

    rng = random.Random(0)
    text = [" ".join(rng.choices(WORDS, k=12)) for _ in range(3000)]
    tokenizer = train_bpe_tokenizer(text, vocab_size=1000, show_progress=False)
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        VaswaniConfig(
            vocab_size=len(tokenizer), d_model=32, d_ff=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2
        )
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def baseline_tree(work: Path) -> Path:
    """The package and scripts as of BASELINE, extracted from git."""
    tree = work / f"baseline-{BASELINE}"
    if not tree.is_dir():
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", BASELINE, "vaswani_hf", "scripts"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def launch(command: list[str], *, threads: int, pythonpath: Path = REPO, **variables: str) -> dict:
    """Run `command`; wall time, exit status, peak RSS of its largest process, the load before it."""
    env = dict(
        os.environ,
        PYTHONPATH=str(pythonpath),
        OMP_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        **variables,
    )
    load = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stderr = process.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    return {
        "seconds": round(seconds, 2),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "exit": code,
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "load_1min": round(load, 2),
        "stderr_tail": stderr.strip().splitlines()[-1:] if code else [],
    }


def median_run(runs: list[dict]) -> dict:
    """The launch of median CPU time, with every launch's (wall, CPU) seconds."""
    chosen = sorted(runs, key=lambda run: run["cpu_seconds"])[(len(runs) - 1) // 2]
    return {**chosen, "rounds": [[run["seconds"], run["cpu_seconds"]] for run in runs]}


def tool(tree: Path, source: Path, model: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(tree / "scripts" / "translate.py"),
        str(source),
        "--model",
        str(model),
        *DECODING,
        "--output",
        str(out),
        "--overwrite",
        *extra,
    ]


def ctranslate2_command(
    model: Path, source: Path, out: Path, work: Path, window: int, threads: int
) -> list[str] | None:
    if importlib.util.find_spec("ctranslate2") is None:
        return None
    export = work / "ct2"
    if not export.is_dir():
        subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "export_ctranslate2.py"),
                "--model_dir",
                str(model),
                "--out_dir",
                str(export),
            ],
            check=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    code = (
        "import sys, ctranslate2; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained("
        f"{str(model)!r}); tr = ctranslate2.Translator({str(export)!r}, intra_threads={threads}); "
        "tr.translate_file(sys.argv[1], sys.argv[2], max_batch_size=4096, batch_type='tokens', "
        f"read_batch_size={window}, beam_size=1, max_decoding_length=6, "
        "source_tokenize_fn=lambda s: t.convert_ids_to_tokens(t(s)['input_ids']), "
        "target_detokenize_fn=lambda x: t.convert_tokens_to_string(x))"
    )
    return [sys.executable, "-c", code, str(source), str(out)]


def measure(args) -> dict:
    args.work.mkdir(parents=True, exist_ok=True)
    model = make_model(args.work / "model")
    systems = args.systems.split(",")
    results = {
        "date": datetime.datetime.now().isoformat(timespec="minutes"),
        "cpus": os.cpu_count(),
        "threads": args.threads,
        "rounds": args.rounds,
        "load_before": os.getloadavg(),
        "sizes": {},
        "processes": None,
        "refusal": None,
    }
    old = baseline_tree(args.work) if "in-memory" in systems or args.refusal_lines else None

    def sizes(chosen: list[int]) -> None:
        threads = str(args.threads)
        for size in chosen:
            source, runs = write_input(args.work / f"in-{size}.txt", size), {}
            commands = {
                "streaming": (tool(REPO, source, model, args.work / "out.txt", "--threads", threads), REPO),
                "in-memory": (tool(old, source, model, args.work / "old.txt"), old) if old else None,
            }
            if "ctranslate2" in systems:
                command = ctranslate2_command(model, source, args.work / "ct2.txt", args.work, 10_000, args.threads)
                commands["ctranslate2"] = (command, REPO) if command else None
            for _ in range(args.rounds):  # interleaved: A B C A B C
                for name in systems:
                    if commands.get(name):
                        runs.setdefault(name, []).append(
                            launch(commands[name][0], threads=args.threads, pythonpath=commands[name][1])
                        )
            row = {name: median_run(found) for name, found in runs.items()}
            row.update({name: "not installed" for name in systems if name not in runs})
            results["sizes"][size] = row
            print(size, json.dumps(row), flush=True)
            save(args, results)

    sizes(args.sizes[:1])  # the smallest first, then the other comparisons, then the larger sizes
    if args.refusal_lines:
        source = write_input(args.work / f"bad-{args.refusal_lines}.txt", args.refusal_lines, bad_last=True)
        limit = ["--max_input_tokens", "64"]
        results["refusal"] = {
            "lines": args.refusal_lines + 1,
            "streaming": launch(tool(REPO, source, model, args.work / "r.txt", *limit), threads=2),
            "in-memory": launch(tool(old, source, model, args.work / "r.txt", *limit), threads=2, pythonpath=old),
        }
        print("refusal", json.dumps(results["refusal"]), flush=True)
        save(args, results)
    if args.process_lines:
        source = write_input(args.work / f"in-{args.process_lines}.txt", args.process_lines)
        window = ["--buffer_lines", str(args.process_window)]
        one = launch(tool(REPO, source, model, args.work / "one.txt", "--threads", "2", *window), threads=2)
        port = str(29500 + os.getpid() % 1000)
        two = launch(
            [
                sys.executable,
                "-m",
                "accelerate.commands.launch",
                "--multi_gpu",
                "--num_processes",
                "2",
                "--main_process_port",
                port,
                *tool(REPO, source, model, args.work / "two.txt", "--threads", "1", *window)[1:],
            ],
            threads=1,
            ACCELERATE_USE_CPU="1",
        )
        same = (args.work / "one.txt").read_bytes() == (args.work / "two.txt").read_bytes()
        results["processes"] = {
            "lines": args.process_lines,
            "window": args.process_window,
            "1 process x 2 threads": one,
            "2 processes x 1 thread": two,
            "identical": same,
        }
        print("processes", json.dumps(results["processes"]), flush=True)
        save(args, results)
    sizes(args.sizes[1:])
    return results


def cell(run) -> str:
    if not isinstance(run, dict):
        return str(run)
    return (
        f"{run['peak_rss_mib']:,.0f} MiB, {run['seconds']:.1f} s, CPU {run['cpu_seconds']:.1f} s (load "
        f"{run['load_1min']})" + ("" if run["exit"] == 0 else f", exit {run['exit']}")
    )


def rate(run, lines: int) -> str:
    """Sentences per wall second / per CPU second."""
    if not isinstance(run, dict) or run["exit"] != 0:
        return "-"
    return f"{lines / run['seconds']:,.0f} / {lines / run['cpu_seconds']:,.0f}"


def report(results: dict) -> str:
    lines = [
        f"# Translation at corpus scale ({results['date']}, {results['cpus']} CPUs shared with other work, load "
        f"{results['load_before'][0]:.2f} at the start)",
        "",
        f"Tiny untrained model, greedy, 6 output tokens per sentence, {results['threads']} thread(s) per "
        f"command (benchmarks/bench_translate_stream.py). Peak RSS of the largest process; wall and CPU time "
        f"with model loading; the launch of median CPU time of {results['rounds']} interleaved rounds. A "
        "shared machine: wall time follows the load, CPU time much less.",
        "",
        "| lines | streaming | in-memory (before) | ctranslate2 translate_file | sent/s (wall / CPU): streaming | "
        "in-memory | ctranslate2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, row in results["sizes"].items():
        lines.append(
            f"| {int(size):,} | {cell(row.get('streaming', '-'))} | {cell(row.get('in-memory', '-'))} | "
            f"{cell(row.get('ctranslate2', '-'))} | {rate(row.get('streaming'), int(size))} | "
            f"{rate(row.get('in-memory'), int(size))} | {rate(row.get('ctranslate2'), int(size))} |"
        )
    if results["processes"]:
        p = results["processes"]
        lines += [
            "",
            f"Processes ({p['lines']:,} lines, windows of {p['window']:,}; outputs byte-identical: {p['identical']}):",
            "",
            "| layout | peak RSS, time | sent/s (wall / CPU) |",
            "|---|---|---|",
        ]
        for layout in ("1 process x 2 threads", "2 processes x 1 thread"):
            lines.append(f"| {layout} | {cell(p[layout])} | {rate(p[layout], p['lines'])} |")
    if results["refusal"]:
        r = results["refusal"]
        lines += [
            "",
            f"Refusal of a too-long last line of {r['lines']:,} (exit 2 expected):",
            "",
            "| tool | peak RSS, time to the refusal |",
            "|---|---|",
            f"| streaming | {cell(r['streaming'])} |",
            f"| in-memory (before) | {cell(r['in-memory'])} |",
        ]
    return "\n".join(lines) + "\n"


def save(args, results: dict) -> None:
    """The results so far (a long run stopped early keeps what it measured)."""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "translate_stream.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.results_dir / "translate_stream.md").write_text(report(results))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    unknown = set(args.systems.split(",")) - {"streaming", "in-memory", "ctranslate2"}
    if unknown:
        build_parser().error(f"--systems: unknown {', '.join(sorted(unknown))}")
    print(report(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
