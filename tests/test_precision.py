"""The precision of decoding and training (vaswani_hf.precision): what `--dtype auto` and `bf16: auto` choose from a
processor's capabilities and a model's size, the one line that says why, and that bf16 and int8 decoding give valid
translations through the tools users run.

No test here depends on this machine's processor: the choice takes the capabilities as an argument (the flags of an
AMX Xeon, an AMD Zen 4 and an AVX2-only processor below), and bf16 / int8 outputs are checked for what a
translation must be, never for equality with fp32 (their kernels differ from one processor to the next).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from translation_model import LINES, REPO

from vaswani_hf import precision
from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.errors import UsageError
from vaswani_hf.translation.inference import load_for_decoding, translate

pytestmark = pytest.mark.usefixtures("one_thread")

XEON_AMX = {  # Sapphire Rapids: AMX tiles and AVX-512 BF16
    "cpu_name": "Intel(R) Xeon(R) Platinum 8480+",
    "avx2": True,
    "avx512_f": True,
    "avx512_vnni": True,
    "avx512_bf16": True,
    "amx_tile": True,
    "amx_bf16": True,
    "amx_int8": True,
}
ZEN4 = {"cpu_name": "AMD EPYC 9654", "avx2": True, "avx512_f": True, "avx512_vnni": True, "avx512_bf16": True}
ICE_LAKE = {"cpu_name": "Intel(R) Xeon(R) Gold 6338", "avx2": True, "avx512_f": True, "avx512_vnni": True}
AVX2_ONLY = {"cpu_name": "AMD EPYC 7763", "avx2": True, "amx_bf16": False, "avx512_bf16": False}


@pytest.mark.parametrize(
    "capabilities, units, int8",
    [
        (XEON_AMX, "amx", "amx_int8"),
        (ZEN4, "avx512_bf16", "vnni"),
        (ICE_LAKE, "none", "vnni"),
        (AVX2_ONLY, "none", "avx2"),
        ({}, "none", "none"),
    ],
)
def test_the_units_are_named_from_the_processor_flags(capabilities, units, int8):
    hardware = precision.hardware_of("cpu", capabilities)
    assert (hardware.units, hardware.int8) == (units, int8)
    assert hardware.report().startswith(capabilities.get("cpu_name", "cpu"))


def test_linux_cpuinfo_flags_are_read_by_torchs_names():
    text = "processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
    text += "processor\t: 1\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
    capabilities = precision.capabilities_of_cpuinfo(text)
    assert capabilities["cpu_name"] == "AMD EPYC 9654" and capabilities["avx512_f"]
    assert precision.hardware_of("cpu", capabilities).units == "avx512_bf16"


@pytest.mark.parametrize("capabilities, kind", [(XEON_AMX, "amx"), (ZEN4, "avx512_bf16")])
def test_auto_is_bf16_from_the_measured_size_on_a_processor_with_bf16_units(capabilities, kind):
    hardware = precision.hardware_of("cpu", capabilities)
    threshold = precision.BF16_MIN_PARAMETERS["decoding"][kind]
    small = precision.choose("auto", hardware, max(threshold - 1, 0))
    large = precision.choose("auto", hardware, threshold + 63_000_000)
    assert large.name == "bf16" and large.dtype is torch.bfloat16
    assert "reach" in large.line() and capabilities["cpu_name"] in large.line()
    if threshold > 0:
        assert small.name == "fp32" and "below" in small.line()


@pytest.mark.parametrize("capabilities", [AVX2_ONLY, ICE_LAKE, {}])
def test_auto_stays_fp32_where_bf16_is_emulated_whatever_the_size(capabilities):
    choice = precision.choose("auto", precision.hardware_of("cpu", capabilities), 10**10)
    assert choice.name == "fp32" and choice.dtype is torch.float32
    assert "no bf16 matrix units" in choice.line() and "emulated" in choice.line()


def test_the_choice_is_one_line_naming_what_was_asked_and_why():
    for asked in precision.DTYPE.choices:
        line = precision.choose(asked, precision.hardware_of("cpu", ZEN4), 63_000_000).line()
        assert line.startswith("precision: ") and "\n" not in line
        assert ("auto: " in line) == (asked == "auto")
    emulated = precision.choose("bf16", precision.hardware_of("cpu", AVX2_ONLY), 63_000_000)
    assert emulated.name == "bf16" and "slower than fp32" in emulated.line()  # kept, with the warning
    assert "VNNI" in precision.choose("int8", precision.hardware_of("cpu", ZEN4), 1).line()


def test_impossible_or_unknown_precisions_are_refused():
    gpu = precision.Hardware("cuda", "cuda", "none", "an accelerator")
    with pytest.raises(UsageError, match="int8 .* runs on the CPU only, not on cuda"):
        precision.choose("int8", gpu, 63_000_000)
    assert precision.choose("auto", gpu, 1).name == "bf16"  # the measured threshold for CUDA is 0
    with pytest.raises(SettingError, match=r"dtype must be one of 'fp32', 'bf16', 'fp16', 'int8', 'auto'"):
        precision.choose("int4", precision.hardware_of("cpu", ZEN4), 1)


def test_training_auto_resolves_like_decoding_and_explicit_values_stay():
    hardware = precision.hardware_of("cpu", XEON_AMX)
    threshold = precision.BF16_MIN_PARAMETERS["training"]["amx"]
    assert precision.choose_training_bf16(True, hardware, 1).name == "bf16"
    assert precision.choose_training_bf16(False, hardware, 10**10).name == "fp32"
    auto = precision.choose_training_bf16("auto", hardware, threshold)
    assert auto.name == "bf16" and auto.line().startswith("precision: bf16 (bf16: auto: this CPU")
    emulated = precision.choose_training_bf16("auto", precision.hardware_of("cpu", AVX2_ONLY), 10**10)
    assert emulated.name == "fp32" and "emulated" in emulated.line()


# ------------------------------------------------------------------------------------------ bf16 and int8 decoding


def _valid(outputs: list[str]) -> None:
    """What any translation of LINES must be: one single-line string per line, empty exactly for the empty lines,
    and depending on the input (the tiny model copies its input)."""
    assert len(outputs) == len(LINES) and all(isinstance(o, str) and "\n" not in o for o in outputs)
    assert [o == "" for o in outputs] == [not line.strip() for line in LINES]
    assert len({o for o in outputs if o}) >= 3, outputs


@pytest.mark.parametrize("dtype", ["bf16", "int8", "auto"])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_bf16_and_int8_decode_valid_translations(saved_folder, dtype, num_beams):
    model, tokenizer, choice = load_for_decoding(saved_folder, "cpu", dtype)
    if choice.name == "int8":
        assert isinstance(model.lm_head, torch.ao.nn.quantized.dynamic.Linear)
        assert not any(type(module) is torch.nn.Linear for module in model.modules())  # every projection int8
    else:
        assert model.dtype == choice.dtype
    _valid(translate(model, tokenizer, LINES, num_beams=num_beams, progress=False))


def test_autocast_over_fp32_weights_still_decodes(model, tokenizer):
    """translate(dtype="bf16") on an fp32 model: autocast (with its weight casts kept, outside inference mode)."""
    _valid(translate(model, tokenizer, LINES, num_beams=4, dtype="bf16", progress=False))
    with pytest.raises(UsageError, match="dtype auto is chosen when the model is loaded"):
        translate(model, tokenizer, LINES, dtype="auto", progress=False)


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", ["auto", "bf16", "int8"])
def test_translate_tool_decodes_in_the_asked_precision_and_says_so(saved_folder, tmp_path, capsys, dtype):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    argv = [str(source), "--model", str(saved_folder), "--output", str(output), "--dtype", dtype, "--no_progress"]
    argv += ["--device", "cpu"]  # auto's choice on a CPU (a CUDA GPU would choose bf16 for any size)
    assert _tool("translate").main(argv) == 0
    _valid(output.read_text(encoding="utf-8").split("\n")[:-1])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("precision: ")]
    assert len(lines) == 1 and (dtype != "auto" or "fp32 (auto: " in lines[0])  # a tiny model: fp32 anywhere


def test_evaluate_tool_takes_the_same_dtype(saved_folder, tmp_path, capsys):
    source, references, scores = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "scores.json"
    texts = [line.strip() for line in LINES if line.strip()]
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    references.write_text("\n".join(texts) + "\n", encoding="utf-8")
    argv = ["--model", str(saved_folder), "--source", str(source), "--references", str(references), "--device", "cpu"]
    assert _tool("evaluate_translations").main([*argv, "--out", str(scores), "--dtype", "int8"]) == 0
    assert '"precision": "int8"' in scores.read_text(encoding="utf-8")
    assert "precision: int8 (asked for" in capsys.readouterr().err
    assert _tool("evaluate_translations").main([*argv, "--dtype", "int4"]) == 2
    assert "argument --dtype: invalid choice: 'int4'" in capsys.readouterr().err


def test_the_pipeline_and_datasets_map_decode_in_the_asked_precision(saved_folder):
    """The translation pipeline around a bf16 model, and `translate_batch_fn` loading a folder in int8 (what
    `Dataset.map` runs), give valid translations."""
    from vaswani_hf.translation.inference import translate_batch_fn, translation_pipeline

    model, tokenizer, _ = load_for_decoding(saved_folder, "cpu", "bf16")
    texts = [line.strip() for line in LINES if line.strip()]
    outputs = [item["translation_text"] for item in translation_pipeline(model, tokenizer)(texts, num_beams=4)]
    assert len(outputs) == len(texts) and len(set(outputs)) >= 3 and all("\n" not in o for o in outputs)
    mapped = translate_batch_fn(str(saved_folder), column="en", output_column="de", dtype="int8")({"en": LINES})
    _valid(mapped["de"])
