"""The command-line contract of `vaswani-evaluate` (vaswani_hf.cli.evaluate), for every input class that applies to it:
missing, empty or undecodable hypotheses, references and sources, mismatched line counts, byte-order marks and line ends
(scored as plain text), conflicting options, an existing --out, a broken model folder, Ctrl-C. What each case asserts,
and the shared assets: cli_contract.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_contract import (
    BOM,
    GERMAN,
    LATIN1,
    LINES,
    LONG,
    PAGE,
    Call,
    Cases,
    PathCase,
    Reads,
    Stdout,
    Writer,
    copy,
    many_lines,
    model_classes,
    translated,
    write,
)

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

case = Cases(
    "evaluate",
    refused=lambda t: ["--hypotheses", t / "absent.txt", "--references", t / "absent.txt", "--out", t / "s.json"],
    run=lambda a, t: ["--hypotheses", a.plain, "--references", a.plain, "--out", t / "scores.json"],
    paths=[
        PathCase(
            "evaluate-out",
            lambda f, a: {"--hypotheses": copy(a.plain, f / "hyp.txt"), "--references": copy(a.plain, f / "ref.txt")},
            lambda i, o, w: [
                "--hypotheses",
                i["--hypotheses"],
                "--references",
                i["--references"],
                "--out",
                o,
                *["--overwrite"][:w],
            ],
            "--out",
            roles=("--hypotheses", "--references"),
        ),
        PathCase(
            "evaluate-save-hypotheses",
            lambda f, a: {
                "input": copy(a.plain, f / "plain.txt"),
                "--model": copy(a.model, f / "model"),
                "--references": copy(a.plain, f / "ref.txt"),
            },
            lambda i, o, w: [
                "--model",
                i["--model"],
                "--source",
                i["input"],
                "--references",
                i["--references"],
                "--num_beams",
                "1",
                "--device",
                "cpu",
                "--save_hypotheses",
                o,
                *["--overwrite"][:w],
            ],
            "--save_hypotheses",
            roles=("input", "--model", "--references"),
        ),
    ],
    writers=[
        Writer(
            "evaluate-out",
            lambda a, t, d: [
                "--hypotheses",
                write(t / "in" / "hyp.txt", GERMAN),
                "--references",
                write(t / "in" / "ref.txt", GERMAN),
                "--out",
                d / "scores.json",
            ],
            "--out",
            0,
        ),
        Writer(
            "evaluate-save_hypotheses",
            lambda a, t, d: [
                "--model",
                a.model,
                "--source",
                many_lines(t),
                "--references",
                many_lines(t),
                "--num_beams",
                "1",
                "--device",
                "cpu",
                "--save_hypotheses",
                d / "hyp.txt",
            ],
            "--save_hypotheses",
            PAGE,
        ),
    ],
    reads=[
        Reads(
            "evaluate-hypotheses",
            lambda a, t, s: ["--hypotheses", s, "--references", write(t / "in" / "ref.txt", LINES)],
            lambda a: GERMAN,
            stdout=True,
        ),
        Reads(
            "evaluate-references",
            lambda a, t, s: ["--hypotheses", write(t / "in" / "hyp.txt", GERMAN), "--references", s],
            lambda a: LINES,
            stdout=True,
        ),
        Reads(
            "evaluate-source",
            lambda a, t, s: [
                "--model",
                a.model,
                "--source",
                s,
                "--references",
                write(t / "in" / "ref.txt", GERMAN),
                "--num_beams",
                "1",
                "--device",
                "cpu",
                "--save_hypotheses",
                t / "hyp.txt",
            ],
            lambda a: LINES,
            outputs=lambda t: [t / "hyp.txt"],
            stdout=True,
        ),
    ],
    stdout=Stdout(
        lambda a, t: [
            "--hypotheses",
            write(t / "in" / "hyp.txt", GERMAN),
            "--references",
            write(t / "in" / "ref.txt", GERMAN),
        ]
    ),
)


def scored_100(out: Path):
    def check(stdout, stderr):
        scores = json.loads(out.read_text(encoding="utf-8"))["scores"]
        assert scores["sacrebleu"]["score"] == pytest.approx(100.0), scores["sacrebleu"]

    return check


def evaluate_argv(hypotheses, *references, out=None, extra=()):
    argv = ["--hypotheses", hypotheses, "--references", *references]
    return argv + (["--out", out] if out else []) + list(extra)


def evaluate_model_argv(t, a, source, references, *extra, model=None):
    return [
        "--model",
        model or a.model,
        "--source",
        source,
        "--references",
        *references,
        "--device",
        "cpu",
        "--num_beams",
        "1",
        *extra,
    ]


model_classes(
    case, "--model", lambda t, a, m: evaluate_model_argv(t, a, a.plain, [write(t / "ref.txt", GERMAN)], model=m)
)


@case("target-lang-not-a-code")
def _(t, a):
    return Call(
        [*evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN)), "--target_lang", "de; rm -rf /"],
        2,
        ("--target_lang", "not a language code"),
    )


@case("hypotheses-missing")
def _(t, a):
    return Call(
        evaluate_argv(t / "absent.txt", write(t / "ref.txt", GERMAN)),
        2,
        ("hypotheses file not found", str(t / "absent.txt")),
    )


@case("reference-missing")
def _(t, a):
    return Call(
        evaluate_argv(write(t / "hyp.txt", GERMAN), t / "absent.txt"),
        2,
        ("reference file not found", str(t / "absent.txt")),
    )


@case("hypotheses-is-a-folder")
def _(t, a):
    (t / "hyp").mkdir()
    return Call(evaluate_argv(t / "hyp", write(t / "ref.txt", GERMAN)), 2, (str(t / "hyp"), "is a folder"))


@case("both-0-byte")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", b""), write(t / "ref.txt", b"")
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 2, (str(hyp), "no segments"))


@case("hypotheses-0-byte")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", b""), write(t / "ref.txt", GERMAN)
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 2, (f"{hyp} has 0 lines", f"{ref} has 3 lines"))


@case("bom-hypotheses-scores-100")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", BOM + "\n".join(GERMAN) + "\n"), write(t / "ref.txt", GERMAN)
    return Call(
        evaluate_argv(hyp, ref, out=t / "s.json"), 0, may_change=(t / "s.json",), check=scored_100(t / "s.json")
    )


@case("bom-reference-scores-100")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", GERMAN), write(t / "ref.txt", BOM + "\n".join(GERMAN) + "\n")
    return Call(
        evaluate_argv(hyp, ref, out=t / "s.json"), 0, may_change=(t / "s.json",), check=scored_100(t / "s.json")
    )


@case("crlf-and-lone-cr-score-100")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", "\r\n".join(GERMAN) + "\r\n"), write(t / "ref.txt", "\r".join(GERMAN) + "\r")
    return Call(
        evaluate_argv(hyp, ref, out=t / "s.json"), 0, may_change=(t / "s.json",), check=scored_100(t / "s.json")
    )


@case("latin1-reference")
def _(t, a):
    ref = write(t / "ref.txt", LATIN1 + b"x\n")
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), ref, out=t / "s.json"), 2, (f"{ref}:2:", "UTF-8"))


@case("latin1-hypotheses")
def _(t, a):
    hyp = write(t / "hyp.txt", LATIN1 + b"x\n")
    return Call(evaluate_argv(hyp, write(t / "ref.txt", GERMAN), out=t / "s.json"), 2, (f"{hyp}:2:", "UTF-8"))


@case("line-count-mismatch")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", GERMAN[:2]), write(t / "ref.txt", GERMAN)
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 2, (f"{hyp} has 2 lines", f"{ref} has 3 lines"))


@case("second-reference-mismatch")
def _(t, a):
    hyp, ref, ref2 = write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), write(t / "ref2.txt", GERMAN[:1])
    return Call(evaluate_argv(hyp, ref, ref2), 2, (f"{hyp} has 3 lines", f"{ref2} has 1 lines"))


@case("out-exists")
def _(t, a):
    out = write(t / "s.json", "{}\n")
    return Call(
        evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=out),
        2,
        ("--out", str(out), "exists", "--overwrite"),
    )


@case("out-exists-overwrite")
def _(t, a):
    out = write(t / "s.json", "{}\n")
    return Call(
        evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=out, extra=["--overwrite"]),
        0,
        may_change=(out,),
        check=scored_100(out),
    )


@case("out-is-a-folder")
def _(t, a):
    (t / "scores").mkdir()
    return Call(
        evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=t / "scores"),
        2,
        ("--out", str(t / "scores"), "is a folder"),
    )


@case("hypotheses-and-model")
def _(t, a):
    return Call(
        evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), extra=["--model", a.model]),
        2,
        ("--hypotheses", "--model"),
    )


@case("out-is-save-hypotheses")
def _(t, a):
    return Call(
        evaluate_model_argv(
            t, a, a.plain, [write(t / "ref.txt", GERMAN)], "--out", t / "x", "--save_hypotheses", t / "x"
        ),
        2,
        ("--out", "--save_hypotheses"),
    )


@case("source-latin1")
def _(t, a):
    source = write(t / "src.txt", LATIN1)
    return Call(evaluate_model_argv(t, a, source, [write(t / "ref.txt", GERMAN[:2])]), 2, (f"{source}:2:", "UTF-8"))


@case("source-reference-mismatch")
def _(t, a):
    ref = write(t / "ref.txt", GERMAN[:2])
    return Call(evaluate_model_argv(t, a, a.plain, [ref]), 2, (f"{a.plain} has 3 lines", f"{ref} has 2 lines"))


@case("source-over-long-line-learned-positions")
def _(t, a):
    source = write(t / "src.txt", [LINES[0], LONG])
    return Call(
        evaluate_model_argv(t, a, source, [write(t / "ref.txt", GERMAN[:2])], model=a.learned),
        2,
        (f"{source}:2:", "32 positions"),
    )


@case("save-hypotheses-exists")
def _(t, a):
    saved = write(t / "hyp.txt", "mine\n")
    return Call(
        evaluate_model_argv(t, a, a.plain, [write(t / "ref.txt", GERMAN)], "--save_hypotheses", saved),
        2,
        ("--save_hypotheses", str(saved), "exists", "--overwrite"),
    )


@case("source-bom-only-first-line")
def _(t, a):
    source = write(t / "src.txt", BOM + "\n" + "\n".join(LINES) + "\n")
    saved = t / "hyp.txt"
    return Call(
        evaluate_model_argv(
            t, a, source, [write(t / "ref.txt", ["", *GERMAN])], "--save_hypotheses", saved, "--out", t / "s.json"
        ),
        0,
        may_change=(saved, t / "s.json"),
        check=translated(saved, ["", *a.translations]),
    )


@case("ctrl-c")
def _(t, a):
    return Call(
        evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=t / "s.json"),
        130,
        ("interrupted",),
        interrupt="vaswani_hf.cli.evaluate.compute_all",
    )


test_cli_contract = case.contract_test()  # every case above
