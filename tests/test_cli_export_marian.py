"""The command-line contract of `vaswani-export-marian` (vaswani_hf.cli.export_marian), for every input class that
applies to it: a broken model folder, an --out that exists, is a file or is the model folder, one language given without
the other, Ctrl-C. What each case asserts, and the shared assets: cli_contract.py.
"""

from __future__ import annotations

import json

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
    "export_marian",
    refused=lambda t: ["--model_dir", t / "absent", "--out", t / "marian"],
    run=lambda a, t: ["--model_dir", a.model, "--out", t / "marian"],
    paths=[
        PathCase(
            "export_marian",
            lambda f, a: {"--model_dir": copy(a.model, f / "model")},
            lambda i, o, w: ["--model_dir", i["--model_dir"], "--out", o, *["--overwrite"][:w]],
            "--out",
        )
    ],
    writers=[Writer("export_marian", None, "--out", 16 * PAGE)],
)


model_classes(case, "--model_dir", lambda t, a, m: ["--model_dir", m, "--out", t / "marian"])
model_output_classes(case, "--out", lambda model, out: ["--model_dir", model, "--out", out])


@case("out-exists")
def _(t, a):
    write(t / "marian" / "mine.txt", "keep")
    return Call(["--model_dir", a.model, "--out", t / "marian"], 2, ("--out", str(t / "marian"), "--overwrite"))


@case("out-exists-overwrite", pytest.mark.slow)
def _(t, a):
    from vaswani_hf.export.marian import MARIAN_FOLDER

    earlier_output(t / "marian", MARIAN_FOLDER)

    def check(stdout, stderr):
        assert not (t / "marian" / "mine.txt").exists()
        assert json.loads((t / "marian" / "config.json").read_text())["model_type"] == "marian"

    return Call(
        ["--model_dir", a.model, "--out", t / "marian", "--overwrite"], 0, may_change=(t / "marian",), check=check
    )


@case("out-contains-the-model-dir-overwrite")
def _(t, a):
    folder = copy(a.model, t / "models" / "model")
    return Call(
        ["--model_dir", folder, "--out", t / "models", "--overwrite"],
        2,
        ("--out", "contains --model_dir", "whatever --overwrite says"),
    )


@case("one-language-only")
def _(t, a):
    return Call(
        ["--model_dir", a.model, "--out", t / "marian", "--source_lang", "en"], 2, ("--source_lang", "--target_lang")
    )


@case("ctrl-c")
def _(t, a):
    return Call(
        ["--model_dir", a.model, "--out", t / "marian"],
        130,
        ("interrupted",),
        interrupt="vaswani_hf.export.marian._copy_tokenizer",
    )  # inside the atomically written folder


test_cli_contract = case.contract_test()  # every case above
