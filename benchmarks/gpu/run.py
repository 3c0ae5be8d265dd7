#!/usr/bin/env python
"""The GPU check in one command: every figure the project needs from a GPU, in at most 8 minutes on one H100.

    python benchmarks/gpu/run.py --out DIR            # on the GPU machine (benchmarks/gpu/run_on_gpu.sh installs
                                                      # the carried wheels first; README.md beside this file)
    python benchmarks/gpu/run.py --out DIR --smoke    # every stage on the CPU at tiny sizes, in under a minute

Stages, in order, each in its own process with its own time budget (`STAGES`): a stage that runs out of time is
cut (its process group killed) and the report says so, keeping what the stage had recorded until then. The smoke
run keeps the stages in its own process (one interpreter start instead of seven) unless `--isolated`. After every
stage the runner rewrites DIR/gpu_<date>.json and DIR/gpu_<date>.md, so a command cut from outside still leaves the
stages done so far. The budgets add up to less than 8 minutes; `--total_budget` caps the whole check.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import report  # noqa: E402
from common import Context, Recorder, SkipStage, first_line  # noqa: E402

# (name, module, budget in seconds on the GPU, budget in smoke mode): the order is the order of the check. The smoke
# budgets are generous (a shared CPU can be 5x slower than a quiet one): in-process they only bound the stages'
# own subprocesses (pytest, scripts/train.py); the smoke run's work takes ~40 s of CPU in all.
STAGES = [
    ("environment", "stage_environment", 25, 20),
    ("tests", "stage_tests", 70, 60),
    ("sync_debug", "stage_sync_debug", 25, 30),
    ("training_step", "stage_training_step", 140, 60),
    ("train_script", "stage_train_script", 140, 150),
    ("decoding", "stage_decoding", 50, 40),
    ("ctranslate2", "stage_ctranslate2", 15, 30),
]
TOTAL_BUDGET_S = 470  # 8 minutes less the wheel installation of run_on_gpu.sh
MIN_STAGE_S = 5  # a stage with less time than this left in the total budget is not started


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for gpu_<date>.json and .md (created)")
    p.add_argument("--smoke", action="store_true", help="every stage on the CPU at tiny sizes (the test suite's run)")
    p.add_argument("--device", default=None, help="default: cuda if torch sees one, else cpu (--smoke: cpu)")
    p.add_argument("--stages", default=None, help="comma-separated subset of: " + ",".join(s[0] for s in STAGES))
    p.add_argument("--work", default=None, help="scratch folder (corpora, runs; default: a folder under /tmp)")
    p.add_argument(
        "--total_budget",
        type=float,
        default=None,
        help=f"seconds for the whole check (default {TOTAL_BUDGET_S}; smoke: the sum of the smoke budgets)",
    )
    p.add_argument("--budget_scale", type=float, default=1.0, help="multiply every stage's budget (tests use < 1)")
    p.add_argument(
        "--isolated",
        action="store_true",
        help="smoke run with every stage in its own process, cut at its budget, as on the GPU",
    )
    p.add_argument("--stage", help=argparse.SUPPRESS)  # worker mode: run one stage in this process
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--budget", type=float, help=argparse.SUPPRESS)
    p.add_argument("--earlier", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def default_device(smoke: bool) -> str:
    if smoke:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_stage(args, name: str, budget: float, result: Path, earlier: dict) -> None:
    """One stage in this process; it records into `result` as it goes."""
    module = importlib.import_module(dict((s[0], s[1]) for s in STAGES)[name])
    ctx = Context(
        device=args.device, smoke=args.smoke, work=Path(args.work), deadline=time.monotonic() + budget, earlier=earlier
    )
    rec = Recorder(result)
    rec.flush()
    try:
        module.run(ctx, rec)
    except SkipStage as skip:
        rec.set("skipped", str(skip))


def run_worker(args) -> int:
    """Worker mode: the stage --stage, started by `launch_stage`."""
    earlier = json.loads(Path(args.earlier).read_text()) if args.earlier else {}
    run_stage(args, args.stage, args.budget, Path(args.result), earlier)
    return 0


def run_here(args, name: str, budget: float, folder: Path, earlier: dict) -> dict:
    """The smoke run's way: the stage in the runner's own process (no interpreter start per stage, so the smoke run
    fits in a minute on one CPU thread). It cannot be cut; one that overran its budget is reported so."""
    result = folder / f"{name}.json"
    started = time.monotonic()
    error_tail = None
    try:
        run_stage(args, name, budget, result, earlier)
    except Exception as error:  # noqa: BLE001 - a failed stage is reported, the next one runs
        error_tail = [*traceback.format_exc().strip().splitlines()[-10:], first_line(error)]
    record = json.loads(result.read_text()) if result.exists() else {}
    record["seconds"] = round(time.monotonic() - started, 1)
    record["budget_s"] = round(budget, 1)
    if error_tail:
        record["status"], record["error_tail"] = "failed (exception)", error_tail
    else:
        record["status"] = settled(record)
    if record["seconds"] > budget:
        record["status"] += f"; over its budget of {budget:.0f} s (in-process smoke run: not cut)"
    return record


def launch_stage(args, name: str, budget: float, folder: Path, earlier: dict) -> dict:
    """Run one stage in its own process group, cut at `budget` seconds; returns its record with a `status`."""
    result, earlier_file = folder / f"{name}.json", folder / "earlier.json"
    earlier_file.write_text(json.dumps(earlier, default=str))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--out",
        args.out,
        "--device",
        args.device,
        "--work",
        args.work,
        "--stage",
        name,
        "--result",
        str(result),
        "--budget",
        str(budget),
        "--earlier",
        str(earlier_file),
        *(["--smoke"] if args.smoke else []),
    ]
    log = folder / f"{name}.log"
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        try:
            code = proc.wait(timeout=budget)
            cut = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the stage and whatever it started (pytest, train.py)
            code, cut = proc.wait(), True
    record = json.loads(result.read_text()) if result.exists() else {}
    record["seconds"] = round(time.monotonic() - started, 1)
    record["budget_s"] = round(budget, 1)
    if cut:
        record["status"] = f"cut at its budget of {budget:.0f} s (results so far kept)"
    elif code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        record["status"] = f"failed (exit {code})"
        record["error_tail"] = tail
    else:
        record["status"] = settled(record)
    return record


def settled(record: dict) -> str:
    """The status of a stage that ended by itself: skipped, cut by its own deadline (a subprocess it ran out of
    time), or ok."""
    if "skipped" in record:
        return "skipped"
    return f"cut: {record['cut']} (results so far kept)" if "cut" in record else "ok"


def write_report(report_data: dict, out: Path) -> None:
    stem = out / f"gpu_{report_data['date']}"
    tmp = stem.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report_data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, stem.with_suffix(".json"))
    stem.with_suffix(".md").write_text(report.markdown(report_data, STAGES), encoding="utf-8")


def chosen_stages(args) -> list[tuple]:
    if not args.stages:
        return STAGES
    wanted = args.stages.split(",")
    unknown = sorted(set(wanted) - {s[0] for s in STAGES})
    if unknown:
        print(
            f"--stages: unknown {', '.join(unknown)}; choose from {', '.join(s[0] for s in STAGES)}", file=sys.stderr
        )
        sys.exit(2)
    return [s for s in STAGES if s[0] in wanted]


def main(argv=None) -> int:
    args = parse_args(argv)
    args.device = args.device or default_device(args.smoke)
    if args.stage:
        return run_worker(args)
    stages = chosen_stages(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    args.work = args.work or f"/tmp/vaswani_gpu_check_{'smoke' if args.smoke else 'gpu'}_{os.getpid()}"
    folder = Path(args.work) / "stages"
    folder.mkdir(parents=True, exist_ok=True)
    total = args.total_budget or (sum(s[3] for s in stages) * args.budget_scale if args.smoke else TOTAL_BUDGET_S)
    data = {
        "date": stamp,
        "mode": "smoke (CPU, tiny sizes)" if args.smoke else "full",
        "device": args.device,
        "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "total_budget_s": total,
        "stages": {},
    }
    started = time.monotonic()
    for name, _module, gpu_budget, smoke_budget in stages:
        left = total - (time.monotonic() - started)
        budget = min((smoke_budget if args.smoke else gpu_budget) * args.budget_scale, left)
        if budget < MIN_STAGE_S:
            data["stages"][name] = {"status": "not run: the check's total budget is spent", "budget_s": 0}
        else:
            try:
                if args.smoke and not args.isolated:
                    data["stages"][name] = run_here(args, name, budget, folder, data["stages"])
                else:
                    data["stages"][name] = launch_stage(args, name, budget, folder, data["stages"])
            except OSError as error:
                data["stages"][name] = {"status": f"failed to start: {first_line(error)}"}
        data["elapsed_s"] = round(time.monotonic() - started, 1)
        write_report(data, out)
        print(
            f"[gpu check] {name}: {data['stages'][name]['status']} ({data['stages'][name].get('seconds', 0)} s)",
            flush=True,
        )
    print(f"[gpu check] wrote {out / ('gpu_' + stamp)}.md and .json in {data['elapsed_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
