"""Issue 25: the command-line contract, every tool x every input class that applies to it.

Each case calls a tool's `main(argv)` in this process (fd-level capture) and asserts:

* the exit status: 2 for bad arguments or input, 1 for a failure of the run itself (an unreachable Hub), 130 for
  Ctrl-C, 0 where the input class must be handled (byte-order mark, CRLF, lone CR, `--overwrite`);
* for a failure: exactly one line on stderr, naming the offending file (and line, where there is one) or the flag or
  recipe key, and no traceback (no Python warning either: in a real process it would be a second line);
* every file and folder under the case's folder and under the shared assets is unchanged afterwards, except what
  the case says the tool may write (a successful run's output). A refused run writes nothing, not even a temporary
  file or an empty folder.

The shared assets (a tiny model folder with tokenizer and card, one with learned positions, a CTranslate2 export, a
finished two-checkpoint training run) are built once per module. A few subprocess checks run the real `scripts/`
wrappers and console entry points. Cases marked xfail(strict=True) are contract violations whose fix lies outside
the tools' own modules (vaswani_hf/training, the model files); the reason names the failing command.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tomllib
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cli_helpers import REPO, run_script, truncate
from conftest import TINY, write_corpus
from hub_helpers import METRICS, REPO_ID, TRAINING_INFO, make_tiny_model

from vaswani_hf.io import UsageError, check_safetensors, read_lines

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOOLS = ("train", "translate", "evaluate", "train_tokenizer", "average_checkpoints", "export_marian",
         "export_ctranslate2", "visualize_attention", "push_to_hub")
LINES = ["a man is riding a horse .", "two dogs play in the snow .", "a woman reads a book in the park ."]
GERMAN = ["ein mann reitet ein pferd .", "zwei hunde spielen im schnee .", "eine frau liest ein buch im park ."]
LATIN1 = b"a man is riding a horse .\nna\xefve caf\xe9 au lait .\n"  # line 2 is latin-1, not UTF-8
LONG = " ".join(["a man is riding a horse ."] * 6)  # ~90 tokens: beyond 32 learned / 24 exported positions
BOM = "\ufeff"
TRANSLATE_OPTIONS = ["--num_beams", "1", "--no_progress", "--device", "cpu"]  # + the saved max_length_b 4
TOKEN = "hf_contractTEST_0123456789abcdefSECRET"


# ---------------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------------


def write(path: Path, data: bytes | str | list[str]) -> Path:
    """A file with exactly these bytes (str: UTF-8; a list: lines ending with "\\n")."""
    if isinstance(data, list):
        data = "".join(line + "\n" for line in data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def snapshot(*roots: Path) -> dict[str, str]:
    """{path: sha256 of the file, or "<dir>"} of everything under `roots` (hidden files included)."""
    state = {}
    for root in roots:
        for p in root.rglob("*"):
            state[str(p)] = "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return state


def changes(before: dict, after: dict) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def under(path: str, allowed) -> bool:
    return any(path == str(a) or path.startswith(str(a) + os.sep) for a in allowed)


def copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


@contextmanager
def fresh_logging():
    """The root logger as in a new process (no handler), whatever pytest or earlier tools attached; restored after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers = handlers
        root.setLevel(level)


def stdout_has(*fragments):
    def check(stdout, stderr):
        for fragment in fragments:
            assert fragment in stdout, (fragment, stdout)
    return check


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def run_main(tool: str, argv) -> tuple[int, list]:
    """`main(argv)` of a tool, with the warnings a fresh process would print recorded (they would be stderr lines)."""
    main = importlib.import_module(f"vaswani_hf.cli.{tool}").main
    with fresh_logging(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)  # Python's defaults outside __main__
        code = main([str(a) for a in argv])
    return code, [f"{w.category.__name__}: {w.message}" for w in caught]


# ---------------------------------------------------------------------------------------------------------------------
# Shared assets, built once
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Assets:
    root: Path
    model: Path  # tiny model + tokenizer + card + handler (sinusoidal positions)
    learned: Path  # the same with learned positions for 32 positions
    ct2: Path  # CTranslate2 export of `model` with a 24-position table
    corpus: Path  # Moses corpus folder: train.en, train.de
    recipe: Path  # the tiny recipe (moses corpus, 4 steps, checkpoints at 2 and 4)
    run: Path  # a finished run of `recipe`
    plain: Path  # LINES, LF
    translations: list[str] = field(default_factory=list)  # of `plain` with TRANSLATE_OPTIONS


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Assets:
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration, hub
    from vaswani_hf.export.ctranslate2_spec import to_ctranslate2

    root = tmp_path_factory.mktemp("assets")
    model, tokenizer = make_tiny_model()
    model.generation_config.max_length_b = 4  # short outputs: fast decoding for the cases that translate
    folder = root / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    hub.add_handler(folder)
    hub.write_model_card(folder, METRICS, TRAINING_INFO, repo_id=REPO_ID)

    c = model.config
    learned = VaswaniForConditionalGeneration(VaswaniConfig(
        vocab_size=c.vocab_size, d_model=c.d_model, d_ff=c.d_ff, num_heads=c.num_heads,
        num_encoder_layers=c.num_encoder_layers, num_decoder_layers=c.num_decoder_layers,
        position_encoding="learned", max_position_embeddings=32)).eval()
    learned.generation_config = model.generation_config
    learned.save_pretrained(root / "learned")
    tokenizer.save_pretrained(root / "learned")
    to_ctranslate2(folder, root / "ct2", max_positions=24)

    corpus = write_corpus(root / "corpus", n_valid=0)
    recipe = root / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({**TINY, "data_dir": str(corpus), "output_dir": str(root / "unused"),
                                      "max_steps": 4, "save_steps": 2}, sort_keys=False), encoding="utf-8")
    run = root / "run"
    code, _ = run_main("train", ["--recipe", recipe, "--output_dir", run])
    assert code == 0 and (run / "checkpoint-2").is_dir() and (run / "checkpoint-4").is_dir()

    assets = Assets(root, folder, root / "learned", root / "ct2", corpus, recipe, run, write(root / "plain.txt", LINES))
    out = root / "plain.translated"
    assert run_main("translate", [assets.plain, "--model", folder, "--output", out, *TRANSLATE_OPTIONS])[0] == 0
    assets.translations = read_lines(out)
    assert len(assets.translations) == len(LINES)
    return assets


# ---------------------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Call:
    argv: list
    code: int = 2
    expect: tuple = ()  # fragments of the one stderr line (failures)
    may_change: tuple = ()  # paths the tool may create, change or remove (and everything under them)
    check: Callable | None = None  # check(stdout, stderr) after the call
    interrupt: str | None = None  # "module.attr" replaced by a function raising KeyboardInterrupt
    env: dict = field(default_factory=dict)
    patch: dict = field(default_factory=dict)  # "module.attr" -> value
    stdin: bytes | None = None  # standard input, as bytes


CASES = []


def case(tool: str, name: str, *marks):
    def register(build):
        CASES.append(pytest.param(tool, build, id=f"{tool}-{name}", marks=marks))
        return build
    return register


def lead_fix(reason: str):
    """A contract violation whose fix lies in vaswani_hf/training or the model files (reported to the lead)."""
    return pytest.mark.xfail(strict=True, reason=reason)


def model_classes(tool: str, flag: str, argv: Callable[[Path, Assets, Path], list]):
    """The five broken-model-folder classes for a tool whose model folder is given by `flag`."""

    @case(tool, "model-missing")
    def _(t, a):
        return Call(argv(t, a, t / "absent"), 2, (f"{flag} not found", str(t / "absent")))

    @case(tool, "model-is-a-file")
    def _(t, a):
        return Call(argv(t, a, write(t / "model.txt", "x")), 2, (flag, str(t / "model.txt"), "is a file"))

    @case(tool, "model-truncated-safetensors")
    def _(t, a):
        folder = copy(a.model, t / "model")
        truncate(folder / "model.safetensors")
        return Call(argv(t, a, folder), 2, (str(folder / "model.safetensors"), "truncated or corrupt"))

    @case(tool, "model-invalid-config-json")
    def _(t, a):
        folder = copy(a.model, t / "model")
        write(folder / "config.json", "{not json")
        return Call(argv(t, a, folder), 2, (str(folder / "config.json") + ":1: invalid JSON",))

    @case(tool, "model-missing-tokenizer-json")
    def _(t, a):
        folder = copy(a.model, t / "model")
        (folder / "tokenizer.json").unlink()
        return Call(argv(t, a, folder), 2, (str(folder), "no tokenizer.json"))


# --- translate --------------------------------------------------------------------------------------------------------


def translate_argv(t, a, source, *extra, model=None):
    return [source, "--model", model or a.model, *TRANSLATE_OPTIONS, *extra]


def translated(out: Path, expected: list[str]):
    def check(stdout, stderr):
        assert read_lines(out) == expected
    return check


model_classes("translate", "--model", lambda t, a, m: translate_argv(t, a, a.plain, "--output", t / "o.txt", model=m))


@case("translate", "input-missing")
def _(t, a):
    return Call(translate_argv(t, a, t / "absent.txt"), 2, ("input file not found", str(t / "absent.txt")))


@case("translate", "input-is-a-folder")
def _(t, a):
    (t / "texts").mkdir()
    return Call(translate_argv(t, a, t / "texts"), 2, (str(t / "texts"), "is a folder"))


@case("translate", "input-0-byte")
def _(t, a):
    return Call(translate_argv(t, a, write(t / "in.txt", b""), "--output", t / "o.txt"), 0,
                may_change=(t / "o.txt",), check=translated(t / "o.txt", []))


@case("translate", "input-empty-lines")
def _(t, a):
    return Call(translate_argv(t, a, write(t / "in.txt", ["", " ", ""]), "--output", t / "o.txt"), 0,
                may_change=(t / "o.txt",), check=translated(t / "o.txt", ["", "", ""]))


@case("translate", "bom-only-first-line")
def _(t, a):
    source = write(t / "in.txt", BOM + "\n" + "\n".join(LINES) + "\n")
    return Call(translate_argv(t, a, source, "--output", t / "o.txt"), 0, may_change=(t / "o.txt",),
                check=translated(t / "o.txt", ["", *a.translations]))


@case("translate", "bom-before-text")
def _(t, a):
    source = write(t / "in.txt", BOM + "\n".join(LINES) + "\n")
    return Call(translate_argv(t, a, source, "--output", t / "o.txt"), 0, may_change=(t / "o.txt",),
                check=translated(t / "o.txt", a.translations))


@case("translate", "crlf")
def _(t, a):
    source = write(t / "in.txt", "\r\n".join(LINES) + "\r\n")
    return Call(translate_argv(t, a, source, "--output", t / "o.txt"), 0, may_change=(t / "o.txt",),
                check=translated(t / "o.txt", a.translations))


@case("translate", "lone-cr")
def _(t, a):
    source = write(t / "in.txt", "\r".join(LINES))
    return Call(translate_argv(t, a, source, "--output", t / "o.txt"), 0, may_change=(t / "o.txt",),
                check=translated(t / "o.txt", a.translations))


@case("translate", "latin1")
def _(t, a):
    source = write(t / "latin1.txt", LATIN1)
    return Call(translate_argv(t, a, source, "--output", t / "o.txt"), 2, (f"{source}:2:", "not valid UTF-8"))


@case("translate", "stdin-latin1")
def _(t, a):
    return Call(translate_argv(t, a, "-", "--output", t / "o.txt"), 2, ("<stdin>:2:", "not valid UTF-8"), stdin=LATIN1)


@case("translate", "stdin-bom-crlf")
def _(t, a):
    return Call(translate_argv(t, a, "-", "--output", t / "o.txt"), 0, may_change=(t / "o.txt",),
                stdin=(BOM + "\r\n".join(LINES) + "\r\n").encode(), check=translated(t / "o.txt", a.translations))


@case("translate", "over-long-line-learned-positions")
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


@case("translate", "line-fits-but-output-limit-exceeds-learned-positions")
def _(t, a):
    source = write(t / "long.txt", [LINES[0], line_of_tokens(a, 29, 31)])
    return Call(translate_argv(t, a, source, "--output", t / "o.txt", model=a.learned), 0, may_change=(t / "o.txt",))


@case("translate", "over-long-line-ctranslate2")
def _(t, a):
    source = write(t / "long.txt", [LINES[0], LONG])
    return Call(translate_argv(t, a, source, "--output", t / "o.txt", "--engine", "ctranslate2", model=a.ct2), 2,
                (f"{source}:2",))


@case("translate", "output-exists")
def _(t, a):
    return Call(translate_argv(t, a, a.plain, "--output", write(t / "o.txt", "mine\n")), 2,
                ("--output", str(t / "o.txt"), "exists", "--overwrite"))


@case("translate", "output-exists-overwrite")
def _(t, a):
    return Call(translate_argv(t, a, a.plain, "--output", write(t / "o.txt", "mine\n"), "--overwrite"), 0,
                may_change=(t / "o.txt",), check=translated(t / "o.txt", a.translations))


@case("translate", "output-is-a-folder")
def _(t, a):
    (t / "out").mkdir()
    return Call(translate_argv(t, a, a.plain, "--output", t / "out"), 2, ("--output", str(t / "out"), "is a folder"))


@case("translate", "output-folder-missing")
def _(t, a):
    return Call(translate_argv(t, a, a.plain, "--output", t / "nowhere" / "o.txt"), 2,
                ("--output", str(t / "nowhere"), "does not exist"))


@case("translate", "bad-flag-value")
def _(t, a):
    return Call(translate_argv(t, a, a.plain, "--num_beams", "0"), 2, ("--num_beams",))


@case("translate", "ctrl-c")
def _(t, a):
    return Call(translate_argv(t, a, a.plain, "--output", t / "o.txt"), 130, ("interrupted",),
                interrupt="vaswani_hf.inference.translate")


# --- evaluate ---------------------------------------------------------------------------------------------------------


def scored_100(out: Path):
    def check(stdout, stderr):
        scores = json.loads(out.read_text(encoding="utf-8"))["scores"]
        assert scores["sacrebleu"]["score"] == pytest.approx(100.0), scores["sacrebleu"]
    return check


def evaluate_argv(hypotheses, *references, out=None, extra=()):
    argv = ["--hypotheses", hypotheses, "--references", *references]
    return argv + (["--out", out] if out else []) + list(extra)


def evaluate_model_argv(t, a, source, references, *extra, model=None):
    return ["--model", model or a.model, "--source", source, "--references", *references, "--device", "cpu",
            "--num_beams", "1", *extra]


model_classes("evaluate", "--model",
              lambda t, a, m: evaluate_model_argv(t, a, a.plain, [write(t / "ref.txt", GERMAN)], model=m))


@case("evaluate", "hypotheses-missing")
def _(t, a):
    return Call(evaluate_argv(t / "absent.txt", write(t / "ref.txt", GERMAN)), 2,
                ("hypotheses file not found", str(t / "absent.txt")))


@case("evaluate", "reference-missing")
def _(t, a):
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), t / "absent.txt"), 2,
                ("reference file not found", str(t / "absent.txt")))


@case("evaluate", "hypotheses-is-a-folder")
def _(t, a):
    (t / "hyp").mkdir()
    return Call(evaluate_argv(t / "hyp", write(t / "ref.txt", GERMAN)), 2, (str(t / "hyp"), "is a folder"))


@case("evaluate", "both-0-byte")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", b""), write(t / "ref.txt", b"")
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 2, (str(hyp), "no segments"))


@case("evaluate", "hypotheses-0-byte")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", b""), write(t / "ref.txt", GERMAN)
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 2, (f"{hyp} has 0 lines", f"{ref} has 3 lines"))


@case("evaluate", "bom-hypotheses-scores-100")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", BOM + "\n".join(GERMAN) + "\n"), write(t / "ref.txt", GERMAN)
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 0, may_change=(t / "s.json",),
                check=scored_100(t / "s.json"))


@case("evaluate", "bom-reference-scores-100")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", GERMAN), write(t / "ref.txt", BOM + "\n".join(GERMAN) + "\n")
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 0, may_change=(t / "s.json",),
                check=scored_100(t / "s.json"))


@case("evaluate", "crlf-and-lone-cr-score-100")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", "\r\n".join(GERMAN) + "\r\n"), write(t / "ref.txt", "\r".join(GERMAN) + "\r")
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 0, may_change=(t / "s.json",),
                check=scored_100(t / "s.json"))


@case("evaluate", "latin1-reference")
def _(t, a):
    ref = write(t / "ref.txt", LATIN1 + b"x\n")
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), ref, out=t / "s.json"), 2, (f"{ref}:2:", "UTF-8"))


@case("evaluate", "latin1-hypotheses")
def _(t, a):
    hyp = write(t / "hyp.txt", LATIN1 + b"x\n")
    return Call(evaluate_argv(hyp, write(t / "ref.txt", GERMAN), out=t / "s.json"), 2, (f"{hyp}:2:", "UTF-8"))


@case("evaluate", "line-count-mismatch")
def _(t, a):
    hyp, ref = write(t / "hyp.txt", GERMAN[:2]), write(t / "ref.txt", GERMAN)
    return Call(evaluate_argv(hyp, ref, out=t / "s.json"), 2, (f"{hyp} has 2 lines", f"{ref} has 3 lines"))


@case("evaluate", "second-reference-mismatch")
def _(t, a):
    hyp, ref, ref2 = write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), write(t / "ref2.txt", GERMAN[:1])
    return Call(evaluate_argv(hyp, ref, ref2), 2, (f"{hyp} has 3 lines", f"{ref2} has 1 lines"))


@case("evaluate", "out-exists")
def _(t, a):
    out = write(t / "s.json", "{}\n")
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=out), 2,
                ("--out", str(out), "exists", "--overwrite"))


@case("evaluate", "out-exists-overwrite")
def _(t, a):
    out = write(t / "s.json", "{}\n")
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=out,
                              extra=["--overwrite"]), 0, may_change=(out,), check=scored_100(out))


@case("evaluate", "out-is-a-folder")
def _(t, a):
    (t / "scores").mkdir()
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=t / "scores"), 2,
                ("--out", str(t / "scores"), "is a folder"))


@case("evaluate", "hypotheses-and-model")
def _(t, a):
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN),
                              extra=["--model", a.model]), 2, ("--hypotheses", "--model"))


@case("evaluate", "out-is-save-hypotheses")
def _(t, a):
    return Call(evaluate_model_argv(t, a, a.plain, [write(t / "ref.txt", GERMAN)], "--out", t / "x",
                                    "--save_hypotheses", t / "x"), 2, ("--out", "--save_hypotheses"))


@case("evaluate", "source-latin1")
def _(t, a):
    source = write(t / "src.txt", LATIN1)
    return Call(evaluate_model_argv(t, a, source, [write(t / "ref.txt", GERMAN[:2])]), 2, (f"{source}:2:", "UTF-8"))


@case("evaluate", "source-reference-mismatch")
def _(t, a):
    ref = write(t / "ref.txt", GERMAN[:2])
    return Call(evaluate_model_argv(t, a, a.plain, [ref]), 2, (f"{a.plain} has 3 lines", f"{ref} has 2 lines"))


@case("evaluate", "source-over-long-line-learned-positions")
def _(t, a):
    source = write(t / "src.txt", [LINES[0], LONG])
    return Call(evaluate_model_argv(t, a, source, [write(t / "ref.txt", GERMAN[:2])], model=a.learned), 2,
                (f"{source}:2:", "32 positions"))


@case("evaluate", "save-hypotheses-exists")
def _(t, a):
    saved = write(t / "hyp.txt", "mine\n")
    return Call(evaluate_model_argv(t, a, a.plain, [write(t / "ref.txt", GERMAN)], "--save_hypotheses", saved), 2,
                ("--save_hypotheses", str(saved), "exists", "--overwrite"))


@case("evaluate", "source-bom-only-first-line")
def _(t, a):
    source = write(t / "src.txt", BOM + "\n" + "\n".join(LINES) + "\n")
    saved = t / "hyp.txt"
    return Call(evaluate_model_argv(t, a, source, [write(t / "ref.txt", ["", *GERMAN])], "--save_hypotheses", saved,
                                    "--out", t / "s.json"), 0, may_change=(saved, t / "s.json"),
                check=translated(saved, ["", *a.translations]))


@case("evaluate", "ctrl-c")
def _(t, a):
    return Call(evaluate_argv(write(t / "hyp.txt", GERMAN), write(t / "ref.txt", GERMAN), out=t / "s.json"), 130,
                ("interrupted",), interrupt="vaswani_hf.evaluation.compute_all")


# --- train_tokenizer --------------------------------------------------------------------------------------------------

TOKENIZER_TEXT = [line for pair in zip(LINES, GERMAN) for line in pair] * 4


def tokenizer_argv(t, *source, extra=()):
    return [*source, "--vocab_size", "300", "--min_frequency", "2", "--out_dir", t / "tok", *extra]


def same_vocabulary_as_plain(t: Path, files: list[Path]):
    """The tokenizer learned from `files` equals the one learned from the same text with LF line ends and no BOM,
    and no learned token holds a piece of a BOM ("ï»¿") or a CR ("č") in GPT-2's byte-level alphabet."""
    def check(stdout, stderr):
        from vaswani_hf.tokenization import train_bpe_tokenizer

        vocab = json.loads((t / "tok" / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        plain = train_bpe_tokenizer([line for f in files for line in TOKENIZER_TEXT], vocab_size=300,
                                    show_progress=False)
        assert vocab == plain.get_vocab() or sorted(vocab) == sorted(plain.get_vocab())
        learned = [token for token in vocab if len(token) > 1 and not token.startswith("<")]
        assert not [token for token in learned if "ï»¿" in token or "»¿" in token or "ï»" in token]
        assert not [token for token in learned if "č" in token]
    return check


@case("train_tokenizer", "files-missing")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", t / "absent.txt"), 2, ("--files not found", str(t / "absent.txt")))


@case("train_tokenizer", "files-is-a-folder")
def _(t, a):
    (t / "texts").mkdir()
    return Call(tokenizer_argv(t, "--files", t / "texts"), 2, ("--files", str(t / "texts"), "is a folder"))


@case("train_tokenizer", "files-0-byte")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", write(t / "a.txt", b"")), 2, (str(t / "a.txt"), "no text"))


@case("train_tokenizer", "files-blank-lines-only")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", write(t / "a.txt", ["", " ", ""])), 2, (str(t / "a.txt"), "no text"))


@case("train_tokenizer", "bom-never-learned")
def _(t, a):
    files = [write(t / f"{i}.txt", BOM + "\n".join(TOKENIZER_TEXT) + "\n") for i in range(4)]
    return Call(tokenizer_argv(t, "--files", *files), 0, may_change=(t / "tok",),
                check=same_vocabulary_as_plain(t, files))


@case("train_tokenizer", "crlf-and-lone-cr")
def _(t, a):
    files = [write(t / "crlf.txt", "\r\n".join(TOKENIZER_TEXT) + "\r\n"),
             write(t / "cr.txt", "\r".join(TOKENIZER_TEXT))]
    files += [write(t / "crlf2.txt", "\r\n".join(TOKENIZER_TEXT)), write(t / "cr2.txt", "\r".join(TOKENIZER_TEXT))]
    return Call(tokenizer_argv(t, "--files", *files), 0, may_change=(t / "tok",),
                check=same_vocabulary_as_plain(t, files))


@case("train_tokenizer", "latin1")
def _(t, a):
    source = write(t / "latin1.txt", LATIN1)
    return Call(tokenizer_argv(t, "--files", a.plain, source), 2, (f"{source}:2:", "not valid UTF-8"))


@case("train_tokenizer", "corpus-moses-line-count-mismatch")
def _(t, a):
    write(t / "c.en", LINES)
    write(t / "c.de", GERMAN[:2])
    return Call(tokenizer_argv(t, "--corpus", t / "c"), 2, (f"{t / 'c.en'} has 3 lines", f"{t / 'c.de'} has 2 lines"))


@case("train_tokenizer", "corpus-moses-latin1")
def _(t, a):
    write(t / "c.en", LATIN1)
    write(t / "c.de", GERMAN[:2])
    return Call(tokenizer_argv(t, "--corpus", t / "c"), 2, (f"{t / 'c.en'}:2:", "UTF-8"))


@case("train_tokenizer", "corpus-moses-missing")
def _(t, a):
    return Call(tokenizer_argv(t, "--corpus", t / "absent"), 2, (str(t / "absent"),))


@case("train_tokenizer", "corpus-tsv-wrong-field-count")
def _(t, a):
    tsv = write(t / "c.tsv", ["en\tde", f"{LINES[0]}\t{GERMAN[0]}", f"{LINES[1]}\t{GERMAN[1]}\textra"])
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (f"{tsv}:3:", "expected 2 tab-separated fields, found 3"))


@case("train_tokenizer", "corpus-tsv-missing-header")
def _(t, a):
    tsv = write(t / "c.tsv", [f"{e}\t{d}" for e, d in zip(LINES, GERMAN)])
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (f"{tsv}:1:", "header"))


@case("train_tokenizer", "corpus-tsv-0-byte")
def _(t, a):
    tsv = write(t / "c.tsv", b"")
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (f"{tsv}:1:",))


@case("train_tokenizer", "corpus-tsv-blank-pairs-only")
def _(t, a):
    tsv = write(t / "c.tsv", ["en\tde", "\t", " \t "])
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (str(tsv), "no text"))


@case("train_tokenizer", "corpus-jsonl-bad-json")
def _(t, a):
    jsonl = write(t / "c.jsonl", [json.dumps({"en": LINES[0], "de": GERMAN[0]}), '{"en": "a", "de": '])
    return Call(tokenizer_argv(t, "--corpus", jsonl), 2, (f"{jsonl}:2:", "invalid JSON"))


@case("train_tokenizer", "corpus-jsonl-missing-language")
def _(t, a):
    jsonl = write(t / "c.jsonl", [json.dumps({"en": LINES[0], "de": GERMAN[0]}), json.dumps({"en": LINES[1]})])
    return Call(tokenizer_argv(t, "--corpus", jsonl), 2, (f"{jsonl}:2:", "'de'"))


@case("train_tokenizer", "corpus-jsonl-0-byte")
def _(t, a):
    jsonl = write(t / "c.jsonl", b"")
    return Call(tokenizer_argv(t, "--corpus", jsonl), 2, (str(jsonl), "no text"))


@case("train_tokenizer", "out-dir-exists")
def _(t, a):
    write(t / "tok" / "mine.txt", "keep")
    return Call(tokenizer_argv(t, "--files", a.plain), 2, ("--out_dir", str(t / "tok"), "not empty", "--overwrite"))


@case("train_tokenizer", "out-dir-exists-overwrite")
def _(t, a):
    write(t / "tok" / "mine.txt", "keep")

    def check(stdout, stderr):
        assert sorted(p.name for p in (t / "tok").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    return Call(tokenizer_argv(t, "--files", a.plain, extra=["--overwrite"]), 0, may_change=(t / "tok",), check=check)


@case("train_tokenizer", "out-dir-is-a-file")
def _(t, a):
    write(t / "tok", "x")
    return Call(tokenizer_argv(t, "--files", a.plain), 2, ("--out_dir", str(t / "tok"), "is a file"))


@case("train_tokenizer", "negative-vocab-size")
def _(t, a):
    return Call(["--files", a.plain, "--vocab_size", "-5", "--out_dir", t / "tok"], 2, ("--vocab_size", "-5"))


@case("train_tokenizer", "ctrl-c")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", a.plain), 130, ("interrupted",),
                interrupt="vaswani_hf.tokenization.train_bpe_tokenizer")


# --- train ------------------------------------------------------------------------------------------------------------


def train_argv(t, a, *extra, corpus=None, check=True):
    return ["--recipe", a.recipe, "--data_dir", corpus or a.corpus, "--output_dir", t / "run", *extra] + \
        (["--check"] if check else [])


def moses(t: Path, en, de) -> Path:
    write(t / "corpus" / "train.en", en)
    write(t / "corpus" / "train.de", de)
    return t / "corpus"


def tsv(t: Path, lines) -> list:
    write(t / "corpus" / "train.tsv", lines)
    return ["--data_format", "tsv", "--train_data", "train.tsv"]


def jsonl(t: Path, lines) -> list:
    write(t / "corpus" / "train.jsonl", lines)
    return ["--data_format", "jsonl", "--train_data", "train.jsonl"]


@case("train", "check-ok-writes-nothing")
def _(t, a):
    return Call(train_argv(t, a), 0, check=stdout_has("recipe tiny OK"))


@case("train", "check-output-dir-is-a-file")
def _(t, a):
    write(t / "run", "x")
    return Call(train_argv(t, a), 2, ("output_dir", str(t / "run"), "is a file"))


@case("train", "check-output-dir-below-a-file")
def _(t, a):
    write(t / "file", "x")
    return Call(train_argv(t, a, "--output_dir", t / "file" / "run"), 2, ("output_dir", str(t / "file")))


@case("train", "output-dir-below-a-file")
def _(t, a):
    write(t / "file", "x")
    return Call(train_argv(t, a, "--output_dir", t / "file" / "run", check=False), 2, ("output_dir", str(t / "file")))


@case("train", "check-negative-vocab-size")
def _(t, a):
    return Call(train_argv(t, a, "--vocab_size", "-5"), 2, ("vocab_size", "-5"))


@case("train", "check-latin1-corpus")
def _(t, a):
    corpus = moses(t, LINES[:2], LATIN1)
    return Call(train_argv(t, a, corpus=corpus), 2, (f"{corpus / 'train.de'}:2:", "not valid UTF-8"))


@case("train", "check-line-count-mismatch")
def _(t, a):
    corpus = moses(t, LINES, GERMAN[:2])
    return Call(train_argv(t, a, corpus=corpus), 2,
                (f"{corpus / 'train.en'} has 3 lines", f"{corpus / 'train.de'} has 2 lines"))


@case("train", "check-tsv-wrong-field-count")
def _(t, a):
    extra = tsv(t, ["en\tde", f"{LINES[0]}\t{GERMAN[0]}", LINES[1]])
    return Call(train_argv(t, a, *extra, corpus=t / "corpus"), 2,
                (f"{t / 'corpus' / 'train.tsv'}:3:", "expected 2 tab-separated fields, found 1"))


@case("train", "check-tsv-missing-header")
def _(t, a):
    extra = tsv(t, [f"{e}\t{d}" for e, d in zip(LINES, GERMAN)])
    return Call(train_argv(t, a, *extra, corpus=t / "corpus"), 2, (f"{t / 'corpus' / 'train.tsv'}:1:", "header"))


@case("train", "check-jsonl-bad-json")
def _(t, a):
    extra = jsonl(t, [json.dumps({"en": LINES[0], "de": GERMAN[0]}), "{'en': 'single quotes'}"])
    return Call(train_argv(t, a, *extra, corpus=t / "corpus"), 2,
                (f"{t / 'corpus' / 'train.jsonl'}:2:", "invalid JSON"))


@case("train", "check-jsonl-missing-language")
def _(t, a):
    extra = jsonl(t, [json.dumps({"translation": {"en": LINES[0]}})])
    return Call(train_argv(t, a, *extra, corpus=t / "corpus"), 2, (f"{t / 'corpus' / 'train.jsonl'}:1:", "'de'"))


@case("train", "check-0-byte-corpus")
def _(t, a):
    corpus = moses(t, b"", b"")
    return Call(train_argv(t, a, corpus=corpus), 2, ("train_data", str(corpus / "train"), "no sentence pair"))


@case("train", "check-blank-lines-corpus")
def _(t, a):
    corpus = moses(t, ["", ""], [" ", ""])
    return Call(train_argv(t, a, corpus=corpus), 2, ("train_data", str(corpus / "train"), "no sentence pair"))


@case("train", "check-bom-crlf-cr-corpus-handled")
def _(t, a):
    corpus = moses(t, BOM + "\r\n".join(LINES) + "\r\n", "\r".join(GERMAN))
    return Call(train_argv(t, a, corpus=corpus), 0,
                check=stdout_has("train_data: 3 pairs (3 usable)"))


@case("train", "check-corpus-missing")
def _(t, a):
    (t / "corpus").mkdir()
    return Call(train_argv(t, a, corpus=t / "corpus"), 2, ("train_data", str(t / "corpus" / "train.en"), "not found"))


@case("train", "check-corpus-is-a-folder")
def _(t, a):
    (t / "corpus" / "train.tsv").mkdir(parents=True)
    return Call(train_argv(t, a, "--data_format", "tsv", "--train_data", "train.tsv", corpus=t / "corpus"), 2,
                ("train_data", str(t / "corpus" / "train.tsv"), "is a folder"))


@case("train", "check-data-dir-missing")
def _(t, a):
    return Call(train_argv(t, a, corpus=t / "absent"), 2, ("data_dir not found", str(t / "absent")))


TOKENIZER_PATH_FIX = ("fix: check tokenizer_path (an existing folder with a valid tokenizer.json) in preflight "
                      "validate_recipe/check_data_paths, so that --check and a run refuse it before writing "
                      "(vaswani_hf/training/preflight.py)")


@case("train", "check-tokenizer-path-missing")
def _(t, a):
    return Call(train_argv(t, a, "--tokenizer_path", t / "absent"), 2, ("tokenizer_path", str(t / "absent")))


@case("train", "check-tokenizer-path-without-tokenizer-json")
def _(t, a):
    (t / "tok").mkdir()
    return Call(train_argv(t, a, "--tokenizer_path", t / "tok"), 2, (str(t / "tok"), "tokenizer.json"))


@case("train", "tokenizer-path-without-tokenizer-json-writes-nothing")
def _(t, a):
    (t / "tok").mkdir()
    return Call(train_argv(t, a, "--tokenizer_path", t / "tok", check=False), 2, (str(t / "tok"), "tokenizer.json"))


@case("train", "recipe-missing")
def _(t, a):
    return Call(["--recipe", t / "absent.yaml", "--check"], 2, ("recipe file not found", str(t / "absent.yaml")))


@case("train", "recipe-invalid-yaml")
def _(t, a):
    recipe = write(t / "r.yaml", "d_model: [32\n")
    return Call(["--recipe", recipe, "--check"], 2, (str(recipe), "invalid YAML"))


@case("train", "recipe-unknown-key")
def _(t, a):
    recipe = write(t / "r.yaml", "d_modle: 32\n")
    return Call(["--recipe", recipe, "--check"], 2, (str(recipe), "'d_modle'", "'d_model'"))


@case("train", "recipe-latin1")
def _(t, a):
    recipe = write(t / "r.yaml", b"description: caf\xe9\n")
    return Call(["--recipe", recipe, "--check"], 2, (str(recipe),))


@case("train", "unknown-flag")
def _(t, a):
    return Call(train_argv(t, a, "--d_modle", "32"), 2, ("--d_modle", "--d_model"))


@case("train", "bad-flag-type")
def _(t, a):
    return Call(train_argv(t, a, "--d_model", "wide"), 2, ("--d_model", "wide"))


@case("train", "translate-examples-yaml-list")
def _(t, a):
    return Call(train_argv(t, a, "--translate_examples", '["a b .", "c d ."]'), 0)


@case("train", "latin1-corpus-writes-nothing")
def _(t, a):
    corpus = moses(t, LINES[:2], LATIN1)
    return Call(train_argv(t, a, corpus=corpus, check=False), 2, (f"{corpus / 'train.de'}:2:", "not valid UTF-8"))


@case("train", "line-count-mismatch-writes-nothing")
def _(t, a):
    corpus = moses(t, LINES, GERMAN[:2])
    return Call(train_argv(t, a, corpus=corpus, check=False), 2,
                (f"{corpus / 'train.en'} has 3 lines", f"{corpus / 'train.de'} has 2 lines"))


ZERO_PAIRS_FIX = ("fix: refuse a training split without a usable pair in load_corpora, before start() writes "
                  "(vaswani_hf/training/run.py)")


@case("train", "zero-usable-pairs-blank-lines")
def _(t, a):
    corpus = moses(t, ["", "", ""], ["", "", ""])
    return Call(train_argv(t, a, corpus=corpus, check=False), 2, ("train_data",))


@case("train", "zero-usable-pairs-0-byte")
def _(t, a):
    corpus = moses(t, b"", b"")
    return Call(train_argv(t, a, corpus=corpus, check=False), 2, ("train_data",))


@case("train", "previous-run-refused")
def _(t, a):
    copy(a.run, t / "run")
    return Call(train_argv(t, a, check=False), 2, ("output_dir", str(t / "run"), "previous run", "--resume",
                                                  "--overwrite"))


@case("train", "previous-run-refused-by-check")
def _(t, a):
    copy(a.run, t / "run")
    return Call(train_argv(t, a), 2, ("output_dir", str(t / "run"), "previous run", "--resume", "--overwrite"))


@case("train", "output-dir-not-a-run")
def _(t, a):
    write(t / "run" / "mine.txt", "keep")
    return Call(train_argv(t, a, check=False), 2, ("output_dir", str(t / "run"), "not empty"))


@case("train", "export-dir-is-a-file")
def _(t, a):
    write(t / "export", "x")
    return Call(train_argv(t, a, "--export_dir", t / "export"), 2, ("export_dir", str(t / "export"), "is a file"))


@case("train", "resume-changed-architecture")
def _(t, a):
    copy(a.run, t / "run")
    return Call(train_argv(t, a, "--resume", "--d_model", "64", "--max_steps", "6", check=False), 2,
                ("--resume", "d_model=32", "64"))


@case("train", "resume-all-checkpoints-corrupt")
def _(t, a):
    copy(a.run, t / "run")
    for step in (2, 4):
        truncate(t / "run" / f"checkpoint-{step}" / "model.safetensors")
    return Call(train_argv(t, a, "--resume", "--max_steps", "6", check=False), 2,
                ("--resume", "no checkpoint", str(t / "run")))


@case("train", "resume-newest-checkpoint-corrupt-falls-back", pytest.mark.slow)
def _(t, a):
    run = copy(a.run, t / "run")
    truncate(run / "checkpoint-4" / "model.safetensors")

    def check(stdout, stderr):
        assert "skipping checkpoint-4" in stdout + stderr and "resuming from" in stdout
        state = json.loads((run / "checkpoint-6" / "trainer_state.json").read_text(encoding="utf-8"))
        assert state["global_step"] == 6
        check_safetensors(run / "checkpoint-4" / "model.safetensors")  # written again, whole
        assert json.loads((run / "metrics.json").read_text(encoding="utf-8"))["global_step"] == 6
    return Call(train_argv(t, a, "--resume", "--max_steps", "6", check=False), 0, may_change=(run,), check=check)


@case("train", "overwrite-replaces-previous-run", pytest.mark.slow)
def _(t, a):
    run = copy(a.run, t / "run")
    write(run / "notes.txt", "mine, not the run's")
    write(run / "checkpoint-4" / "stale.txt", "from the previous run")
    (run / "checkpoint-8").mkdir()

    def check(stdout, stderr):
        assert (run / "notes.txt").read_text(encoding="utf-8") == "mine, not the run's"
        assert not (run / "checkpoint-4" / "stale.txt").exists() and not (run / "checkpoint-8").exists()
        assert (run / "hub" / "model.safetensors").is_file() and (run / "checkpoint-4" / "model.safetensors").is_file()
    return Call(train_argv(t, a, "--overwrite", check=False), 0, may_change=(run,), check=check)


@case("train", "ctrl-c")
def _(t, a):
    return Call(train_argv(t, a, check=False), 130, ("interrupted",), interrupt="vaswani_hf.training.run.run_training")


# --- average_checkpoints ----------------------------------------------------------------------------------------------


def run_copy(t: Path, a: Assets) -> Path:
    """The checkpoints of the shared run, in the case's folder."""
    for step in (2, 4):
        copy(a.run / f"checkpoint-{step}", t / "run" / f"checkpoint-{step}")
    return t / "run"


@case("average_checkpoints", "run-dir-missing")
def _(t, a):
    return Call(["--run_dir", t / "absent", "--out", t / "avg"], 2, ("--run_dir", str(t / "absent"), "not found"))


@case("average_checkpoints", "run-dir-is-a-file")
def _(t, a):
    return Call(["--run_dir", write(t / "run", "x"), "--out", t / "avg"], 2, ("--run_dir", str(t / "run"), "is a file"))


@case("average_checkpoints", "run-dir-without-checkpoints")
def _(t, a):
    write(t / "run" / "notes.txt", "x")
    return Call(["--run_dir", t / "run", "--out", t / "avg"], 2, ("--run_dir", str(t / "run"), "no checkpoint"))


@case("average_checkpoints", "checkpoint-missing")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--checkpoints", run / "checkpoint-2", run / "checkpoint-3", "--out", t / "avg"], 2,
                (str(run / "checkpoint-3"), "not found"))


@case("average_checkpoints", "checkpoint-is-a-file")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--checkpoints", run / "checkpoint-2", write(run / "checkpoint-3", "x"), "--out", t / "avg"], 2,
                (str(run / "checkpoint-3"),))


@case("average_checkpoints", "truncated-safetensors")
def _(t, a):
    run = run_copy(t, a)
    truncate(run / "checkpoint-4" / "model.safetensors")
    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg"], 2,
                (str(run / "checkpoint-4" / "model.safetensors"), "truncated or corrupt"))


@case("average_checkpoints", "invalid-config-json")
def _(t, a):
    run = run_copy(t, a)
    write(run / "checkpoint-4" / "config.json", "{not json")
    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg"], 2,
                (str(run / "checkpoint-4" / "config.json") + ":1: invalid JSON",))


@case("average_checkpoints", "different-architectures")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--checkpoints", a.model, run / "checkpoint-4", "--out", t / "avg"], 2,
                (str(run / "checkpoint-4"), "other tensors"))


@case("average_checkpoints", "out-exists")
def _(t, a):
    run = run_copy(t, a)
    write(t / "avg" / "mine.txt", "keep")
    return Call(["--run_dir", run, "--out", t / "avg"], 2, ("--out", str(t / "avg"), "not empty", "--overwrite"))


@case("average_checkpoints", "out-exists-overwrite")
def _(t, a):
    run = run_copy(t, a)
    write(t / "avg" / "mine.txt", "old")

    def check(stdout, stderr):
        assert not (t / "avg" / "mine.txt").exists()
        check_safetensors(t / "avg" / "model.safetensors")
        assert json.loads((t / "avg" / "averaged_from.json").read_text()) == ["checkpoint-2", "checkpoint-4"]
    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg", "--overwrite"], 0, may_change=(t / "avg",),
                check=check)


@case("average_checkpoints", "out-is-the-run-dir")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run], 2, ("--out", str(run)))


@case("average_checkpoints", "out-is-the-run-dir-overwrite")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run, "--overwrite"], 2, ("--out", str(run), "checkpoints being averaged"))


@case("average_checkpoints", "out-is-a-checkpoint-overwrite")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run / "checkpoint-4", "--overwrite"], 2,
                ("--out", str(run / "checkpoint-4"), "checkpoints being averaged"))


@case("average_checkpoints", "out-is-a-file")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", write(t / "avg", "x")], 2, ("--out", str(t / "avg"), "is a file"))


@case("average_checkpoints", "last-0")
def _(t, a):
    return Call(["--run_dir", run_copy(t, a), "--last", "0", "--out", t / "avg"], 2, ("--last", "0"))


@case("average_checkpoints", "last-negative")
def _(t, a):
    return Call(["--run_dir", run_copy(t, a), "--last", "-1", "--out", t / "avg"], 2, ("--last", "-1"))


@case("average_checkpoints", "ctrl-c")
def _(t, a):
    return Call(["--run_dir", run_copy(t, a), "--last", "2", "--out", t / "avg"], 130, ("interrupted",),
                interrupt="safetensors.torch.save_file")  # inside the atomically written folder


# --- export_marian ----------------------------------------------------------------------------------------------------

model_classes("export_marian", "--model_dir", lambda t, a, m: ["--model_dir", m, "--out", t / "marian"])


@case("export_marian", "out-exists")
def _(t, a):
    write(t / "marian" / "mine.txt", "keep")
    return Call(["--model_dir", a.model, "--out", t / "marian"], 2, ("--out", str(t / "marian"), "--overwrite"))


@case("export_marian", "out-exists-overwrite", pytest.mark.slow)
def _(t, a):
    write(t / "marian" / "mine.txt", "old")

    def check(stdout, stderr):
        assert not (t / "marian" / "mine.txt").exists()
        assert json.loads((t / "marian" / "config.json").read_text())["model_type"] == "marian"
    return Call(["--model_dir", a.model, "--out", t / "marian", "--overwrite"], 0, may_change=(t / "marian",),
                check=check)


@case("export_marian", "out-is-a-file")
def _(t, a):
    return Call(["--model_dir", a.model, "--out", write(t / "marian", "x")], 2,
                ("--out", str(t / "marian"), "is a file"))


@case("export_marian", "out-is-the-model-dir-overwrite")
def _(t, a):
    folder = copy(a.model, t / "model")
    return Call(["--model_dir", folder, "--out", folder, "--overwrite"], 2, (str(folder), "model folder"))


@case("export_marian", "one-language-only")
def _(t, a):
    return Call(["--model_dir", a.model, "--out", t / "marian", "--source_lang", "en"], 2,
                ("--source_lang", "--target_lang"))


@case("export_marian", "ctrl-c")
def _(t, a):
    return Call(["--model_dir", a.model, "--out", t / "marian"], 130, ("interrupted",),
                interrupt="vaswani_hf.export.marian._copy_tokenizer")  # inside the atomically written folder


# --- export_ctranslate2 -----------------------------------------------------------------------------------------------

model_classes("export_ctranslate2", "--model_dir", lambda t, a, m: ["--model_dir", m, "--out_dir", t / "ct2"])


@case("export_ctranslate2", "tokenizer-folder-without-tokenizer-json")
def _(t, a):
    (t / "tok").mkdir()
    return Call(["--model_dir", a.model, "--tokenizer", t / "tok", "--out_dir", t / "ct2"], 2,
                ("--tokenizer", str(t / "tok"), "no tokenizer.json"))


@case("export_ctranslate2", "out-dir-exists")
def _(t, a):
    write(t / "ct2" / "mine.txt", "keep")
    return Call(["--model_dir", a.model, "--out_dir", t / "ct2"], 2, ("--out_dir", str(t / "ct2"), "--overwrite"))


@case("export_ctranslate2", "out-dir-exists-overwrite")
def _(t, a):
    write(t / "ct2" / "mine.txt", "old")

    def check(stdout, stderr):
        assert not (t / "ct2" / "mine.txt").exists() and (t / "ct2" / "model.bin").is_file()
    return Call(["--model_dir", a.model, "--out_dir", t / "ct2", "--overwrite"], 0, may_change=(t / "ct2",),
                check=check)


@case("export_ctranslate2", "out-dir-is-a-file")
def _(t, a):
    return Call(["--model_dir", a.model, "--out_dir", write(t / "ct2", "x")], 2,
                ("--out_dir", str(t / "ct2"), "is a file"))


@case("export_ctranslate2", "out-dir-is-the-model-dir-overwrite")
def _(t, a):
    folder = copy(a.model, t / "model")
    return Call(["--model_dir", folder, "--out_dir", folder, "--overwrite"], 2, ("--out_dir", str(folder)))


@case("export_ctranslate2", "max-positions-0")
def _(t, a):
    return Call(["--model_dir", a.model, "--out_dir", t / "ct2", "--max_positions", "0"], 2, ("--max_positions",))


@case("export_ctranslate2", "ctrl-c")
def _(t, a):
    return Call(["--model_dir", a.model, "--out_dir", t / "ct2"], 130, ("interrupted",),
                interrupt="vaswani_hf.export.ctranslate2_spec._metadata")  # inside the atomically written folder


# --- visualize_attention ----------------------------------------------------------------------------------------------


def visualize_argv(t, model, source=LINES[0], *extra):
    return ["--model_dir", model, "--source", source, "--out", t / "vis", "--num_beams", "1", "--max_new_tokens", "3",
            *extra]


model_classes("visualize_attention", "--model_dir", lambda t, a, m: visualize_argv(t, m))


@case("visualize_attention", "out-exists")
def _(t, a):
    write(t / "vis" / "mine.txt", "keep")
    return Call(visualize_argv(t, a.model), 2, ("--out", str(t / "vis"), "not empty", "--overwrite"))


@case("visualize_attention", "out-exists-overwrite", pytest.mark.slow)
def _(t, a):
    write(t / "vis" / "mine.txt", "old")

    def check(stdout, stderr):
        assert not (t / "vis" / "mine.txt").exists() and (t / "vis" / "diagnostics.txt").is_file()
    return Call(visualize_argv(t, a.model, LINES[0], "--overwrite"), 0, may_change=(t / "vis",), check=check)


@case("visualize_attention", "out-is-a-file")
def _(t, a):
    write(t / "vis", "x")
    return Call(visualize_argv(t, a.model), 2, ("--out", str(t / "vis"), "is a file"))


@case("visualize_attention", "empty-source")
def _(t, a):
    return Call(visualize_argv(t, a.model, " "), 2, ("--source", "empty"))


@case("visualize_attention", "over-long-source-learned-positions")
def _(t, a):
    return Call(visualize_argv(t, a.learned, LONG), 2, ("--source", "32 positions"))


@case("visualize_attention", "over-long-target-learned-positions")
def _(t, a):
    return Call(visualize_argv(t, a.learned, LINES[0], "--target", LONG), 2, ("--target", "32 positions"))


@case("visualize_attention", "bad-alignment")
def _(t, a):
    return Call(visualize_argv(t, a.model, LINES[0], "--target", GERMAN[0], "--alignment", "0-0 1:1"), 2,
                ("--alignment", "'1:1'"))


@case("visualize_attention", "ctrl-c")
def _(t, a):
    return Call(visualize_argv(t, a.model), 130, ("interrupted",), interrupt="vaswani_hf.visualize.visualize")


# --- push_to_hub ------------------------------------------------------------------------------------------------------


def push_argv(model, *extra, repo_id=REPO_ID):
    return ["--model_dir", model, "--repo_id", repo_id, *extra]


model_classes("push_to_hub", "--model_dir", lambda t, a, m: push_argv(m, "--dry_run"))


@case("push_to_hub", "dry-run-bad-repo-id")
def _(t, a):
    return Call(push_argv(a.model, "--dry_run", repo_id="bad repo//x"), 2, ("'bad repo//x' is invalid",))


@case("push_to_hub", "dry-run-lists-and-writes-nothing")
def _(t, a):
    return Call(push_argv(a.model, "--dry_run"), 0,
                check=stdout_has("dry run: would upload", "model.safetensors"))


@case("push_to_hub", "missing-card")
def _(t, a):
    folder = copy(a.model, t / "model")
    (folder / "README.md").unlink()
    return Call(push_argv(folder, "--dry_run"), 2, (str(folder), "README.md"))


@case("push_to_hub", "network-failure-token-never-printed")
def _(t, a):
    def check(stdout, stderr):
        assert TOKEN not in stdout + stderr
    return Call(push_argv(a.model), 1, (f"upload to {REPO_ID} failed",), check=check, env={"HF_TOKEN": TOKEN},
                patch={"huggingface_hub.constants.ENDPOINT": "http://127.0.0.1:9"})  # a closed port


@case("push_to_hub", "no-token")
def _(t, a):
    return Call(push_argv(a.model), 1, ("no Hugging Face token", "HF_TOKEN"),
                patch={"huggingface_hub.get_token": lambda: None}, env={"HF_TOKEN": None})


@case("push_to_hub", "ctrl-c")
def _(t, a):
    return Call(push_argv(a.model), 130, ("interrupted",), interrupt="vaswani_hf.hub.upload.push_folder",
                env={"HF_TOKEN": TOKEN})


# ---------------------------------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool, build", CASES)
def test_cli_contract(tool, build, tmp_path, assets, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written to the current folder is caught too
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    call = build(tmp_path, assets)
    for name, value in call.env.items():
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    for target, value in call.patch.items():
        monkeypatch.setattr(target, value)
    if call.interrupt:
        monkeypatch.setattr(call.interrupt, interrupted)
    if call.stdin is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(call.stdin), encoding="utf-8"))
    before = snapshot(tmp_path, assets.root)
    capfd.readouterr()
    code, warned = run_main(tool, call.argv)
    out, err = capfd.readouterr()
    assert code == call.code, \
        f"exit status {code}, expected {call.code}\nSTDOUT:\n{out[-3000:]}\nSTDERR:\n{err[-3000:]}"
    if call.code != 0:
        lines = err.splitlines() + warned
        assert len(lines) == 1 and "Traceback" not in err, f"expected one stderr line, got:\n{err}{warned}"
        for fragment in (*call.expect, "interrupted") if call.code == 130 else call.expect:
            assert fragment in lines[0], f"{fragment!r} not in the error line:\n{lines[0]}"
    changed = changes(before, snapshot(tmp_path, assets.root))
    unexpected = sorted(p for p in changed if not under(p, call.may_change))
    assert not unexpected, f"changed, created or removed although the contract forbids it: {unexpected}"
    if call.check:
        call.check(out, err)


def test_train_on_zero_usable_pairs_exports_no_model(tmp_path, assets, capfd, monkeypatch):
    """The half of the zero-usable-pairs cases that holds today: exit 2, the error is stderr's last line and names
    train_data, and no model or checkpoint is exported (that the run writes nothing at all is the xfail above)."""
    monkeypatch.chdir(tmp_path)
    corpus = moses(tmp_path, ["", "", ""], ["", " ", ""])
    code, _ = run_main("train", train_argv(tmp_path, assets, corpus=corpus, check=False))
    err = capfd.readouterr().err
    assert code == 2 and "Traceback" not in err and "train_data" in err.splitlines()[-1]
    assert not (tmp_path / "run" / "hub").exists() and not list((tmp_path / "run").glob("checkpoint-*"))


def test_every_tool_has_cases():
    counts = {tool: sum(1 for c in CASES if c.values[0] == tool) for tool in TOOLS}
    assert all(n >= 6 for n in counts.values()), counts


DEBUG_ARGV = {  # a bad input for each tool: with --debug the error propagates with its traceback
    "train": lambda t: ["--recipe", t / "absent.yaml", "--check"],
    "translate": lambda t: [t / "absent.txt", "--model", t / "model"],
    "evaluate": lambda t: ["--hypotheses", t / "absent.txt", "--references", t / "absent.txt"],
    "train_tokenizer": lambda t: ["--files", t / "absent.txt", "--out_dir", t / "tok"],
    "average_checkpoints": lambda t: ["--run_dir", t / "absent", "--out", t / "avg"],
    "export_marian": lambda t: ["--model_dir", t / "absent", "--out", t / "marian"],
    "export_ctranslate2": lambda t: ["--model_dir", t / "absent", "--out_dir", t / "ct2"],
    "visualize_attention": lambda t: ["--model_dir", t / "absent", "--source", "a", "--out", t / "vis"],
    "push_to_hub": lambda t: ["--model_dir", t / "absent", "--repo_id", REPO_ID],
}


@pytest.mark.parametrize("tool", TOOLS)
def test_debug_lets_the_error_through(tool, tmp_path, monkeypatch):
    """--debug (or VASWANI_DEBUG=1): the error is not caught, so Python prints its traceback (see the subprocess
    check below)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        run_main(tool, [*DEBUG_ARGV[tool](tmp_path), "--debug"])
    monkeypatch.setenv("VASWANI_DEBUG", "1")
    with pytest.raises(UsageError):
        run_main(tool, DEBUG_ARGV[tool](tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_debug_lets_ctrl_c_through(tmp_path, monkeypatch, assets):
    monkeypatch.setattr("vaswani_hf.evaluation.compute_all", interrupted)
    hyp, ref = write(tmp_path / "hyp.txt", GERMAN), write(tmp_path / "ref.txt", GERMAN)
    with pytest.raises(KeyboardInterrupt):
        run_main("evaluate", ["--hypotheses", hyp, "--references", ref, "--debug"])


# --- the real wrappers, in fresh interpreters -------------------------------------------------------------------------


def test_scripts_and_entry_points_are_the_cli_mains():
    """Each scripts/<tool>.py imports `main` from its vaswani_hf.cli module and exits with its status; each console
    entry point names the same function."""
    scripts = {"evaluate": "evaluate_translations"}
    entry_points = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    for tool in TOOLS:
        tree = ast.parse((REPO / "scripts" / f"{scripts.get(tool, tool)}.py").read_text(encoding="utf-8"))
        imports = [(node.module, [a.name for a in node.names]) for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom)]
        assert (f"vaswani_hf.cli.{tool}", ["main"]) in imports, tool
        assert "sys.exit(main())" in ast.unparse(tree), tool
        assert entry_points[f"vaswani-{tool.replace('_', '-')}"] == f"vaswani_hf.cli.{tool}:main"


@pytest.mark.slow
def test_script_wrapper_one_line_and_debug_traceback(tmp_path):
    hyp, ref = write(tmp_path / "hyp.txt", LATIN1), write(tmp_path / "ref.txt", GERMAN[:2])
    before = snapshot(tmp_path)
    result = run_script("evaluate_translations",
                        ["--hypotheses", hyp, "--references", ref, "--out", tmp_path / "s.json"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"evaluate_translations.py: error: {hyp}:2: not valid UTF-8")
    debug = run_script("train_tokenizer", ["--files", tmp_path / "absent.txt", "--out_dir", tmp_path / "tok",
                                           "--debug"], cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert f"UsageError: --files not found: {tmp_path / 'absent.txt'}" in debug.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_console_entry_point_one_line_after_loading_the_model(tmp_path, assets):
    """In a fresh process everything the libraries print counts too: the model is loaded (transformers' logger and
    bars), then the over-long line is refused in one line."""
    source = write(tmp_path / "long.txt", [LINES[0], LONG])
    before = snapshot(tmp_path, assets.root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VASWANI_DEBUG")}
    result = subprocess.run([str(Path(sys.executable).parent / "vaswani-translate"), str(source), "--model",
                             str(assets.learned), "--output", str(tmp_path / "out.txt")], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vaswani-translate: error: {source}:2: "), result.stderr
    assert "learned position embeddings cover 32 positions" in lines[0]
    assert snapshot(tmp_path, assets.root) == before
