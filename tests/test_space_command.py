"""The Space's files and command line: what `push_space` writes, where the model comes from (flag,
environment, the Space's README, the bundled folder), and `vaswani-space` refusing a bad address, a taken port or a
missing model in one line before the model is loaded (vaswani_hf.space). The page itself: tests/test_space.py and
tests/test_space_browser.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import tomllib
from cli_helpers import REPO, assert_one_line_error, free_port

from vaswani_hf.errors import UsageError
from vaswani_hf.space import logic, page
from vaswani_hf.space import push as hub_space

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# --- the Space's files and the command line ------------------------------------------------------------------------


def test_the_space_files_are_the_package_s_app_and_its_declared_dependencies(tmp_path):
    """The Space `push_space` uploads (less the model id and the package source): app.py is vaswani_hf/space/app.py
    as it is, the README's front matter configures a Gradio Space, and requirements.txt lists pyproject's
    dependencies and the `space` extra."""
    from huggingface_hub import SpaceCard
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    folder = tmp_path / "space"
    folder.mkdir()
    (folder / "README.md").write_text(hub_space.render_space_readme(), encoding="utf-8")
    assert "from vaswani_hf.space.page import main, model_from_readme" in hub_space.SPACE_APP
    assert callable(page.main) and callable(page.model_from_readme)  # what the Space's app.py starts
    card = SpaceCard.load(folder / "README.md").data
    assert (card.sdk, card.app_file, card.sdk_version) == ("gradio", "app.py", hub_space.GRADIO_SDK_VERSION)
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = {
        str(Requirement(line))
        for line in hub_space.space_requirements().splitlines()
        if line and not line.startswith(("#", "-"))
    }
    wanted = project["dependencies"] + [r for r in project["optional-dependencies"]["space"] if "gradio" not in r]
    assert listed == {str(Requirement(r)) for r in wanted}  # reinstall (pip install -e .) if not
    gradio, langid = [Requirement(r) for r in project["optional-dependencies"]["space"]]
    assert gradio.name == "gradio" and hub_space.GRADIO_SDK_VERSION in SpecifierSet(str(gradio.specifier))
    assert langid.name == "py3langid"
    assert project["scripts"]["vaswani-space"] == "vaswani_commands:space"  # the runner, then vaswani_hf.space:main


def test_model_comes_from_the_flag_the_environment_the_readme_then_the_bundled_folder(tmp_path, monkeypatch):
    from vaswani_hf.space import page

    monkeypatch.delenv(page.MODEL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # the recipes' outputs/ folders, relative to where the page starts
    assert page.resolve_model(None) == "outputs/multi30k-en-de-space/hub"  # none built: the one to build, named
    (tmp_path / "outputs" / "default" / "hub").mkdir(parents=True)
    assert page.resolve_model(None) == "outputs/default/hub"  # the demo model, the only one there
    (tmp_path / "outputs" / "multi30k-en-de-space" / "hub").mkdir(parents=True)
    assert page.resolve_model(None) == "outputs/multi30k-en-de-space/hub"  # the Space's model first
    (tmp_path / "README.md").write_text(hub_space.render_space_readme("org/vaswani-base"), encoding="utf-8")
    readme_model = page.model_from_readme(tmp_path / "app.py")
    assert (
        readme_model == "org/vaswani-base" and page.model_from_readme(REPO / "vaswani_hf" / "space" / "app.py") is None
    )
    assert page.resolve_model(None, readme_model) == "org/vaswani-base"
    monkeypatch.setenv(page.MODEL_ENV, "env/model")
    assert page.resolve_model(None, readme_model) == "env/model"
    assert page.resolve_model("flag/model", readme_model) == "flag/model"


def test_an_empty_model_name_is_refused_not_replaced(monkeypatch):
    from vaswani_hf.space import page

    monkeypatch.setenv(page.MODEL_ENV, "env/model")
    for empty in ("", "  "):
        with pytest.raises(UsageError, match="--model is empty"):
            page.resolve_model(empty, "org/readme-model")
    monkeypatch.setenv(page.MODEL_ENV, "")
    with pytest.raises(UsageError, match=f"{page.MODEL_ENV} is set but empty"):
        page.resolve_model(None, "org/readme-model")


@pytest.fixture
def taken_port():
    """A port on 127.0.0.1 that another program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.fixture
def no_gradio_variables(monkeypatch):
    from vaswani_hf.space import page

    for name in (page.HOST_ENV, page.PORT_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_gradio_variables")
def test_the_address_is_checked_and_named_by_its_flag_or_variable(taken_port, monkeypatch):
    from vaswani_hf.space import page

    port = free_port()
    assert page.listen_address(None, port) == ("127.0.0.1", port) and page.listen_address() == ("127.0.0.1", None)
    cases = [
        ((None, taken_port), {}, f"--port {taken_port}: the port is in use"),
        (("999.1.1.1", None), {}, "--host '999.1.1.1' is not an address or a host name this machine knows"),
        (("192.0.2.1", port), {}, "--host '192.0.2.1' is not an address of this machine"),  # TEST-NET-1
        (("", None), {}, "--host is empty"),
        ((None, None), {page.PORT_ENV: "abc"}, "GRADIO_SERVER_PORT='abc' is not a port number"),
        ((None, None), {page.PORT_ENV: "70000"}, "GRADIO_SERVER_PORT='70000' is not a port number"),
        ((None, None), {page.PORT_ENV: str(taken_port)}, f"GRADIO_SERVER_PORT={taken_port}: the port is in use"),
        ((None, None), {page.HOST_ENV: "999.1.1.1"}, "GRADIO_SERVER_NAME '999.1.1.1' is not an address"),
    ]
    for arguments, environment, fragment in cases:
        with monkeypatch.context() as patch:
            for name, value in environment.items():
                patch.setenv(name, value)
            with pytest.raises(UsageError) as error:
                page.listen_address(*arguments)
        assert fragment in str(error.value) and "\n" not in str(error.value), (arguments, environment, error.value)
    monkeypatch.setenv(page.PORT_ENV, str(port))
    assert page.listen_address("127.0.0.1", None) == ("127.0.0.1", port)  # the variable, as Gradio reads it


@pytest.mark.usefixtures("no_gradio_variables")
def test_command_line_refuses_a_bad_address_before_loading_the_model(
    tiny,
    taken_port,
    capsys,  # noqa: F811
    monkeypatch,
):
    from vaswani_hf.space import page

    monkeypatch.setattr(logic, "load_space_model", lambda *a, **k: pytest.fail("the model was loaded first"))
    folder = str(tiny["folder"])
    assert_one_line_error(
        page.main, ["--model", folder, "--port", str(taken_port)], capsys, 2, "vaswani-space: error: --port", "in use"
    )
    assert_one_line_error(page.main, ["--model", folder, "--host", "999.1.1.1"], capsys, 2, "--host '999.1.1.1'")
    assert_one_line_error(page.main, ["--model", ""], capsys, 2, "--model is empty")
    monkeypatch.setenv(page.PORT_ENV, "abc")
    assert_one_line_error(page.main, ["--model", folder], capsys, 2, "GRADIO_SERVER_PORT='abc'")


@pytest.mark.slow
def test_vaswani_space_with_its_port_taken_is_one_line_exit_2(tiny, taken_port, tmp_path):  # noqa: F811
    """The real process: the refusal comes before Gradio is imported and the model loaded (no traceback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GRADIO_")) and k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for argv, extra, fragment in (
        (["--port", str(taken_port)], {}, f"--port {taken_port}: the port is in use"),
        ([], {"GRADIO_SERVER_PORT": "abc"}, "GRADIO_SERVER_PORT='abc'"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "vaswani_hf.space", "--model", str(tiny["folder"]), *argv],
            env={**env, **extra},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.count("\n") == 1 and fragment in done.stderr and "Traceback" not in done.stderr


def test_command_line_refuses_a_missing_model_in_one_line(tmp_path, capsys, monkeypatch):
    from vaswani_hf.space import page

    monkeypatch.delenv(page.MODEL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(
        page.main, [], capsys, 2, "outputs/multi30k-en-de-space/hub not found", "--recipe multi30k-en-de-space"
    )
    assert_one_line_error(
        page.main, ["--model", str(tmp_path / "absent")], capsys, 2, "vaswani-space: error:", str(tmp_path / "absent")
    )
    assert_one_line_error(page.main, ["--port", "0"], capsys, 2, "--port")
