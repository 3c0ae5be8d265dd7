"""Stage 2, tests: the model, generation, pipeline and trainer tests with CUDA available (pytest, one timeout each).

The test suite runs on CPUs in CI; on the GPU machine torch sees a card, so code that picks a device (the Trainer,
`load_for_inference`, the pipeline) takes the CUDA paths. Failures that appear only here are listed by test id with
their first error line. Slow tests (marked `slow`: full training runs) stay out of the budget.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

from common import REPO, Context, Recorder

GPU_FILES = [
    "tests/test_modeling.py",
    "tests/test_generation_vaswani.py",
    "tests/test_beam_search.py",
    "tests/test_pipeline.py",
    "tests/test_training_trainer.py",
    "tests/test_training_objective.py",
]
SMOKE_FILES = ["tests/test_benchmarks.py::test_decoding_benchmark_counts_rows_of_the_output_projection"]


def command(ctx: Context, junit: str) -> list[str]:
    files = SMOKE_FILES if ctx.smoke else GPU_FILES
    parallel = ["-n", "8"] if not ctx.smoke and importlib.util.find_spec("xdist") else ["-p", "no:xdist"]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-o",
        "addopts=",
        "-p",
        "no:cacheprovider",
        *parallel,
        "-m",
        "not slow",
        "--timeout",
        "120",
        "--junitxml",
        junit,
        *files,
    ]


def failures(junit: str) -> tuple[dict, list[dict]]:
    """(counts, failed tests with their first message line) from pytest's JUnit XML."""
    root = ElementTree.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in suite.iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is not None:
                message = (node.get("message") or node.text or "").strip().splitlines()
                failed.append(
                    {
                        "test": f"{case.get('classname')}::{case.get('name')}",
                        "message": (message[0] if message else kind)[:300],
                    }
                )
    return counts, failed


def run(ctx: Context, rec: Recorder) -> None:
    junit = str(ctx.work / "tests_junit.xml")
    cmd = command(ctx, junit)
    rec.set("command", " ".join(cmd[1:]))
    try:
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=max(ctx.left() - 5, 1))
    except subprocess.TimeoutExpired as timeout:
        tail = (
            (timeout.stdout or b"").decode(errors="replace")
            if isinstance(timeout.stdout, bytes)
            else (timeout.stdout or "")
        )
        rec.set("cut", "pytest ran out of the stage's budget")
        rec.set("output_tail", tail.strip().splitlines()[-8:])
        return
    rec.set("exit_code", done.returncode)
    rec.set("summary", (done.stdout.strip().splitlines() or [""])[-1])
    try:
        counts, failed = failures(junit)
    except (OSError, ElementTree.ParseError):
        rec.set("output_tail", (done.stdout + done.stderr).strip().splitlines()[-8:])
        return
    rec.set("counts", counts)
    rec.set("failed", failed)


def markdown(result: dict) -> list[str]:
    lines = []
    if "command" in result:
        lines.append(f"- `{result['command']}`")
    if "counts" in result:
        c = result["counts"]
        passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
        lines.append(
            f"- **{passed} passed, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped** "
            f"({result.get('summary', '')})"
        )
        lines += [f"  - FAILED `{f['test']}`: {f['message']}" for f in result.get("failed", [])]
    lines += [f"  > {line}" for line in result.get("output_tail", [])]
    return lines
