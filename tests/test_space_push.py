"""Creating the Space on the Hub (vaswani_hf.space.push.push_space, vaswani-push-to-hub --space_id): the dry run
lists the files without a request, bad ids are refused before any request, and a real push through the
`huggingface_hub` client against the loopback test double (tests/hub_server.py) gives a Gradio Space, in one commit,
whose app serves the model repository by its id: the Space's own copy of the package, in a fresh interpreter, loads
the model from the double and translates as the original model does."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error
from hub_helpers import REPO_ID, REPO_ROOT, SOURCES, clean_env, run
from hub_store import TEST_TOKEN

from vaswani_hf import translate
from vaswani_hf.cli import push_to_hub as cli
from vaswani_hf.space import push as hub_space

SPACE_ID = "org/vaswani-demo"
PACKAGE = Path(hub_space.__file__).resolve().parents[1]


def test_dry_run_lists_the_space_files_and_makes_no_request(hub_server):  # noqa: F811
    out = io.StringIO()
    files = dict(hub_space.push_space(REPO_ID, SPACE_ID, dry_run=True, out=out))
    assert {
        "app.py",
        "README.md",
        "requirements.txt",
        "vaswani_hf/__init__.py",
        "vaswani_hf/space/page.py",
        "vaswani_hf/space/logic.py",
        "vaswani_hf/visualize/attention.py",
    } <= set(files)
    assert not [
        name
        for name in files
        if "__pycache__" in name or name.endswith(".pyc") or name.startswith("vaswani_hf/sample_data/")
    ]
    assert files["app.py"] == len(hub_space.SPACE_APP.encode())
    assert f"to the Gradio Space {SPACE_ID}, serving {REPO_ID}" in out.getvalue()
    assert hub_server.requests == []


def test_the_space_readme_links_the_model_it_serves():
    from huggingface_hub import SpaceCard

    card = SpaceCard(hub_space.render_space_readme(REPO_ID)).data
    assert card.models == [REPO_ID] and card.sdk == "gradio" and card.app_file == "app.py"
    assert card.sdk_version == hub_space.GRADIO_SDK_VERSION and card.license == "apache-2.0"


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["--repo_id", REPO_ID, "--space_id", "bad id//x", "--space_only"], ["--space_id 'bad id//x' is invalid"]),
        (["--repo_id", REPO_ID, "--space_only"], ["--space_only needs --space_id"]),
        (["--repo_id", REPO_ID], ["required: --model_dir"]),
        (["--repo_id", "bad repo//x", "--space_id", SPACE_ID, "--space_only"], ["model repository id 'bad repo//x'"]),
        (
            ["--model_dir", "outputs/x", "--repo_id", REPO_ID, "--space_id", SPACE_ID, "--space_only"],
            ["--model_dir and --space_only exclude each other"],
        ),
    ],
)
def test_bad_space_arguments_are_one_line_exit_2_before_any_request(argv, fragments, capsys, hub_server):  # noqa: F811
    for dry_run in ([], ["--dry_run"]):
        assert_one_line_error(cli.main, [*argv, *dry_run], capsys, 2, *fragments)
    assert hub_server.requests == []


def test_a_bad_space_id_is_refused_before_the_model_is_uploaded(tiny, capsys, hub_server):  # noqa: F811
    assert_one_line_error(
        cli.main,
        ["--model_dir", str(tiny["folder"]), "--repo_id", REPO_ID, "--space_id", "bad id//x"],
        capsys,
        2,
        "--space_id 'bad id//x' is invalid",
    )
    assert hub_server.requests == []


def test_space_only_for_a_model_repository_that_does_not_exist_is_refused(
    capsys,
    hub_server,  # noqa: F811
    monkeypatch,
):
    """Only a read of the model repository's info: no Space is created for a page that could serve nothing."""
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub_server.endpoint)
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    assert_one_line_error(
        cli.main,
        ["--repo_id", "org/absent", "--space_id", SPACE_ID, "--space_only"],
        capsys,
        2,
        "the model repository org/absent does not exist on the Hub",
        "push the model first",
    )
    assert {method for method, _ in hub_server.requests} == {
        "GET"
    } and f"spaces/{SPACE_ID}" not in hub_server.hub.repos


SPACE_CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])  # the Space's folder, as `python app.py` puts it first
import vaswani_hf
from vaswani_hf.space import page as space
from vaswani_hf.space import logic as space_logic
model = space.resolve_model(None, space.model_from_readme(sys.argv[1] + "/app.py"))
page = space_logic.load_space_model(model)
result = space_logic.translate_text(page, sys.argv[2], 4, 0.6)
print(json.dumps({"package": vaswani_hf.__file__, "model": model, "text": result.text}))
"""


@pytest.mark.slow
def test_push_model_and_space_then_the_space_serves_the_model_by_its_id(tiny, hub_server, tmp_path):  # noqa: F811
    env = clean_env(
        HF_ENDPOINT=hub_server.endpoint, HF_TOKEN=TEST_TOKEN, HF_HOME=str(tmp_path / "pusher"), HF_HUB_DISABLE_XET="1"
    )
    pushed = run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "push_to_hub.py"),
            "--model_dir",
            str(tiny["folder"]),
            "--repo_id",
            REPO_ID,
            "--space_id",
            SPACE_ID,
        ],
        env,
        cwd=tmp_path,
    )
    assert TEST_TOKEN not in pushed.stdout + pushed.stderr and "it serves org/vaswani-base" in pushed.stdout
    assert hub_server.unhandled == []
    key = f"spaces/{SPACE_ID}"
    assert hub_server.hub.repos[key].space_sdk == "gradio"
    assert hub_server.history(key) == [hub_space.DEFAULT_SPACE_COMMIT_MESSAGE, "initial commit"]  # one commit
    assert "model.safetensors" in hub_server.files(REPO_ID)
    remote = hub_server.files(key)
    space_dir = tmp_path / "space"
    for name, entry in remote.items():  # the Space as the Hub would run it
        (space_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (space_dir / name).write_bytes(hub_server.hub.content(entry))
    assert (space_dir / "app.py").read_text(encoding="utf-8") == hub_space.SPACE_APP
    assert (space_dir / "vaswani_hf" / "space" / "logic.py").read_bytes() == (
        PACKAGE / "space" / "logic.py"
    ).read_bytes()

    script = tmp_path / "check_space.py"
    script.write_text(SPACE_CHECK, encoding="utf-8")
    env = clean_env(
        HF_ENDPOINT=hub_server.endpoint,
        HF_HOME=str(tmp_path / "space_home"),
        HF_HUB_DISABLE_XET="1",
        GRADIO_ANALYTICS_ENABLED="False",
    )
    served = json.loads(
        run([sys.executable, str(script), str(space_dir), SOURCES[0]], env, cwd=tmp_path)
        .stdout.strip()
        .splitlines()[-1]
    )
    assert served["package"].startswith(str(space_dir))  # the Space's copy, not the installed package
    expected = translate(
        tiny["model"], tiny["tokenizer"], [SOURCES[0]], num_beams=4, length_penalty=0.6, progress=False
    )[0]
    assert served["model"] == REPO_ID and served["text"] == expected
    assert hub_server.unhandled == []


@pytest.mark.slow
def test_space_only_updates_an_existing_space_in_a_new_commit(hub_server, tmp_path):  # noqa: F811
    """--space_only uploads no model, for models that exist; pointing the Space at another model is one more
    commit, the same one none."""
    from huggingface_hub import HfApi

    models = (REPO_ID, "org/other-model")
    for model in models:
        HfApi(endpoint=hub_server.endpoint, token=TEST_TOKEN).create_repo(model)
    env = clean_env(
        HF_ENDPOINT=hub_server.endpoint, HF_TOKEN=TEST_TOKEN, HF_HOME=str(tmp_path / "home"), HF_HUB_DISABLE_XET="1"
    )
    for model in (REPO_ID, "org/other-model", "org/other-model"):
        run(
            [
                sys.executable,
                str(REPO_ROOT / "scripts" / "push_to_hub.py"),
                "--repo_id",
                model,
                "--space_id",
                SPACE_ID,
                "--space_only",
            ],
            env,
            cwd=tmp_path,
        )
    assert [hub_server.history(model) for model in models] == [["initial commit"]] * 2  # no model uploaded
    key = f"spaces/{SPACE_ID}"
    assert len(hub_server.history(key)) == 3  # initial, REPO_ID, org/other-model; the unchanged push: no commit
    readme = hub_server.hub.content(hub_server.files(key)["README.md"]).decode()
    assert "models:\n  - org/other-model\n" in readme
    assert hub_server.unhandled == []
