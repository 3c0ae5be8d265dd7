"""Upload (vaswani_hf.hub.upload, vaswani-push-to-hub): exactly the listed files in one commit through the real
`huggingface_hub` client against the loopback test double (tests/hub_server.py), and every refusal before any
network call: incomplete folder, truncated weights, broken config.json, missing tokenizer or code file, invalid
repository id; network and authentication failures are one line with exit status 1, the token never printed."""

import io
import sys

import pytest
from cli_helpers import assert_one_line_error, assert_script_error, run_script, truncate
from hub_helpers import REPO_ID, REPO_ROOT, assert_same_outputs, clean_env, copy_folder, load_in_subprocess, run
from hub_store import TEST_TOKEN

from vaswani_hf import hub
from vaswani_hf.cli import push_to_hub as cli
from vaswani_hf.io import RunFailure
from vaswani_hf.io.models import CODE_FILES


def test_dry_run_lists_exactly_the_uploaded_files_and_makes_no_request(tiny, hub_server, capsys):
    folder = tiny["folder"]
    (folder / "pytorch_model.bin").write_bytes(b"pickled")  # never uploaded
    (folder / "checkpoint-10").mkdir(exist_ok=True)
    try:
        assert cli.main(["--model_dir", str(folder), "--repo_id", REPO_ID, "--dry_run"]) == 0
    finally:
        (folder / "pytorch_model.bin").unlink()
        (folder / "checkpoint-10").rmdir()
    out = capsys.readouterr().out
    listed = [line.split()[:2] for line in out.splitlines() if line.startswith("  ")]
    expected = hub.list_upload_files(folder)
    assert listed == [[name, str(size)] for name, size in expected]
    names = {name for name, _ in expected}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        *CODE_FILES,
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "metrics.json",
        "handler.py",
    } <= names
    assert "pytorch_model.bin" not in names and "not uploaded: checkpoint-10/, pytorch_model.bin" in out
    assert hub_server.requests == []


def test_only_the_code_config_json_needs_is_uploaded_and_the_dry_run_names_the_rest(tiny, tmp_path):
    """An unreferenced *.py (one holding a token, a helper script) is not sent: the code files are those config.json
    names and their relative imports, plus handler.py; the dry run lists exactly the files sent and names the rest."""
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    (folder / "my_notes.py").write_text('HF_TOKEN = "hf_planted_secret"\n', encoding="utf-8")
    (folder / "train_helper.py").write_text("from .modeling_vaswani import X\n", encoding="utf-8")
    out = io.StringIO()
    files = hub.push_folder(folder, REPO_ID, dry_run=True, out=out)
    names = {name for name, _ in files}
    assert {*CODE_FILES, "handler.py"} <= names
    assert not names & {"my_notes.py", "train_helper.py"}
    assert "not uploaded: my_notes.py, train_helper.py" in out.getvalue()
    listed = {line.split()[0] for line in out.getvalue().splitlines() if line.startswith("  ")}
    assert listed == names


def test_push_refuses_an_incomplete_folder(tiny, tmp_path):
    folder = copy_folder(tiny["folder"], tmp_path / "incomplete")
    (folder / "README.md").unlink()
    (folder / "configuration_vaswani.py").unlink()
    with pytest.raises(ValueError) as error:
        hub.push_folder(folder, REPO_ID, dry_run=True, out=io.StringIO())
    assert "README.md" in str(error.value) and "configuration_vaswani.py" in str(error.value)
    assert "\n" not in str(error.value)  # one line


def test_check_folder_names_truncated_weights_broken_config_and_bad_repo_id(tiny, tmp_path):
    folder = copy_folder(tiny["folder"], tmp_path / "broken")
    assert hub.check_folder(folder, repo_id=REPO_ID) == []
    truncate(folder / "model.safetensors")
    problems = hub.check_folder(folder, repo_id="bad repo//x")
    assert any("model.safetensors: truncated or corrupt safetensors weights" in p for p in problems), problems
    assert any("'bad repo//x' is invalid" in p for p in problems), problems
    (folder / "config.json").write_text('{"model_type": "vaswani",', encoding="utf-8")
    assert any("config.json:1: invalid JSON" in p for p in hub.check_folder(folder))


def test_check_folder_names_a_missing_generation_code_file(tiny, tmp_path):
    """modeling_vaswani.py imports its siblings relatively: each must travel with it (trust_remote_code)."""
    folder = copy_folder(tiny["folder"], tmp_path / "no_sibling")
    modeling = (folder / "modeling_vaswani.py").read_text(encoding="utf-8")
    sibling = next(
        name for name in ("generation_vaswani", "beam_search_vaswani") if f"from .{name} import" in modeling
    )
    (folder / f"{sibling}.py").unlink()
    assert f"modeling_vaswani.py imports .{sibling}, but {sibling}.py is not in the folder" in hub.check_folder(folder)


@pytest.mark.parametrize("case", ["missing", "file", "truncated", "config", "tokenizer", "repo_id"])
def test_cli_refusals_are_one_line_exit_2_and_change_nothing(tiny, tmp_path, capsys, hub_server, case):
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    repo_id, expected = REPO_ID, []
    if case == "missing":
        folder, expected = tmp_path / "absent", ["--model_dir not found", "absent"]
    elif case == "file":
        folder, expected = folder / "config.json", ["is a file"]
    elif case == "truncated":
        truncate(folder / "model.safetensors")
        expected = ["model.safetensors: truncated or corrupt safetensors weights"]
    elif case == "config":
        (folder / "config.json").write_text("{not json", encoding="utf-8")
        expected = ["config.json:1: invalid JSON"]
    elif case == "tokenizer":
        (folder / "tokenizer.json").unlink()
        expected = ["no tokenizer.json"]
    else:
        repo_id, expected = "bad repo//x", ["'bad repo//x' is invalid"]
    before = {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else None
    for dry_run in ([], ["--dry_run"]):
        assert_one_line_error(
            cli.main, ["--model_dir", str(folder), "--repo_id", repo_id, *dry_run], capsys, 2, *expected
        )
    assert hub_server.requests == []
    if before is not None:
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_ctrl_c_is_exit_130_one_line(tiny, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("vaswani_hf.cli.push_to_hub.push_folder", interrupted)
    assert_one_line_error(
        cli.main, ["--model_dir", str(tiny["folder"]), "--repo_id", REPO_ID], capsys, 130, "interrupted"
    )


def test_push_without_token_fails_clearly(tiny, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(RuntimeError, match="HF_TOKEN") as error:
        hub.push_folder(tiny["folder"], REPO_ID, out=io.StringIO())
    assert isinstance(error.value, RunFailure)


@pytest.mark.slow
def test_push_round_trip_through_local_test_double(tiny, hub_server, tmp_path):
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    (folder / "checkpoint-10").mkdir()  # a sub-folder's files match "*.py" under fnmatch, and are still not sent
    (folder / "checkpoint-10" / "modeling_vaswani.py").write_text("# an old copy\n", encoding="utf-8")
    (folder / "my_notes.py").write_text('HF_TOKEN = "hf_planted_secret"\n', encoding="utf-8")  # named by nothing
    # a card written before the repository was known, as scripts/train.py writes it
    readme = folder / "README.md"
    readme.write_text(
        readme.read_text(encoding="utf-8").replace(f'"{REPO_ID}"', f'"{hub.card.LOCAL_REPO_ID}"'), encoding="utf-8"
    )
    env = clean_env(
        HF_ENDPOINT=hub_server.endpoint,
        HF_TOKEN=TEST_TOKEN,
        HF_HOME=str(tmp_path / "pusher_home"),
        HF_HUB_DISABLE_XET="1",
    )
    pushed = run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "push_to_hub.py"),
            "--model_dir",
            str(folder),
            "--repo_id",
            REPO_ID,
            "--commit_message",
            "Upload tiny model",
        ],
        env,
        cwd=tmp_path,
    )
    assert TEST_TOKEN not in pushed.stdout + pushed.stderr

    assert hub_server.unhandled == []
    assert hub_server.history(REPO_ID) == ["Upload tiny model", "initial commit"]  # one commit with everything
    remote = hub_server.files(REPO_ID)
    expected = dict(hub.list_upload_files(folder))
    assert set(remote) == set(expected) | {".gitattributes"}
    assert "my_notes.py" not in remote
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f'"{hub.card.LOCAL_REPO_ID}"' in card  # kept as it was
    for name in expected:
        sent = (folder / name).read_bytes()
        if name == "README.md":  # the published card's snippets load this repository; the folder's file is kept
            sent = card.replace(f'"{hub.card.LOCAL_REPO_ID}"', f'"{REPO_ID}"').encode("utf-8")
            assert hub.card.LOCAL_REPO_ID not in sent.decode() and f'from_pretrained("{REPO_ID}"' in sent.decode()
        assert hub_server.hub.content(remote[name]) == sent, name
    assert remote["model.safetensors"]["lfs"] and not remote["config.json"]["lfs"]
    assert ("POST", f"/{REPO_ID}.git/info/lfs/objects/batch") in hub_server.requests

    # download by repo id through the same server, on a "machine" without vaswani_hf
    hub_server.requests.clear()
    env = clean_env(HF_ENDPOINT=hub_server.endpoint, HF_HOME=str(tmp_path / "user_home"), HF_HUB_DISABLE_XET="1")
    loaded = load_in_subprocess(tmp_path, env, block_package=True, trust_remote_code=True)
    assert loaded["model_module"].startswith("transformers_modules.")
    assert_same_outputs(tiny, loaded)
    assert hub_server.unhandled == []
    assert any(
        path.endswith("/resolve/" + hub_server.hub.repos[REPO_ID].branches["main"] + "/model.safetensors")
        for _, path in hub_server.requests
    )


@pytest.mark.slow
def test_push_private_to_a_branch(tiny, hub_server, tmp_path):
    env = clean_env(
        HF_ENDPOINT=hub_server.endpoint, HF_TOKEN=TEST_TOKEN, HF_HOME=str(tmp_path / "home"), HF_HUB_DISABLE_XET="1"
    )
    run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "push_to_hub.py"),
            "--model_dir",
            str(tiny["folder"]),
            "--repo_id",
            "org/vaswani-private",
            "--private",
            "--revision",
            "dev",
        ],
        env,
        cwd=tmp_path,
    )
    repo = hub_server.hub.repos["org/vaswani-private"]
    assert repo.private
    assert hub_server.history("org/vaswani-private", "main") == ["initial commit"]
    assert len(hub_server.history("org/vaswani-private", "dev")) == 2
    assert "model.safetensors" in hub_server.files("org/vaswani-private", "dev")
    assert hub_server.unhandled == []


@pytest.mark.slow
def test_refused_token_and_unreachable_hub_are_one_line_exit_1(tiny, hub_server, tmp_path):
    wrong = "hf_wrongtoken_abcdefghijklmnop"
    refused = run_script(
        "push_to_hub",
        ["--model_dir", tiny["folder"], "--repo_id", REPO_ID],
        env=clean_env(
            HF_ENDPOINT=hub_server.endpoint, HF_TOKEN=wrong, HF_HOME=str(tmp_path / "a"), HF_HUB_DISABLE_XET="1"
        ),
        cwd=tmp_path,
    )
    assert_script_error(refused, 1, f"upload to {REPO_ID} failed", "Invalid user token")
    assert wrong not in refused.stdout + refused.stderr and REPO_ID not in hub_server.hub.repos
    # a closed port: connection refused
    unreachable = run_script(
        "push_to_hub",
        ["--model_dir", tiny["folder"], "--repo_id", REPO_ID],
        env=clean_env(
            HF_ENDPOINT="http://127.0.0.1:9", HF_TOKEN=TEST_TOKEN, HF_HOME=str(tmp_path / "b"), HF_HUB_DISABLE_XET="1"
        ),
        cwd=tmp_path,
    )
    line = assert_script_error(unreachable, 1, f"upload to {REPO_ID} failed")
    assert TEST_TOKEN not in unreachable.stdout + unreachable.stderr, line
