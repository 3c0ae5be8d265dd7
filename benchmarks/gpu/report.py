"""The GPU check's markdown report: a header, then each stage's status and figures (the stage module renders them)."""

from __future__ import annotations

import importlib


def markdown(data: dict, stages: list[tuple]) -> str:
    lines = [
        f"# GPU check, {data['date']}",
        "",
        f"- mode: {data['mode']}; device: {data['device']}; started {data['started_utc']} UTC; "
        f"{data.get('elapsed_s', 0)} s of a {data['total_budget_s']:.0f} s budget",
        "- written by `benchmarks/gpu/run.py` (benchmarks/gpu/README.md says what each figure means)",
        "",
    ]
    for name, module_name, *_ in stages:
        if name not in data["stages"]:
            continue
        result = data["stages"][name]
        status = result.get("status", "?")
        if result.get("skipped"):
            status = f"skipped: {result['skipped']}"
        lines += [f"## {name}", "", f"*{status}* ({result.get('seconds', 0)} s of {result.get('budget_s', 0)} s)", ""]
        try:
            lines += importlib.import_module(module_name).markdown(result)
        except (KeyError, TypeError, ValueError, IndexError) as error:  # a cut stage can leave a partial record
            lines.append(f"- (partial record, not rendered: {type(error).__name__}: {error})")
        lines += [f"  > {line}" for line in result.get("error_tail", [])]
        lines.append("")
    return "\n".join(lines)
