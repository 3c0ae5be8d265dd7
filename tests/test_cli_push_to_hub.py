"""The command-line contract of `vaswani-push-to-hub` (vaswani_hf.cli.push_to_hub), for every input class that applies
to it: a broken model folder or card, a bad repo id, no token, an unreachable Hub (the token never printed), Ctrl-C.
What each case asserts, and the shared assets: cli_contract.py.
"""

from __future__ import annotations

import pytest
from cli_contract import Call, Cases, PathCase, copy, model_classes, stdout_has
from hub_helpers import REPO_ID

TOKEN = "hf_contractTEST_0123456789abcdefSECRET"

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

case = Cases(
    "push_to_hub",
    refused=lambda t: ["--model_dir", t / "absent", "--repo_id", "org/name", "--dry_run"],
    run=lambda a, t: ["--model_dir", a.model, "--repo_id", REPO_ID, "--dry_run"],
    paths=[
        PathCase(
            "push_to_hub",
            lambda f, a: {"--model_dir": copy(a.model, f / "model")},
            lambda i, o, w: ["--model_dir", i["--model_dir"], "--repo_id", REPO_ID, "--dry_run"],
            None,
        )
    ],
)


def push_argv(model, *extra, repo_id=REPO_ID):
    return ["--model_dir", model, "--repo_id", repo_id, *extra]


model_classes(case, "--model_dir", lambda t, a, m: push_argv(m, "--dry_run"))


@case("dry-run-bad-repo-id")
def _(t, a):
    return Call(push_argv(a.model, "--dry_run", repo_id="bad repo//x"), 2, ("'bad repo//x' is invalid",))


@case("dry-run-lists-and-writes-nothing")
def _(t, a):
    return Call(push_argv(a.model, "--dry_run"), 0, check=stdout_has("dry run: would upload", "model.safetensors"))


@case("missing-card")
def _(t, a):
    folder = copy(a.model, t / "model")
    (folder / "README.md").unlink()
    return Call(push_argv(folder, "--dry_run"), 2, (str(folder), "README.md"))


@case("network-failure-token-never-printed")
def _(t, a):
    def check(stdout, stderr):
        assert TOKEN not in stdout + stderr

    return Call(
        push_argv(a.model),
        1,
        (f"upload to {REPO_ID} failed",),
        check=check,
        env={"HF_TOKEN": TOKEN},
        patch={"huggingface_hub.constants.ENDPOINT": "http://127.0.0.1:9"},
    )  # a closed port


@case("no-token")
def _(t, a):
    return Call(
        push_argv(a.model),
        1,
        ("no Hugging Face token", "HF_TOKEN"),
        patch={"huggingface_hub.get_token": lambda: None},
        env={"HF_TOKEN": None},
    )


@case("ctrl-c")
def _(t, a):
    return Call(
        push_argv(a.model),
        130,
        ("interrupted",),
        interrupt="vaswani_hf.cli.push_to_hub.push_folder",
        env={"HF_TOKEN": TOKEN},
    )


test_cli_contract = case.contract_test()  # every case above
