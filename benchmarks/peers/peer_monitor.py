"""Running one system of the peer benchmark as a subprocess while watching it: peak resident memory of its whole
process tree (the process and every child, e.g. DataLoader workers, sampled from /proc through psutil) and the
machine's load average before, during and after. One system at a time: the benchmark never runs two together."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import psutil


def processor() -> dict:
    """This machine's processor from /proc/cpuinfo: its name and the vector units the ratios between systems
    depend on (`vector_isa`: the widest of AVX-512 / AVX2)."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.is_file() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    found = {"cpu_model": model, "avx512f": "avx512f" in flags, "avx2": "avx2" in flags, "amx": "amx_tile" in flags}
    found["vector_isa"] = "AVX-512" if found["avx512f"] else "AVX2" if found["avx2"] else "no AVX2"
    return found


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class TreeWatcher(threading.Thread):
    """Samples the summed RSS of a process tree every `interval` seconds and the 1-minute load every `load_every`."""

    def __init__(self, pid: int, interval: float = 0.5, load_every: float = 15.0):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval, self.load_every = interval, load_every
        self.peak_rss = 0
        self.peak_processes = 1
        self.loads: list[float] = []
        self.stopped = threading.Event()

    def tree_rss(self) -> tuple[int, int]:
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0, 0
        total = 0
        for process in processes:
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total, len(processes)

    def run(self) -> None:
        last_load = 0.0
        while not self.stopped.is_set():
            rss, count = self.tree_rss()
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_processes = max(self.peak_processes, count)
            if time.monotonic() - last_load >= self.load_every:
                self.loads.append(os.getloadavg()[0])
                last_load = time.monotonic()
            self.stopped.wait(self.interval)


def run_watched(
    command: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
) -> dict:
    """Run `command` (stdout and stderr to `log`) and return its exit code, wall time, peak tree RSS and load."""
    before = loadavg()
    launched = time.time()
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        watcher = TreeWatcher(process.pid)
        watcher.start()
        try:
            rc = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            rc = process.wait()
        finally:
            watcher.stopped.set()
            watcher.join()
    loads = watcher.loads or [before[0]]
    return {
        "rc": rc,
        "launched_at": launched,
        "wall_s": round(time.time() - launched, 2),
        "peak_rss_gib": round(watcher.peak_rss / 2**30, 3),
        "peak_processes": watcher.peak_processes,
        "load_before": before,
        "load_after": loadavg(),
        "load_during": {
            "min": round(min(loads), 2),
            "mean": round(sum(loads) / len(loads), 2),
            "max": round(max(loads), 2),
            "samples": len(loads),
        },
    }


def thread_env(threads: int) -> dict[str, str]:
    """The environment of every system's processes: `threads` intra-op threads, no tokenizer thread pool."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    return env
