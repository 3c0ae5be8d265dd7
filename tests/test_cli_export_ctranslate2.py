"""The command-line contract of `vaswani-export-ctranslate2` (vaswani_hf.cli.export_ctranslate2), for every input class
that applies to it: a broken model or tokenizer folder, an --out_dir that exists, is a file or is the model folder, a
bad --max_positions, Ctrl-C. What each case asserts, and the shared assets: cli_contract.py.
"""

from __future__ import annotations

import pytest
from cli_contract import (
    PAGE,
    Call,
    Cases,
    PathCase,
    Writer,
    copy,
    earlier_output,
    model_classes,
    model_output_classes,
    write,
)

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

case = Cases(
    "export_ctranslate2",
    refused=lambda t: ["--model_dir", t / "absent", "--out_dir", t / "ct2"],
    run=lambda a, t: ["--model_dir", a.model, "--out_dir", t / "ct2"],
    paths=[
        PathCase(
            "export_ctranslate2",
            lambda f, a: {"--model_dir": copy(a.model, f / "model"), "--tokenizer": copy(a.model, f / "tokenizer")},
            lambda i, o, w: [
                "--model_dir",
                i["--model_dir"],
                "--tokenizer",
                i["--tokenizer"],
                "--out_dir",
                o,
                *["--overwrite"][:w],
            ],
            "--out_dir",
            roles=("--model_dir", "--tokenizer"),
        )
    ],
    writers=[Writer("export_ctranslate2", None, "--out_dir", 16 * PAGE)],
)


model_classes(case, "--model_dir", lambda t, a, m: ["--model_dir", m, "--out_dir", t / "ct2"])
model_output_classes(case, "--out_dir", lambda model, out: ["--model_dir", model, "--out_dir", out])


@case("tokenizer-folder-without-tokenizer-json")
def _(t, a):
    (t / "tok").mkdir()
    return Call(
        ["--model_dir", a.model, "--tokenizer", t / "tok", "--out_dir", t / "ct2"],
        2,
        ("--tokenizer", str(t / "tok"), "no tokenizer.json"),
    )


@case("out-dir-exists")
def _(t, a):
    write(t / "ct2" / "mine.txt", "keep")
    return Call(["--model_dir", a.model, "--out_dir", t / "ct2"], 2, ("--out_dir", str(t / "ct2"), "--overwrite"))


@case("out-dir-exists-overwrite")
def _(t, a):
    from vaswani_hf.export.ctranslate2_spec import CT2_FOLDER

    earlier_output(t / "ct2", CT2_FOLDER)

    def check(stdout, stderr):
        assert not (t / "ct2" / "mine.txt").exists() and (t / "ct2" / "model.bin").is_file()

    return Call(
        ["--model_dir", a.model, "--out_dir", t / "ct2", "--overwrite"], 0, may_change=(t / "ct2",), check=check
    )


@case("out-dir-foreign-overwrite")
def _(t, a):
    write(t / "ct2" / "mine.txt", "precious")
    return Call(
        ["--model_dir", a.model, "--out_dir", t / "ct2", "--overwrite"],
        2,
        ("--out_dir", "not an earlier CTranslate2 model folder", "mine.txt"),
    )


@case("out-dir-inside-the-model-dir")
def _(t, a):
    folder = copy(a.model, t / "model")
    return Call(["--model_dir", folder, "--out_dir", folder / "ct2"], 2, ("--out_dir", "lies inside --model_dir"))


@case("max-positions-0")
def _(t, a):
    return Call(["--model_dir", a.model, "--out_dir", t / "ct2", "--max_positions", "0"], 2, ("--max_positions",))


@case("ctrl-c")
def _(t, a):
    return Call(
        ["--model_dir", a.model, "--out_dir", t / "ct2"],
        130,
        ("interrupted",),
        interrupt="vaswani_hf.export.ctranslate2_spec._metadata",
    )  # inside the atomically written folder


test_cli_contract = case.contract_test()  # every case above
