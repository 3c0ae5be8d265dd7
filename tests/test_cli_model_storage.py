"""A model folder is a model folder however it is stored: every tool that reads one reads it, and gives the same
output as from the folder `save_pretrained` wrote, when it is

- a snapshot of huggingface_hub's cache (models--org--name/snapshots/<commit>/, every file a symbolic link into
  ../../blobs/, and refs/main), as `from_pretrained` leaves it after a download;
- a folder of symbolic links into another folder the user owns;
- a read-only folder (chmod -R a-w). The superuser's writes ignore permissions, so under root a tool that wrote into
  it would not fail; every case therefore also checks that nothing under the model folder (and under what its links
  point at) changed, which holds for root and for everyone else.

The tools are those whose registry command line (`Cases.run`) names the model folder or the training run's
checkpoints, and the model-reading modes those lines leave out: vaswani-evaluate with --model, and the Space's page
(its model loaded as `vaswani-space` loads it, without serving it). The guard against symbolic links stays with the
outputs: an output folder that is a symbolic link to a folder is still refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import LINES, TRANSLATE_OPTIONS, changes, copy, every_tool, run_main, snapshot
from hub_helpers import place_in_hf_cache

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

KINDS = ("hub-cache-snapshot", "links-into-another-folder", "read-only")
MODEL, RUN = Path("/<model>"), Path("/<run>")  # stand-ins that show which command lines read what


def _read_only(folder: Path) -> None:
    for path in [*folder.rglob("*"), folder]:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable_again(root: Path) -> None:  # so that pytest can remove the case's folder
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)


def stored(kind: str, folder: Path, where: Path, name: str) -> Path:
    """A copy of the model folder `folder` under `where`, stored as `kind` says; returns the folder a tool is given."""
    if kind == "hub-cache-snapshot":
        hub = where / "HF_HOME" / "hub"
        commit = place_in_hf_cache(folder, hub, f"org/{name}")
        return hub / f"models--org--{name}" / "snapshots" / commit
    if kind == "links-into-another-folder":
        owned = copy(folder, where / "elsewhere" / name)
        links = where / name
        links.mkdir(parents=True)
        for path in sorted(owned.iterdir()):
            (links / path.name).symlink_to(path)
        return links
    assert kind == "read-only"
    read_only = copy(folder, where / name)
    _read_only(read_only)
    return read_only


def stored_run(kind: str, run: Path, where: Path) -> Path:
    """A run folder whose checkpoint-2 and checkpoint-4 are stored as `kind` says (a Hub-cache snapshot is linked
    into the run folder under the checkpoint's name)."""
    folder = where / "run"
    for name in ("checkpoint-2", "checkpoint-4"):
        model = stored(kind, run / name, folder, name)
        if model != folder / name:
            (folder / name).symlink_to(model, target_is_directory=True)
    return folder


def _registry_readers() -> dict[str, object]:
    """{tool: its `Cases.run`} for every tool whose command line names the model folder or the run's checkpoints."""
    readers = {}
    for tool, case in every_tool().items():
        argv = [str(x) for x in case.run(_stand_ins(), Path("/<out>"))]
        if any(x.startswith((str(MODEL), str(RUN))) for x in argv):
            readers[tool] = case.run
    return readers


def _stand_ins():
    from cli_contract import Assets

    fields = {f.name: Path(f"/<{f.name}>") for f in dataclasses.fields(Assets) if f.name != "translations"}
    return Assets(**{**fields, "model": MODEL, "run": RUN})


def _evaluate_with_model(a, t):
    return ["--model", a.model, "--source", a.plain, "--references", a.plain, "--out", t / "scores.json",
            "--num_beams", "1", "--device", "cpu"]  # fmt: skip


READERS = {**_registry_readers(), "evaluate --model": _evaluate_with_model}


def test_the_model_readers_are_every_tool_that_reads_a_model():
    assert sorted(READERS) == sorted(
        [
            "translate",
            "evaluate --model",
            "average_checkpoints",
            "export_marian",
            "export_ctranslate2",
            "visualize_attention",
            "push_to_hub",
        ]
    )


def _outputs(out: Path, model: Path, run: Path) -> dict[str, bytes]:
    """{file: bytes} of everything a tool wrote, with the paths of its inputs and output replaced by their roles (a
    score file records the model folder it scored)."""
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for where, role in ((out, b"<out>"), (model, b"<model>"), (run, b"<run>")):
            data = data.replace(str(where).encode(), role)
        files[str(path.relative_to(out))] = data
    return files


def _run(tool: str, argv, capfd) -> str:
    capfd.readouterr()
    code, warned = run_main(tool.split()[0], argv)
    out, err = capfd.readouterr()
    assert code == 0 and not warned, f"exit status {code}\n{err[-3000:]}{warned}"
    return out


def _masked(stdout: str, model: Path, run: Path, out: Path) -> str:
    """Standard output with the paths of the case's inputs and output replaced by their roles."""
    for path, role in ((out, "<out>"), (model, "<model>"), (run, "<run>")):
        stdout = stdout.replace(str(path), role)
    return stdout


@pytest.fixture(scope="module")
def plain_outputs():
    """{tool: (stdout, {file: bytes})} of each reader run on the folders as written, filled by the first case."""
    return {}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tool", sorted(READERS))
def test_every_tool_reads_a_model_folder_however_it_is_stored(
    tool, kind, tmp_path, assets, capfd, monkeypatch, plain_outputs
):
    monkeypatch.chdir(tmp_path)
    if tool not in plain_outputs:
        out = tmp_path / "plain-out"
        out.mkdir()
        stdout = _run(tool, READERS[tool](assets, out), capfd)
        plain_outputs[tool] = (_masked(stdout, assets.model, assets.run, out), _outputs(out, assets.model, assets.run))
    where = tmp_path / "stored"
    model, run = stored(kind, assets.model, where, "model"), stored_run(kind, assets.run, where)
    before = snapshot(where, assets.root)
    out = tmp_path / "out"
    out.mkdir()
    try:
        stdout = _run(tool, READERS[tool](dataclasses.replace(assets, model=model, run=run), out), capfd)
    finally:
        after = snapshot(where, assets.root)
        _writable_again(where)
    assert not changes(before, after), sorted(changes(before, after))
    assert (_masked(stdout, model, run, out), _outputs(out, model, run)) == plain_outputs[tool]


@pytest.mark.parametrize("kind", KINDS)
def test_the_spaces_page_loads_a_model_folder_however_it_is_stored(kind, tmp_path, assets):
    """What `vaswani-space --model FOLDER` does before serving: the cheap check, then the model, its card's facts and
    a translation, the same as from the folder as written."""
    from vaswani_hf.io import check_model_folder
    from vaswani_hf.space import logic as space_logic

    model = stored(kind, assets.model, tmp_path, "model")
    try:
        check_model_folder(str(model))
        page, plain = space_logic.load_space_model(str(model)), space_logic.load_space_model(str(assets.model))
    finally:
        _writable_again(tmp_path)
    assert page.facts == plain.facts and page.known == plain.known
    text = page.tokenizer.decode(page.model.generate(**page.tokenizer([LINES[0]], return_tensors="pt"))[0])
    assert text == plain.tokenizer.decode(plain.model.generate(**plain.tokenizer([LINES[0]], return_tensors="pt"))[0])


def test_a_hub_id_of_the_offline_cache_is_read_by_the_tools_that_take_one(tmp_path, assets):
    """HF_HUB_OFFLINE=1 with HF_HOME at a cache holding org/model (huggingface_hub reads both when it is imported, so
    in a process of their own): `vaswani-evaluate --model org/model` loads it from the cache, as `from_pretrained`
    does, and scores what the folder as written scores; `vaswani-translate --model org/model` translates with it, and `vaswani-export-marian --model_dir org/model`
    reads its files from the cache's snapshot."""
    stored("hub-cache-snapshot", assets.model, tmp_path, "model")
    env = dict(os.environ, HF_HOME=str(tmp_path / "HF_HOME"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    scores = {}
    for name, model in (("by-id", "org/model"), ("plain", assets.model)):
        argv = _evaluate_with_model(dataclasses.replace(assets, model=model), tmp_path / name)
        (tmp_path / name).mkdir()
        proc = subprocess.run(
            [sys.executable, "-m", "vaswani_commands", "evaluate", *map(str, argv)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        scores[name] = json.loads((tmp_path / name / "scores.json").read_text(encoding="utf-8"))
    assert scores["by-id"]["meta"].pop("model") == "org/model"
    assert scores["plain"]["meta"].pop("model") == str(assets.model)
    assert scores["by-id"] == scores["plain"]
    # translate takes a Hub id too (its --model is a model folder or a Hub id, as for from_pretrained).
    proc = subprocess.run(
        [sys.executable, "-m", "vaswani_commands", "translate", str(assets.plain), "--model", "org/model",
         "--output", str(tmp_path / "by-id.txt"), *map(str, TRANSLATE_OPTIONS)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "by-id.txt").read_text(encoding="utf-8").splitlines() == assets.translations
    # A tool that reads the model's files itself (export_marian) reads them from the cache's snapshot.
    proc = subprocess.run(
        [sys.executable, "-m", "vaswani_commands", "export_marian", "--model_dir", "org/model",
         "--out", str(tmp_path / "marian")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and (tmp_path / "marian" / "config.json").is_file(), proc.stderr[-3000:]
    proc = subprocess.run(
        [sys.executable, "-m", "vaswani_commands", "export_marian", "--model_dir", "org/absent",
         "--out", str(tmp_path / "absent")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "vaswani-export-marian: error: --model_dir not found: org/absent is no folder here, and not in the Hub's "
        "cache, and HF_HUB_OFFLINE is set"
    ]


FOLDER_WRITERS = {  # a model reader whose output is a folder it creates as a whole, and the flag naming it
    "export_marian": "--out",
    "export_ctranslate2": "--out_dir",
    "visualize_attention": "--out",
}


@pytest.mark.parametrize("tool", sorted(FOLDER_WRITERS))
def test_an_output_folder_that_is_a_symbolic_link_is_still_refused(tool, tmp_path, assets, capfd, monkeypatch):
    """Reading follows links; writing does not: an output folder given as a symbolic link to an empty folder is
    refused in one line naming the flag, with exit status 2, and nothing is written through the link."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    argv = [str(x) for x in READERS[tool](assets, tmp_path)]
    flag = FOLDER_WRITERS[tool]
    link = Path(argv[argv.index(flag) + 1])
    link.symlink_to(tmp_path / "real", target_is_directory=True)
    capfd.readouterr()
    code, warned = run_main(tool, argv)
    err = capfd.readouterr().err
    assert code == 2 and len(err.splitlines() + warned) == 1, err
    assert f"{flag} {link} is a symbolic link to a folder" in err
    assert os.listdir(tmp_path / "real") == []
