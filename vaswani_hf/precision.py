"""Choose the numeric precision of decoding and training on this machine: find what its processor offers for bf16 and
int8 matrix products, and make the one choice behind `--dtype auto` (translate, evaluate, the Space,
`translate_batch_fn`) and the recipes' `bf16: auto`.

The paper trained and decoded in fp32 on P100s. On a processor with bf16 matrix units a bf16 product runs several
times faster than fp32, and a model of the base size decodes about twice as fast; on a processor without them bf16
is emulated by conversions and is slower than fp32. So the choice depends on the processor and on the model's size
(a small model spends its time outside the matrix products), and it is made here, once, from what was found:

- `matrix_units` returns the kind of bf16 units, read from the processor's flags (`torch.cpu.get_capabilities()`, or
  else /proc/cpuinfo): "amx" (Intel AMX tiles: `amx_bf16`; Sapphire Rapids and later), "avx512_bf16" (AVX-512 BF16
  dot products: `avx512_bf16`, e.g. Cooper Lake, AMD Zen 4), or "none" (AVX2, AVX-512 without BF16, other
  processors); "cuda" for a CUDA GPU with bf16 (compute capability 8.0+).
- `BF16_MIN_PARAMETERS` holds, per kind of units, the model size below which bf16 gains nothing. The sizes are set from
  benchmarks/bench_precision.py (decoding) and benchmarks/bench_training_step.py (training); today's values are
  placeholders until those are run on a quiet machine of each kind (see the constant). On a CUDA GPU auto means bf16.
- `choose` returns the dtype and its reason, as one line (`Choice.line`) that every tool prints.

int8 (`--dtype int8`, CPU only) is PyTorch's dynamic quantisation of the linear layers (`prepare_for_decoding`): the
weights are int8, the activations are quantised per batch, and the matrix products run on fbgemm's VNNI kernels where
the processor has them. It is only used when asked for, never chosen by `auto`.

No test depends on this processor: the choice takes the capabilities as an argument (tests pass the flags of an AMX,
a Zen 4 and an AVX2-only machine), and only what a user sees (the line, valid translations) is checked.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from .errors import UsageError
from .settings import settings_of

__all__ = [
    "DTYPE",
    "BF16_AUTO",
    "BF16_MIN_PARAMETERS",
    "Choice",
    "Hardware",
    "choose",
    "choose_training_bf16",
    "cpu_record",
    "cpu_capabilities",
    "hardware_of",
    "matrix_units",
    "prepare_for_decoding",
]


@dataclass
class PrecisionSettings:
    """Declare the decoding precision once, for every tool's --dtype (translate, evaluate, the Space) and for the
    API."""

    dtype: str = field(
        default="fp32",
        metadata={
            "help": "precision of decoding: fp32 (the paper); bf16 (weights cast once; fast on CPUs with AMX or "
            "AVX-512 BF16 and on GPUs); int8 (CPU: linear layers quantised dynamically); fp16 (GPUs); auto: bf16 "
            "where this processor has bf16 matrix units and the model is large enough to gain, else fp32 (the "
            "choice is printed)",
            "choices": ("fp32", "bf16", "fp16", "int8", "auto"),
        },
    )


DTYPE = settings_of(PrecisionSettings)["dtype"]

# A recipe's `bf16` key (true, false or auto; see vaswani_hf.training.recipe) leaves the choice to this module when it
# is this word.
BF16_AUTO = "auto"

# BF16_MIN_PARAMETERS holds the model size, in parameters, from which bf16 is faster than fp32, per kind of units and
# per use. On a Zen 4 (AVX-512 BF16, no AMX), quiet, 1 and 2 threads (benchmarks/results/precision_decoding.md and
# training_step_bf16*.md), bf16 gained at every size measured, down to the Multi30k recipe's 6.0M parameters:
# generate() 1.48x (1 thread) at 6.0M and 2.00x at the base size's 63M; a training step 1.19x at 6.0M and 1.50x at
# the base size. So that kind's threshold is set just below the smallest size measured. The AMX values were not
# measured on this project's machines: issue 53 measured on an AMX Xeon (2 threads) 2.06x for base-size decoding,
# 0.97x for training the 6M model and 1.30x for the base model, so training's threshold lies between those sizes,
# and decoding's is taken to be the same until a run on such a machine measures it. A kind of units that is missing
# never chooses bf16.
BF16_MIN_PARAMETERS = {
    "decoding": {"amx": 20_000_000, "avx512_bf16": 5_000_000, "cuda": 0},
    "training": {"amx": 20_000_000, "avx512_bf16": 5_000_000, "cuda": 0},
}
UNIT_NAMES = {
    "amx": "AMX (amx_bf16)",
    "avx512_bf16": "AVX-512 BF16 (avx512_bf16)",
    "cuda": "bf16 tensor cores",
    "none": "no bf16 matrix units",
}
INT8_NAMES = {
    "amx_int8": "AMX (amx_int8)",
    "vnni": "VNNI dot products",
    "avx2": "AVX2 without VNNI",
    "none": "no int8 vector instructions",
}


def cpu_capabilities() -> Mapping[str, object]:
    """Return this processor's features by torch's names (`amx_bf16`, `avx512_bf16`, `avx512_vnni`, `avx2`, ...),
    from torch's own detection (cpuinfo, torch >= 2.9), or else from the Linux flags of /proc/cpuinfo, or else
    none."""
    get = getattr(getattr(torch, "cpu", None), "get_capabilities", None)
    if get is not None:
        with contextlib.suppress(Exception):
            return dict(get())
    with contextlib.suppress(OSError):
        return capabilities_of_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    return {}


def capabilities_of_cpuinfo(text: str) -> dict[str, object]:
    """Return the features in Linux's /proc/cpuinfo text by torch's names, with the processor's name. The kernel
    writes `avx512f` where torch writes `avx512_f`; the other flags that matter here are spelled alike."""
    capabilities: dict[str, object] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags" and not any(k != "cpu_name" for k in capabilities):
            capabilities.update({flag.replace("avx512f", "avx512_f"): True for flag in value.split()})
        elif key.strip() == "model name" and "cpu_name" not in capabilities:
            capabilities["cpu_name"] = value.strip()
    return capabilities


def matrix_units(capabilities: Mapping[str, object]) -> str:
    """Return the kind of bf16 matrix units of a processor with these capabilities: "amx", "avx512_bf16" or "none"."""
    if capabilities.get("amx_bf16"):
        return "amx"
    if capabilities.get("avx512_bf16"):
        return "avx512_bf16"
    return "none"


def int8_units(capabilities: Mapping[str, object]) -> str:
    """Return what int8 products run on: "amx_int8", "vnni" (AVX-512 VNNI or AVX-VNNI dot products), "avx2" or
    "none"."""
    if capabilities.get("amx_int8"):
        return "amx_int8"
    if capabilities.get("avx512_vnni") or capabilities.get("avx_vnni"):
        return "vnni"
    return "avx2" if capabilities.get("avx2") else "none"


@dataclass(frozen=True)
class Hardware:
    """Describe where a model runs, as far as precision is concerned."""

    device_type: str  # "cpu", "cuda", "mps", ...
    units: str  # bf16 matrix units: "amx", "avx512_bf16", "cuda" or "none"
    int8: str  # what int8 products run on: "amx_int8", "vnni", "avx2" or "none" (always "none" off the CPU)
    name: str = ""  # the processor's or GPU's name

    def describe(self) -> str:
        """Return what decides bf16, as a phrase such as 'this CPU (AMD EPYC) has AVX-512 BF16 (avx512_bf16)'."""
        where = "this CPU" if self.device_type == "cpu" else f"this {self.device_type} device"
        where += f" ({self.name})" if self.name else ""
        return f"{where} has {UNIT_NAMES[self.units]}"

    def report(self) -> str:
        """Return both kinds of units for a benchmark's report, as in 'AMD EPYC: bf16 on AVX-512 BF16 (avx512_bf16),
        int8 on VNNI dot products'."""
        int8 = f", int8 on {INT8_NAMES[self.int8]}" if self.device_type == "cpu" else ""
        return f"{self.name or self.device_type}: bf16 on {UNIT_NAMES[self.units]}{int8}"


def hardware_of(device: str | torch.device, capabilities: Mapping[str, object] | None = None) -> Hardware:
    """Return the `Hardware` of `device`; a CPU's is read from `capabilities` (by default this processor's, from
    `cpu_capabilities`)."""
    device = torch.device(device)
    if device.type == "cuda":
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return Hardware("cuda", "cuda" if bf16 else "none", "none", torch.cuda.get_device_name(device))
    if device.type != "cpu":
        return Hardware(device.type, "none", "none", device.type)
    capabilities = cpu_capabilities() if capabilities is None else capabilities
    return Hardware("cpu", matrix_units(capabilities), int8_units(capabilities), str(capabilities.get("cpu_name", "")))


@dataclass(frozen=True)
class Choice:
    """Hold a precision and the reason for it: `name` is "fp32", "bf16", "fp16" or "int8", `asked` is what was asked
    for ("auto", ...), and `reason` says why `name` was chosen."""

    name: str
    asked: str
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        """Return the dtype of the weights and activations; int8 keeps fp32 activations around its int8 products."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.name, torch.float32)

    def line(self) -> str:
        """Return the one line a tool prints, such as 'precision: bf16 (auto: ...)'."""
        asked = f"{self.asked}: " if self.asked != self.name else ""
        return f"precision: {self.name} ({asked}{self.reason})"


def _millions(parameters: int) -> str:
    return f"{parameters / 1e6:.1f}M"


def _bf16_or_fp32(hardware: Hardware, parameters: int, use: str) -> tuple[bool, str]:
    """Return whether bf16 gains for a model of `parameters` on `hardware` (`use` is "decoding" or "training"), and
    the reason."""
    threshold = BF16_MIN_PARAMETERS[use].get(hardware.units)
    what = hardware.describe()
    if threshold is None:
        return False, what + (": bf16 would be emulated, slower than fp32" if hardware.device_type == "cpu" else "")
    size = f"the model's {_millions(parameters)} parameters"
    if parameters < threshold:
        return False, f"{what}, but {size} are below the {_millions(threshold)} from which bf16 {use} gains there"
    return True, f"{what}, and {size} reach the {_millions(threshold)} from which bf16 {use} gains there"


def choose(asked: str, hardware: Hardware, parameters: int) -> Choice:
    """Return the decoding precision for `asked` (a value of `DTYPE`) on `hardware` for a model of `parameters`. An
    explicit precision is kept, with a warning in the reason where it cannot pay (bf16 without units); "auto" gives
    bf16 where `_bf16_or_fp32` says it gains, and fp32 otherwise. int8 off the CPU raises a UsageError, because
    PyTorch's dynamic quantisation runs on the CPU only."""
    DTYPE.check(asked, "dtype")
    if asked == "auto":
        bf16, why = _bf16_or_fp32(hardware, parameters, "decoding")
        return Choice("bf16" if bf16 else "fp32", asked, why)
    if asked == "int8" and hardware.device_type != "cpu":
        raise UsageError(
            f"dtype int8 (dynamic quantisation) runs on the CPU only, not on {hardware.device_type}: decode on the "
            "CPU (--device cpu), or use bf16 or fp16 here"
        )
    if asked == "bf16" and hardware.units == "none":
        return Choice(asked, asked, f"asked for; {hardware.describe()}: emulated, expect it slower than fp32")
    reason = "asked for" + (f"; int8 products on {INT8_NAMES[hardware.int8]}" if asked == "int8" else "")
    return Choice(asked, asked, reason)


def choose_training_bf16(asked: bool | str, hardware: Hardware, parameters: int) -> Choice:
    """Return the training precision for a recipe's `bf16` value (true, false or "auto"): "bf16" (autocast) or
    "fp32"."""
    if asked != BF16_AUTO:
        return Choice("bf16" if asked else "fp32", "bf16" if asked else "fp32", f"bf16: {str(bool(asked)).lower()}")
    bf16, why = _bf16_or_fp32(hardware, parameters, "training")
    return Choice("bf16" if bf16 else "fp32", "bf16: auto", why)


def prepare_for_decoding(model: nn.Module, choice: Choice) -> nn.Module:
    """Put `model` in `choice`'s precision, in place, and return it. For bf16 and fp16 the weights are cast once, so
    that decoding casts nothing per step. For int8 the linear layers (the attention and feed-forward projections, and
    the output projection) are replaced by PyTorch's dynamically quantised int8 ones; the embeddings, LayerNorms and
    attention stay fp32, and the output projection becomes an int8 copy of the shared embedding, which itself stays
    fp32 for the lookups."""
    if choice.name == "int8":
        quantize_dynamic = _quantize_dynamic()
        return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return model.to(choice.dtype) if choice.dtype != next(model.parameters()).dtype else model


def _quantize_dynamic():
    """Return torch.ao's `quantize_dynamic`, wrapped so that its deprecation warnings are silenced. It is deprecated
    (its warning points to torchao), but it is still the one int8 path of eager PyTorch that needs no new dependency,
    and it is fast (fbgemm's VNNI kernels). A torch that no longer has it raises a UsageError that says so in one
    line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from torch.ao.quantization import quantize_dynamic
        except ImportError as error:  # a torch without torch.ao.quantization
            raise UsageError(
                f"dtype int8 needs torch.ao.quantization, which torch {torch.__version__} no longer has: use bf16 or fp32"
            ) from error

    def quantize(*args, **kwargs):
        with warnings.catch_warnings():  # silences the same notice, which it gives again about its quantised tensors
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*", category=UserWarning)
            return quantize_dynamic(*args, **kwargs)

    return quantize


# These are the flags that decide bf16 and int8 speed; a benchmark records them beside its numbers.
PRECISION_FLAGS = (
    "avx2",
    "avx512_f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)


def cpu_record(capabilities: Mapping[str, object] | None = None) -> dict:
    """Return this processor as a benchmark's result records it: its name, the flags of `PRECISION_FLAGS`, the kernels
    torch dispatches to (`torch.backends.cpu.get_cpu_capability()`), its bf16 and int8 units, and the logical cores."""
    capabilities = cpu_capabilities() if capabilities is None else capabilities
    hardware = hardware_of("cpu", capabilities)
    return {
        "name": str(capabilities.get("cpu_name", "")),
        "flags": {flag: bool(capabilities.get(flag)) for flag in PRECISION_FLAGS},
        "torch_kernels": torch.backends.cpu.get_cpu_capability(),
        "bf16_units": hardware.units,
        "int8_units": hardware.int8,
        "summary": hardware.report(),
    }
