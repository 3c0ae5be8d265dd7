"""The upload refuses, before any request (dry run included), a folder that loads badly on the user's machine: a
JSON file that does not parse or has the wrong shape, a code file that does not compile or lacks the class
config.json's auto_map names, generation settings out of their bounds, a tokenizer of another vocabulary or that
transformers cannot load, and a revision that is no git branch name. One problem each, naming the file."""

import io
import json

import pytest
from hub_helpers import REPO_ID, copy_folder

from vaswani_hf import hub
from vaswani_hf.hub.upload import revision_problem


def _edit_json(folder, name, change):
    path = folder / name
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


BROKEN = {
    "metrics truncated": ("metrics.json", lambda f: (f / "metrics.json").write_text('{"bleu": ', encoding="utf-8")),
    "training metrics a list": (
        "training_metrics.json",
        lambda f: (f / "training_metrics.json").write_text("[1, 2]", encoding="utf-8"),
    ),
    "num_beams -1": (
        "generation_config.json",
        lambda f: _edit_json(f, "generation_config.json", lambda d: d.update(num_beams=-1)),
    ),
    "syntax error": ("modeling_vaswani.py", lambda f: (f / "modeling_vaswani.py").write_text("def (:\n")),
    "class missing": ("modeling_vaswani.py", lambda f: (f / "modeling_vaswani.py").write_text("x\n")),
    "eos_token an object": (
        "tokenizer_config.json",
        lambda f: _edit_json(f, "tokenizer_config.json", lambda d: d.update(eos_token={"content": 5})),
    ),
    "all_results broken": ("all_results.json", lambda f: (f / "all_results.json").write_text("{", encoding="utf-8")),
    "tokenizer of another size": (
        "tokenizer",
        lambda f: _edit_json(
            f,
            "tokenizer.json",
            lambda d: d["model"]["vocab"].update({"zzz_extra_token": len(d["model"]["vocab"]) + 50}),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_folder_is_refused_before_any_request(tiny, tmp_path, hub_server, case):  # noqa: F811
    named, breaker = BROKEN[case]
    folder = copy_folder(tiny["folder"], tmp_path / "folder")
    assert hub.check_folder(folder, repo_id=REPO_ID) == []
    breaker(folder)
    with pytest.raises(ValueError) as error:
        hub.push_folder(folder, REPO_ID, dry_run=True, out=io.StringIO())
    message = str(error.value)
    assert named in message and "\n" not in message, message
    with pytest.raises(ValueError):  # the real upload refuses it too, before any request
        hub.push_folder(folder, REPO_ID, token="x", out=io.StringIO())
    assert hub_server.requests == []


@pytest.mark.parametrize(
    "revision",
    [
        "bad..rev",
        "a b",
        "x/",
        "/x",
        "x.",
        "x.lock",
        "a~1",
        "a^",
        "a:b",
        "a?",
        "a*",
        "a[b",
        "a\\b",
        "",
        "@",
        "a@{b",
        "a//b",
        ".hidden",
        "a/.b",
    ],
)
def test_invalid_revisions_are_refused(revision):
    assert revision_problem(revision) is not None and repr(revision) in revision_problem(revision)


@pytest.mark.parametrize("revision", [None, "main", "v1.0", "feature/x", "release-2", "a_b"])
def test_valid_revisions_pass(revision):
    assert revision_problem(revision) is None


def test_push_names_a_bad_revision_even_in_a_dry_run(tiny, hub_server):  # noqa: F811
    with pytest.raises(ValueError) as error:
        hub.push_folder(tiny["folder"], REPO_ID, revision="bad..rev", dry_run=True, out=io.StringIO())
    assert "revision 'bad..rev'" in str(error.value)
    assert hub_server.requests == []
