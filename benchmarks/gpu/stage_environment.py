"""Stage 1, environment: the card, its driver, the versions, and the bf16 matmul ceiling measured on the spot.

The ceiling (TFLOP/s of a large bf16 matrix product, the mean of timed products after warm-ups) is the denominator
of every MFU figure in the report: a datasheet peak (989 TFLOP/s dense bf16 for an H100 SXM) is not reached by any
real kernel, so utilisation is stated against what this card did in this minute, and against the datasheet beside it.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from common import Context, Recorder, synchronize, versions

DATASHEET_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0}


def nvidia_smi() -> dict:
    if not shutil.which("nvidia-smi"):
        return {"nvidia_smi": "not found"}
    query = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    out = (
        subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
        .stdout.strip()
        .splitlines()
    )
    return {"nvidia_smi": out}


def matmul_tflops(device: str, n: int, repeats: int) -> float:
    """TFLOP/s of an n x n x n bf16 matrix product on `device` (3 warm-ups, then the mean of `repeats`)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    tflops = 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12
    return float(f"{tflops:.4g}")  # significant digits: a CPU's bf16 products can be far below 0.01 TFLOP/s


def run(ctx: Context, rec: Recorder) -> None:
    import torch

    rec.set("versions", versions())
    rec.set(
        "cuda",
        {
            "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "available": torch.cuda.is_available(),
        },
    )
    if ctx.on_gpu:
        props = torch.cuda.get_device_properties(ctx.device)
        rec.set(
            "card",
            {
                "name": props.name,
                "memory_gib": round(props.total_memory / 2**30, 1),
                "multiprocessors": props.multi_processor_count,
                "capability": f"{props.major}.{props.minor}",
            },
        )
        rec.set("driver", nvidia_smi())
        datasheet = next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in props.name), None)
        rec.set("datasheet_bf16_tflops", datasheet)
    else:
        import platform

        rec.set("card", {"name": f"CPU ({platform.processor() or platform.machine()})"})
    n, repeats = (8192, 10) if ctx.on_gpu and not ctx.smoke else (256, 3)
    rec.set("matmul", {"n": n, "repeats": repeats, "dtype": "bfloat16"})
    rec.set("bf16_matmul_tflops", matmul_tflops(ctx.device, n, repeats))


def markdown(result: dict) -> list[str]:
    lines = []
    card = result.get("card", {})
    if card:
        lines.append(
            f"- card: {card.get('name')}"
            + (
                f", {card['memory_gib']} GiB, {card['multiprocessors']} SMs, compute capability {card['capability']}"
                if "memory_gib" in card
                else ""
            )
        )
    if "driver" in result:
        lines.append(f"- nvidia-smi: {'; '.join(result['driver'].get('nvidia_smi') or [])}")
    if "versions" in result:
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items() if v))
    if "cuda" in result:
        lines.append(f"- torch CUDA {result['cuda']['torch_cuda']}, cuDNN {result['cuda']['cudnn']}")
    if "bf16_matmul_tflops" in result:
        m = result["matmul"]
        lines.append(
            f"- **bf16 matmul ceiling: {result['bf16_matmul_tflops']} TFLOP/s** ({m['n']}^3 products, mean "
            f"of {m['repeats']} after 3 warm-ups; the MFU denominator below)"
            + (f"; datasheet {result['datasheet_bf16_tflops']}" if result.get("datasheet_bf16_tflops") else "")
        )
    return lines
