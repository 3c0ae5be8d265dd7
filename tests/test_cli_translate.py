"""The command-line contract of `vaswani-translate` (vaswani_hf.cli.translate), for every input class that applies to
it: a broken model folder, a missing or unreadable input, byte-order marks, CRLF and lone CR, input from stdin, lines
beyond a model's positions, an existing or impossible --output, Ctrl-C. What each case asserts, and the shared assets:
cli_contract.py.
"""

from __future__ import annotations

import pytest
from cli_contract import (
    BOM,
    LATIN1,
    LINES,
    LONG,
    PAGE,
    TRANSLATE_OPTIONS,
    Assets,
    Call,
    Cases,
    PathCase,
    Reads,
    Resumable,
    Stdout,
    Writer,
    copy,
    many_lines,
    model_classes,
    run_main,
    translated,
    write,
)

pytest_plugins = ["cli_assets"]
TWENTY = [f"{LINES[i % 3]} {i}" for i in range(20)]  # several windows of 6 or 7 lines, each line its own
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _path_inputs(model: str):
    return lambda f, a: {"input": copy(a.plain, f / "plain.txt"), "--model": copy(getattr(a, model), f / model)}


def _path_argv(*engine):
    return lambda i, o, w: [
        i["input"],
        "--model",
        i["--model"],
        *engine,
        *TRANSLATE_OPTIONS,
        "--output",
        o,
        *["--overwrite"][:w],
    ]


case = Cases(
    "translate",
    refused=lambda t: [t / "absent.txt", "--model", t / "absent-model", "--output", t / "o.txt"],
    run=lambda a, t: [a.plain, "--model", a.model, *TRANSLATE_OPTIONS, "--output", t / "out.txt"],
    paths=[
        PathCase("translate", _path_inputs("model"), _path_argv(), "--output", roles=("input", "--model")),
        PathCase(
            "translate-ctranslate2",
            _path_inputs("ct2"),
            _path_argv("--engine", "ctranslate2"),
            "--output",
            roles=("input", "--model"),
        ),
    ],
    writers=[
        Writer(
            "translate",
            lambda a, t, d: [many_lines(t), "--model", a.model, *TRANSLATE_OPTIONS, "--output", d / "out.txt"],
            "--output",
            PAGE,
        )
    ],
    reads=[
        Reads(
            "translate-output",
            lambda a, t, s: [
                s,
                "--model",
                a.model,
                *TRANSLATE_OPTIONS,
                "--buffer_lines",
                "7",
                "--output",
                t / "o.txt",
            ],
            lambda a: TWENTY,
            outputs=lambda t: [t / "o.txt"],
        ),
        Reads(
            "translate-stdout",
            lambda a, t, s: [s, "--model", a.model, *TRANSLATE_OPTIONS, "--buffer_lines", "7"],
            lambda a: TWENTY,
            stdout=True,
        ),
    ],
    stdout=Stdout(lambda a, t: [many_lines(t), "--model", a.model, *TRANSLATE_OPTIONS], read_lines=1),
    resumes=[
        Resumable(
            "translate",
            lambda a, t: [
                write(t / "in" / "in.txt", TWENTY),
                "--model",
                a.model,
                *TRANSLATE_OPTIONS,
                "--buffer_lines",
                "6",
                "--output",
                t / "out.txt",
            ],
            "vaswani_hf.translation.staging.publish",
            lambda t: sorted((t / "out.txt.partial").glob("window-*.txt")),
            lambda t: t / "out.txt",
        )
    ],
)


def translate_argv(t, a, source, *extra, model=None):
    return [source, "--model", model or a.model, *TRANSLATE_OPTIONS, *extra]


model_classes(case, "--model", lambda t, a, m: translate_argv(t, a, a.plain, "--output", t / "o.txt", model=m))


@case("input-missing")
def _(t, a):
    return Call(translate_argv(t, a, t / "absent.txt"), 2, ("input file not found", str(t / "absent.txt")))


@case("input-is-a-folder")
def _(t, a):
    (t / "texts").mkdir()
    return Call(translate_argv(t, a, t / "texts"), 2, (str(t / "texts"), "is a folder"))


@case("input-0-byte")
def _(t, a):
    return Call(
        translate_argv(t, a, write(t / "in.txt", b""), "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", []),
    )


@case("input-empty-lines")
def _(t, a):
    return Call(
        translate_argv(t, a, write(t / "in.txt", ["", " ", ""]), "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", ["", "", ""]),
    )


@case("bom-only-first-line")
def _(t, a):
    source = write(t / "in.txt", BOM + "\n" + "\n".join(LINES) + "\n")
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", ["", *a.translations]),
    )


@case("bom-before-text")
def _(t, a):
    source = write(t / "in.txt", BOM + "\n".join(LINES) + "\n")
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", a.translations),
    )


@case("crlf")
def _(t, a):
    source = write(t / "in.txt", "\r\n".join(LINES) + "\r\n")
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", a.translations),
    )


@case("lone-cr")
def _(t, a):
    source = write(t / "in.txt", "\r".join(LINES))
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", a.translations),
    )


@case("latin1")
def _(t, a):
    source = write(t / "latin1.txt", LATIN1)
    return Call(translate_argv(t, a, source, "--output", t / "o.txt"), 2, (f"{source}:2:", "not valid UTF-8"))


@case("stdin-latin1")
def _(t, a):
    return Call(translate_argv(t, a, "-", "--output", t / "o.txt"), 2, ("<stdin>:2:", "not valid UTF-8"), stdin=LATIN1)


@case("stdin-bom-crlf")
def _(t, a):
    return Call(
        translate_argv(t, a, "-", "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        stdin=(BOM + "\r\n".join(LINES) + "\r\n").encode(),
        check=translated(t / "o.txt", a.translations),
    )


@case("over-long-line-learned-positions")
def _(t, a):
    source = write(t / "long.txt", [LINES[0], LONG])
    return Call(translate_argv(t, a, source, "--output", t / "o.txt", model=a.learned), 2, (f"{source}:2",))


def line_of_tokens(a: Assets, low: int, high: int) -> str:
    """A sentence of `low`..`high` tokens (with </s>) for the tiny model's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer, words = AutoTokenizer.from_pretrained(a.model), []
    for word in LONG.split():
        words.append(word)
        if low <= len(tokenizer(" ".join(words))["input_ids"]) <= high:
            return " ".join(words)
    raise AssertionError("no such sentence")


@case("line-fits-but-output-limit-exceeds-learned-positions")
def _(t, a):
    source = write(t / "long.txt", [LINES[0], line_of_tokens(a, 29, 31)])
    return Call(translate_argv(t, a, source, "--output", t / "o.txt", model=a.learned), 0, may_change=(t / "o.txt",))


@case("over-long-line-ctranslate2")
def _(t, a):
    source = write(t / "long.txt", [LINES[0], LONG])
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt", "--engine", "ctranslate2", model=a.ct2),
        2,
        (f"{source}:2",),
    )


@case("over-long-line-refused-before-tokenising")  # 1 MB on one line: refused by its characters, before tokenising
def _(t, a):
    source = write(t / "long.txt", [LINES[0], ("a man is riding a horse . " * 40000)[:1_000_000]])
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt"), 2, (f"{source}:2", "1,000,000 characters", "65,536")
    )


@case("token-indices-warning-never-precedes-the-refusal")  # the tokenizer warns beyond its 1,024 tokens
def _(t, a):
    source = write(t / "long.txt", [LINES[0], " ".join(["a man is riding a horse ."] * 250)])
    return Call(
        translate_argv(t, a, source, "--output", t / "o.txt", "--max_input_tokens", "1100"),
        2,
        (f"{source}:2", "source tokens, more than the 1,100"),
    )


@case("model-missing-a-layer")  # transformers' LOAD REPORT table never precedes the one line
def _(t, a):
    import json

    folder = copy(a.model, t / "model")
    config = json.loads((folder / "config.json").read_text())
    config["num_encoder_layers"] += 1
    (folder / "config.json").write_text(json.dumps(config))
    return Call(
        translate_argv(t, a, a.plain, "--output", t / "o.txt", model=folder),
        2,
        (str(folder), "missing from the weights"),
    )


@case("input-dev-null")  # the null device is an empty input, as an empty file is
def _(t, a):
    return Call(
        translate_argv(t, a, "/dev/null", "--output", t / "o.txt"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", []),
    )


@case("stdin-closed")
def _(t, a):
    return Call(
        translate_argv(t, a, "-", "--output", t / "o.txt"), 2, ("standard input is closed",), patch={"sys.stdin": None}
    )


@case("stdout-closed")
def _(t, a):
    return Call(translate_argv(t, a, a.plain), 1, ("standard output is closed",), patch={"sys.stdout": None})


@case("output-exists")
def _(t, a):
    return Call(
        translate_argv(t, a, a.plain, "--output", write(t / "o.txt", "mine\n")),
        2,
        ("--output", str(t / "o.txt"), "exists", "--overwrite"),
    )


@case("output-exists-overwrite")
def _(t, a):
    return Call(
        translate_argv(t, a, a.plain, "--output", write(t / "o.txt", "mine\n"), "--overwrite"),
        0,
        may_change=(t / "o.txt",),
        check=translated(t / "o.txt", a.translations),
    )


@case("output-is-a-folder")
def _(t, a):
    (t / "out").mkdir()
    return Call(translate_argv(t, a, a.plain, "--output", t / "out"), 2, ("--output", str(t / "out"), "is a folder"))


@case("output-folder-missing")
def _(t, a):
    return Call(
        translate_argv(t, a, a.plain, "--output", t / "nowhere" / "o.txt"),
        2,
        ("--output", str(t / "nowhere"), "does not exist"),
    )


@case("bad-flag-value")
def _(t, a):
    return Call(translate_argv(t, a, a.plain, "--num_beams", "0"), 2, ("--num_beams",))


@case("ctrl-c")
def _(t, a):
    return Call(
        translate_argv(t, a, a.plain, "--output", t / "o.txt"),
        130,
        ("interrupted",),
        interrupt="vaswani_hf.translation.inference.translate",
    )


test_cli_contract = case.contract_test()  # every case above


def test_ctranslate2_names_the_compute_types_it_supports_and_the_one_it_chose(assets, tmp_path, capfd, monkeypatch):
    """--dtype with the CTranslate2 engine: a type this build cannot run here is one line naming the ones it can (as
    a CPU build without bfloat16 answers bf16), and a precision asked for is answered in one line, as the PyTorch
    engine does. The supported types are given to the test, so that it means the same on every processor."""
    import ctranslate2

    monkeypatch.setattr(ctranslate2, "get_supported_compute_types", lambda device, device_index=0: {"float32", "int8"})
    source = write(tmp_path / "in.txt", LINES[:2])
    argv = translate_argv(tmp_path, assets, source, "--engine", "ctranslate2", model=assets.ct2)
    capfd.readouterr()
    code, _ = run_main("translate", [*argv, "--dtype", "bf16", "--output", tmp_path / "bf16.txt"])
    err = capfd.readouterr().err
    assert code == 2 and "cannot compute in bfloat16 on cpu here; it supports float32, int8" in err, err
    assert "Traceback" not in err and not (tmp_path / "bf16.txt").exists()
    code, _ = run_main("translate", [*argv, "--dtype", "auto", "--output", tmp_path / "auto.txt"])
    err = capfd.readouterr().err
    assert code == 0 and "precision: CTranslate2 compute type" in err and "fastest type" in err, err
    assert len((tmp_path / "auto.txt").read_text(encoding="utf-8").splitlines()) == 2


def test_an_output_name_of_the_longest_legal_length_is_written(assets, tmp_path, capfd):
    """A file name of 250 bytes is legal (the limit is 255); the tool's own temporary and staging names beside it
    must not take it over that limit."""
    source = write(tmp_path / "in.txt", LINES[:2])
    output = tmp_path / ("d" * 246 + ".txt")
    code, _ = run_main("translate", [*translate_argv(tmp_path, assets, source), "--output", output])
    err = capfd.readouterr().err
    assert code == 0, err
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.txt", output.name]), "left beside the output"
