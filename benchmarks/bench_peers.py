#!/usr/bin/env python
"""Benchmark (not a test): ours against the toolkits a user would pick instead, end to end, under one wall-clock
budget: eole (OpenNMT-py's successor) and transformers' run_translation.py path (Seq2SeqTrainer +
DataCollatorForSeq2Seq + group_by_length) with a MarianMTModel. Same model sizes (the multi30k-en-de recipe's), same
data, same joint BPE subwords, ~1,024 target tokens per batch, same threads; one system at a time.

    python benchmarks/bench_peers.py --setup --systems eole,marian --minutes 0   # only create the peers' venvs (once)
    python benchmarks/bench_peers.py                          # 40 min each: ours, eole, marian, marian-target
    python benchmarks/bench_peers.py --repeats 3 --minutes 8 --score none --checkpoints 1 --tag speed
                                                              # speed: 3 interleaved rounds, each round's order
                                                              # rotated (ours eole marian marian-target, eole ...)
    python benchmarks/bench_peers.py --systems eole           # one system; earlier finished runs are reused
    python benchmarks/bench_peers.py --report_only            # tables and plot from the finished runs
    python benchmarks/bench_peers.py --smoke                  # 1 minute on the bundled sample corpus (peers skipped
                                                              # when their venv is absent; the suite runs this)

Each peer runs in its own virtual environment, made by `--setup` outside the repository (`--venvs`, default
~/.cache/vaswani_hf_bench/venvs; benchmarks/peers/peer_setup.py says what goes in). run_translation.py itself cannot
be fetched at benchmark time: benchmarks/peers/peer_marian.py is the equivalent script, written here.
Per system: updates, real (non-padding) target tokens/s over the training loop, padding share, peak RSS of the process
tree (sampled from /proc), launch to first update, where the loop's time goes, and validation BLEU (greedy at every
checkpoint, beam 4 at 1/4, 1/2 and all of the budget: 10 / 20 / 40 minutes by default), scored after training with the
same sacreBLEU call for all, and the training minutes to a fixed greedy BLEU (`--target_bleu`).
Runs go to the work folder (`--work_dir`, default ~/.cache/vaswani_hf_bench/work/<tag>; a finished run is reused
unless `--rerun`); results to benchmarks/results/peers[_TAG].{json,md} and peers[_TAG]_time_to_bleu.png.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks" / "peers"))

import peer_data  # noqa: E402
import peer_report  # noqa: E402
import peer_setup  # noqa: E402
import peer_systems  # noqa: E402
from peer_monitor import loadavg, processor, run_watched, thread_env  # noqa: E402

from vaswani_hf import io  # noqa: E402
from vaswani_hf.cli import contract  # noqa: E402
from vaswani_hf.settings import positive_int  # noqa: E402

CACHE = Path.home() / ".cache" / "vaswani_hf_bench"
MULTI30K = Path(os.environ.get("VASWANI_MULTI30K_DIR", REPO.parent / "shared" / "data" / "multi30k"))
BEAM_FRACTIONS = (0.25, 0.5, 1.0)
RUN_MARK = ".bench_peers_run"  # a run folder this benchmark made (and may replace)


def build_parser():
    parser = contract.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=None, help="training budget per system (default 40; smoke 1)")
    parser.add_argument(
        "--systems", default=",".join(peer_systems.SYSTEMS), help=f"comma-separated: {', '.join(peer_systems.SYSTEMS)}"
    )
    parser.add_argument("--repeats", type=positive_int, default=1, help="rounds of every system, interleaved")
    parser.add_argument(
        "--checkpoints",
        type=positive_int,
        default=None,
        help="checkpoints per run, evenly spaced (default 8; smoke 4)",
    )
    parser.add_argument(
        "--score",
        choices=("all", "none"),
        default="all",
        help="score the checkpoints after training (all) or measure speed only (none: no BLEU)",
    )
    parser.add_argument("--target_bleu", type=float, default=30.0, help="greedy validation BLEU for time-to-BLEU")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--max_tokens", type=positive_int, default=1024, help="target tokens per batch")
    parser.add_argument("--smoke", action="store_true", help="1-minute budget on the bundled sample corpus")
    parser.add_argument("--setup", action="store_true", help="create the missing peers' virtual environments")
    parser.add_argument("--eole_version", default="0.6.4")
    parser.add_argument(
        "--eole_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the eole config, e.g. training.num_workers=0 (YAML value)",
    )
    parser.add_argument("--venvs", default=str(peer_setup.DEFAULT_ROOT), help="where the peers' venvs live")
    parser.add_argument(
        "--work_dir", default=None, help="runs and shared data (default ~/.cache/vaswani_hf_bench/work/<tag>)"
    )
    parser.add_argument("--results_dir", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--tag", default=None, help="suffix of the result files (default: none; smoke: smoke)")
    parser.add_argument("--multi30k", default=str(MULTI30K), help="Multi30k folder (with tok/)")
    parser.add_argument("--vocab_size", type=positive_int, default=None, help="joint BPE size (8000; smoke 2000)")
    parser.add_argument(
        "--max_valid",
        type=int,
        default=None,
        help="score only the first N validation sentences (default: all; smoke: 20)",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="every system's training precision (bf16: mixed precision, autocast on a CPU); the default tag of a "
        "bf16 run is bf16, so that its runs never mix with fp32 ones",
    )
    parser.add_argument(
        "--model_size",
        choices=tuple(peer_systems.MODEL_SIZES),
        default="multi30k",
        help="the recipe's 6M model, or the paper's base sizes on the same data (tag default: base)",
    )
    parser.add_argument("--rerun", action="store_true", help="train again even where a finished run exists")
    parser.add_argument("--report_only", action="store_true", help="write the report from the finished runs")
    return parser


def check(args) -> None:
    """Every check before any work: a bad option or a missing corpus is one line and exit 2."""
    args.systems = list(dict.fromkeys(s.strip() for s in args.systems.split(",") if s.strip()))  # each once
    unknown = [s for s in args.systems if s not in peer_systems.SYSTEMS]
    if unknown or not args.systems:
        raise io.UsageError(
            f"--systems: unknown {unknown or 'empty list'}; choose from {', '.join(peer_systems.SYSTEMS)}"
        )
    args.minutes = args.minutes if args.minutes is not None else (1.0 if args.smoke else 40.0)
    if not math.isfinite(args.minutes) or args.minutes < 0 or (args.minutes == 0 and not args.setup):
        raise io.UsageError(f"--minutes must be > 0 (0 only with --setup, to create the venvs), got {args.minutes:g}")
    args.checkpoints = args.checkpoints or (4 if args.smoke else 8)
    args.vocab_size = args.vocab_size or (2000 if args.smoke else 8000)
    args.max_valid = args.max_valid if args.max_valid is not None else (20 if args.smoke else 0)
    default_tag = "_".join(
        x for x in ("smoke" if args.smoke else "", args.model_size if args.model_size != "multi30k" else "") if x
    )
    default_tag += ("_" if default_tag else "") + "bf16" if args.precision == "bf16" else ""
    args.tag = args.tag if args.tag is not None else default_tag
    overrides = {}
    for item in args.eole_set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise io.UsageError(f"--eole_set wants KEY=VALUE (e.g. training.num_workers=0), got {item!r}")
        import yaml

        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise io.UsageError(f"--eole_set {item}: {value!r} is not a YAML value (quote strings, close brackets)")
    args.eole_overrides = overrides
    check_places(args)
    folder, splits = peer_data.corpus_source(args.smoke, Path(args.multi30k))
    missing = peer_data.missing_corpus_files(folder, splits)
    if missing and not args.report_only and args.minutes > 0:
        raise io.UsageError(f"corpus file not found: {missing[0]} (--multi30k names the folder holding tok/)")
    args.corpus = (folder, splits)
    args.work = Path(args.work_dir) if args.work_dir else CACHE / "work" / (args.tag or "full")


def check_places(args) -> None:
    """The tag names files and a folder: plain characters only; the results folder must be a folder."""
    if args.tag and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.tag):
        raise io.UsageError(f"--tag {args.tag!r}: use letters, digits, '_', '.' and '-' (it names result files)")
    results = Path(args.results_dir)
    if results.exists() and not results.is_dir():
        raise io.UsageError(f"--results_dir {results}: exists and is not a folder; name a folder")
    if args.max_valid is not None and args.max_valid < 0:
        raise io.UsageError(f"--max_valid must be >= 0 (0: all validation sentences), got {args.max_valid}")


def check_ours(out: Path) -> None:
    """A run folder is replaced only when this benchmark made it."""
    if out.exists() and not any((out / name).exists() for name in (RUN_MARK, "command.json", "result.json")):
        raise io.UsageError(f"{out} exists and was not made by this benchmark: move it, or choose another --work_dir")


def available(args) -> list[str]:
    """The systems that can run: ours always; a peer once its venv is ready (created here with --setup)."""
    root, ready = Path(args.venvs), []
    for system in args.systems:
        if system == "ours":
            ready.append(system)
            continue
        venv = peer_systems.VENV[system]
        if not peer_setup.ready(root, venv) and args.setup:
            args.work.mkdir(parents=True, exist_ok=True)
            peer_setup.create(root, venv, args.eole_version, args.work / f"setup-{venv}.log")
        if peer_setup.ready(root, venv):
            ready.append(system)
        else:
            print(f"skipping {system}: no virtual environment at {root / venv} (create it with --setup)", flush=True)
    return ready


def marks_s(minutes: float, checkpoints: int) -> list[float]:
    """Training seconds of the evenly spaced checkpoints before the final one (which ends the budget)."""
    return [minutes * 60 * k / checkpoints for k in range(1, checkpoints)]


def train(system: str, args, shared, spec, out: Path) -> dict:
    events = out / "events.jsonl"
    root = Path(args.venvs)
    marks = marks_s(args.minutes, args.checkpoints)
    if system == "ours":
        command = peer_systems.ours_command(
            shared, out, events, args.minutes, args.minutes / args.checkpoints, args.threads, spec
        )
    elif system == "eole":
        config = peer_systems.write_eole_config(spec, shared, out, args.eole_overrides)
        command = peer_systems.eole_command(
            peer_setup.python(root, "eole"), config, events, args.minutes, marks, args.threads
        )
    else:
        command = peer_systems.marian_command(
            peer_setup.python(root, "marian"),
            spec,
            shared,
            out,
            events,
            args.minutes,
            marks,
            args.threads,
            group_by="target" if system == "marian-target" else "source",
        )
    (out / "command.json").write_text(json.dumps(command, indent=1), encoding="utf-8")
    watch = run_watched(
        command, out / "train.log", env=thread_env(args.threads), cwd=str(REPO), timeout_s=args.minutes * 60 + 1800
    )
    if watch["rc"] != 0:
        tail = (out / "train.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        raise io.RunFailure(
            f"{system} training failed (exit {watch['rc']}): {tail[0] if tail else ''} (log: {out / 'train.log'})"
        )
    return watch


def translate(system: str, checkpoint: str, beams: int, args, shared, out: Path) -> list[str]:
    root, env = Path(args.venvs), thread_env(args.threads)
    if system == "ours":
        return peer_systems.translate_ours(checkpoint, shared, beams, args.threads)
    if system == "eole":
        return peer_systems.translate_eole(peer_setup.python(root, "eole"), checkpoint, shared, beams, out, env)
    return peer_systems.translate_marian(
        peer_setup.python(root, "marian"), checkpoint, shared, beams, out, env, args.threads
    )


def evaluate(system: str, events: list[dict], args, shared, out: Path) -> tuple[list[dict], dict]:
    """Greedy validation BLEU at every checkpoint, beam 4 at the checkpoints nearest 1/4, 1/2 and all of the
    budget; (curve, decoding seconds)."""
    import time

    from vaswani_hf.io import read_lines

    references = read_lines(f"{shared.valid}.de")
    saved = {e["path"]: e for e in events if e["event"] == "checkpoint" and Path(e["path"]).is_dir()}
    points = sorted(saved.values(), key=lambda e: e["train_s"])
    beam_at = (
        {min(points, key=lambda p: abs(p["train_s"] - f * args.minutes * 60))["path"] for f in BEAM_FRACTIONS}
        if points
        else set()
    )
    curve, seconds = [], {"greedy": [], "beam4": []}
    (out / "hypotheses").mkdir(exist_ok=True)
    for point in points:
        entry = {"minutes": round(point["train_s"] / 60, 2), "step": point["step"], "greedy": None, "beam4": None}
        for beams, key in ((1, "greedy"), (4, "beam4")):
            if beams == 4 and point["path"] not in beam_at:
                continue
            started = time.perf_counter()
            hypotheses = [
                " ".join(h.split()) for h in translate(system, point["path"], beams, args, shared, out / "hypotheses")
            ]
            seconds[key].append(round(time.perf_counter() - started, 1))
            entry[key] = round(peer_data.score(hypotheses, references), 2)
        print(
            f"  [{system}] {entry['minutes']:.1f} min, step {entry['step']}: greedy {entry['greedy']}"
            + (f", beam 4 {entry['beam4']}" if entry["beam4"] is not None else ""),
            flush=True,
        )
        curve.append(entry)
    return curve, seconds


def run_one(system: str, round_index: int, args, shared, spec) -> dict:
    out = args.work / "runs" / f"{system}-r{round_index}"
    done = out / "result.json"
    if done.is_file() and not args.rerun:
        finished = json.loads(done.read_text(encoding="utf-8"))
        if finished.get("score", "all") != args.score:
            raise io.UsageError(
                f"the finished run in {out} was made with --score {finished.get('score', 'all')}, "
                f"not {args.score}: pass --rerun, or another --tag / --work_dir"
            )
        print(f"[{system} round {round_index}] reusing the finished run in {out}", flush=True)
        return finished
    if out.exists():
        check_ours(out)
        shutil.rmtree(out)  # this benchmark's own unfinished or replaced run
    out.mkdir(parents=True)
    (out / RUN_MARK).write_text("made by benchmarks/bench_peers.py; replaced by its next run\n", encoding="utf-8")
    print(f"[{system} round {round_index}] training for {args.minutes:g} min, load {loadavg()}", flush=True)
    watch = train(system, args, shared, spec, out)
    events = peer_report.read_events(out / "events.jsonl")
    curve, seconds = evaluate(system, events, args, shared, out) if args.score == "all" else ([], {})
    summary = peer_report.summarize(system, watch, events, curve, args.minutes, args.target_bleu, seconds)
    summary.update(
        round=round_index,
        minutes=args.minutes,
        checkpoints=args.checkpoints,
        score=args.score,
        started=datetime.datetime.fromtimestamp(watch["launched_at"]).isoformat(timespec="seconds"),
    )
    summary["command"] = json.loads((out / "command.json").read_text(encoding="utf-8"))
    metrics = out / "model" / "metrics.json"
    if system == "ours" and metrics.is_file():  # our run's own account of its stages (run_clock)
        ours = json.loads(metrics.read_text(encoding="utf-8"))
        summary["run_clock"] = ours.get("run_clock")
        summary["own_count"] = {k: ours.get(k) for k in ("train_tgt_tokens", "padding_share_tgt", "global_step")}
    print(
        f"  [{system}] {summary['updates']:,} updates, {summary['real_tgt_tokens_per_s']:,.0f} real target "
        f"tokens/s, padding {summary['padding_share_tgt']:.1%}, peak RSS {summary['peak_rss_gib']:.2f} GiB",
        flush=True,
    )
    done.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def machine() -> dict:
    """The processor (its name and widest vector unit: the ratios between systems depend on it), platform, load."""
    cpu = processor()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu["cpu_model"],
        "vector_isa": cpu["vector_isa"],
        "amx": cpu["amx"],
        "platform": platform.platform(),
        "load_at_start": loadavg(),
    }


def report(args, runs: list[dict], shared, spec, systems: list[str], started: dict) -> Path:
    """peers[_TAG].{json,md,png} from `runs`; the budget and checkpoint count are the runs' own (--report_only)."""
    root = Path(args.venvs)
    settings = {(r.get("minutes", args.minutes), r.get("checkpoints", args.checkpoints)) for r in runs}
    if len(settings) > 1:
        raise io.UsageError(
            f"the finished runs in {args.work} used different budgets or checkpoint counts "
            f"({sorted(settings)}); report them from separate work folders"
        )
    if runs:
        args.minutes, args.checkpoints = settings.pop()
        started["load_at_start"] = runs[0]["load"]["load_before"]
    versions = {"ours": peer_setup.versions(sys.executable, "ours")}
    versions.update(
        {
            s: peer_setup.versions(peer_setup.python(root, peer_systems.VENV[s]), peer_systems.VENV[s])
            for s in systems
            if s != "ours"
        }
    )
    result = {
        "title_note": "**Smoke run: not a measurement.** " if args.smoke else "",
        "command": " ".join(args.argv) or "(defaults)",
        "date": datetime.date.today().isoformat(),
        "minutes": args.minutes,
        "checkpoints": args.checkpoints,
        "threads": args.threads,
        "target_bleu": args.target_bleu,
        "spec": spec,
        "eole_overrides": args.eole_overrides,
        "score": "none" if any(r.get("score") == "none" or not r.get("curve") for r in runs) else args.score,
        "data": {
            "train_pairs": shared.train_pairs,
            "valid_pairs": shared.valid_pairs,
            "vocab_size": shared.vocab_size,
            "source": str(args.corpus[0]),
        },
        "machine": started,
        "versions": versions,
        "systems": peer_report.aggregate(runs, args.target_bleu),
        "runs": runs,
    }
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    stem = "peers" + (f"_{args.tag}" if args.tag else "")
    result["page"] = f"{stem}.md"
    (results / f"{stem}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (results / f"{stem}.md").write_text(peer_report.markdown(result), encoding="utf-8")
    if any(r["curve"] for r in runs):
        peer_report.plot(result, results / f"{stem}_time_to_bleu.png")
    print(f"wrote {results / (stem + '.md')}", flush=True)
    return results / f"{stem}.json"


def rotated(systems: list[str], round_index: int) -> list[str]:
    """Round r starts with the r-th system: no system always runs first (a fresh machine) or last."""
    shift = (round_index - 1) % len(systems)
    return systems[shift:] + systems[:shift]


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(argv)
    check(args)
    systems = available(args)
    if args.minutes == 0:  # --setup only
        return 0
    started = machine()
    for round_index in range(1, args.repeats + 1):  # before any work: no folder of someone else's is replaced
        for system in systems:
            check_ours(args.work / "runs" / f"{system}-r{round_index}")
    record = args.work / "data" / "shared.json"
    if args.report_only and not record.is_file():
        raise io.UsageError(f"--report_only: no finished benchmark data in {args.work} (no {record})")
    args.work.mkdir(parents=True, exist_ok=True)
    shared = (
        peer_data.SharedData.load(record)
        if args.report_only
        else peer_data.prepare(args.work, *args.corpus, args.vocab_size, args.max_valid)
    )
    spec = peer_systems.spec_from_recipe(args.max_tokens, args.model_size, args.precision == "bf16")
    runs = []
    for round_index in range(1, args.repeats + 1):
        # (finished runs are read in the systems' order; their own start times, where recorded, give the real one)
        for system in systems if args.report_only else rotated(systems, round_index):
            if args.report_only:
                done = args.work / "runs" / f"{system}-r{round_index}" / "result.json"
                runs += [json.loads(done.read_text(encoding="utf-8"))] if done.is_file() else []
            else:
                runs.append(run_one(system, round_index, args, shared, spec))
    report(args, runs, shared, spec, systems, started)
    return 0


if __name__ == "__main__":
    sys.exit(contract.run_cli(main))
