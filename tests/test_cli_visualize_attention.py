"""The command-line contract of `vaswani-visualize-attention` (vaswani_hf.cli.visualize_attention), for every input
class that applies to it: a broken model folder, an --out that exists or is a file, an empty or over-long source or
target, a bad --alignment, Ctrl-C. What each case asserts, and the shared assets: cli_contract.py.
"""

from __future__ import annotations

import pytest
from cli_contract import (
    GERMAN,
    LINES,
    LONG,
    PAGE,
    Call,
    Cases,
    PathCase,
    Writer,
    copy,
    earlier_output,
    model_classes,
    model_output_classes,
    run_case,
    write,
)

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

case = Cases(
    "visualize_attention",
    refused=lambda t: ["--model_dir", t / "absent", "--source", "a", "--out", t / "vis"],
    run=lambda a, t: ["--model_dir", a.model, "--source", LINES[0], "--device", "cpu", "--out", t / "vis"],
    paths=[
        PathCase(
            "visualize_attention",
            lambda f, a: {"--model_dir": copy(a.model, f / "model")},
            lambda i, o, w: [
                "--model_dir",
                i["--model_dir"],
                "--source",
                "a man",
                "--device",
                "cpu",
                "--out",
                o,
                *["--overwrite"][:w],
            ],
            "--out",
        )
    ],
    writers=[Writer("visualize_attention", None, "--out", 16 * PAGE)],
)


def visualize_argv(t, model, source=LINES[0], *extra):
    return [
        "--model_dir",
        model,
        "--source",
        source,
        "--out",
        t / "vis",
        "--num_beams",
        "1",
        "--max_new_tokens",
        "3",
        *extra,
    ]


model_classes(case, "--model_dir", lambda t, a, m: visualize_argv(t, m))
model_output_classes(case, "--out", lambda model, out: ["--model_dir", model, "--source", LINES[0], "--out", out])


@case("out-exists")
def _(t, a):
    write(t / "vis" / "mine.txt", "keep")
    return Call(visualize_argv(t, a.model), 2, ("--out", str(t / "vis"), "not empty", "--overwrite"))


@case("out-exists-overwrite", pytest.mark.slow)
def _(t, a):
    from vaswani_hf.cli.visualize_attention import ATTENTION_FOLDER

    earlier_output(t / "vis", ATTENTION_FOLDER)

    def check(stdout, stderr):
        assert not (t / "vis" / "mine.txt").exists() and (t / "vis" / "diagnostics.txt").is_file()

    return Call(visualize_argv(t, a.model, LINES[0], "--overwrite"), 0, may_change=(t / "vis",), check=check)


@case("empty-source")
def _(t, a):
    return Call(visualize_argv(t, a.model, " "), 2, ("--source", "empty"))


@pytest.mark.parametrize("target", ["", "  \t"])
def test_an_empty_target_is_refused(target, tmp_path, assets, capfd, monkeypatch):
    run_case(
        "visualize_attention",
        lambda t, a: Call(visualize_argv(t, a.model, LINES[0], "--target", target), 2, ("--target", "is empty")),
        tmp_path,
        assets,
        capfd,
        monkeypatch,
    )


@case("out-in-use-by-another-run")
def _(t, a):
    """Another run writing the same --out (it holds the folder's lock) is not raced: refused in one line."""
    from vaswani_hf.io import FolderLock

    (t / "vis").mkdir()
    lock = FolderLock(t / "vis").acquire()
    return Call(
        visualize_argv(t, a.model),
        2,
        ("output folder", str(t / "vis"), "in use by another run"),
        check=lambda stdout, stderr: lock.release(),
    )


@case("over-long-source-learned-positions")
def _(t, a):
    return Call(visualize_argv(t, a.learned, LONG), 2, ("--source", "32 positions"))


@case("over-long-target-learned-positions")
def _(t, a):
    return Call(visualize_argv(t, a.learned, LINES[0], "--target", LONG), 2, ("--target", "32 positions"))


BAD_ALIGNMENTS = {  # (--source, --target, --alignment) -> what the one line names
    "bad-alignment": ((LINES[0], GERMAN[0], "0-0 1:1"), ("--alignment", "'1:1'")),
    "alignment-past-the-target": (
        (LINES[0], "drei kleine Wörter", "0-0 9-99"),
        ("--alignment", "'9-99'", "target word 99", "--target has 3", f"--source has {len(LINES[0].split())}"),
    ),
    "alignment-past-the-source": (
        ("zwei Wörter", "drei kleine Wörter", "2p1"),
        ("--alignment", "'2p1'", "source word 2", "--source has 2 words"),
    ),
    "alignment-of-whitespace-only": ((LINES[0], GERMAN[0], "  "), ("--alignment", "empty")),
}
for _name, ((_source, _target, _alignment), _expected) in BAD_ALIGNMENTS.items():
    case(_name)(
        lambda t, a, s=_source, g=_target, al=_alignment, expected=_expected: Call(
            visualize_argv(t, a.model, s, "--target", g, "--alignment", al), 2, expected
        )
    )


@case("ctrl-c")
def _(t, a):
    return Call(
        visualize_argv(t, a.model), 130, ("interrupted",), interrupt="vaswani_hf.cli.visualize_attention.visualize"
    )


test_cli_contract = case.contract_test()  # every case above


def test_alignment_links_within_both_sentences():
    from vaswani_hf.cli.visualize_attention import alignment_links
    from vaswani_hf.io import UsageError

    assert alignment_links("0-0 1?2 2p1", "a b c", "x y z") == [(0, 0), (1, 2), (2, 1)]
    for bad in ("3-0", "0-3", "9-99", "0-0 1-1 2-3"):
        with pytest.raises(UsageError, match=r"--source has 3 words and --target has 3"):
            alignment_links(bad, "a b c", "x\ty  z")  # whitespace words, as the converter counts them
