"""The operating system's conditions while a command writes, for every command that writes: a full disk, Ctrl-C in the
middle of writing, and a standard output closed by its reader. The tables are generated from the registry: every
tool's declared writers (`Cases.writers`) and command lines with a result on standard output (`Cases.stdout`).

- Disk full: the output goes to a small tmpfs (mounted under tmp_path; root only, skipped otherwise) that holds a
  one-page filler and `free` bytes more, so the command starts, writes until the disk is full, and stops: exit status
  1, one error line saying "no space left" and naming the output, no traceback; on the disk nothing but the filler
  (no partial output, no temporary file; a training run keeps its complete files, never a partial checkpoint or a
  staging folder), no file descriptor left open on it, and every input unchanged. Each command runs with no byte
  free and with part of its output's size free.
- Ctrl-C while writing (each writer's last step before its output appears, `Writer.interrupt`, is made to raise
  KeyboardInterrupt): exit status 130, "interrupted", no partial output left (a training run: its complete files
  only), no descriptor left open.
- A closed pipe: the console script in a real process, its standard output read by a reader that closes early (after
  one line of a long output through a one-page pipe, or before anything was written): exit status 1, one line
  "broken pipe", no traceback and no "Exception ignored" from Python's final flush.
- The operating system's limits, for real processes (`scripts/<tool>.py`, the runner vaswani_commands): too little
  memory (RLIMIT_AS 200 MB: torch cannot even be loaded) for every command, a file-size limit (RLIMIT_FSIZE 1 KB: any
  model is larger; Python ignores SIGXFSZ, so the write fails with EFBIG) for the exports and the averaging, and no
  descriptor left while a command loads: exit status 1, one line naming the limit and what to do, no traceback.
- The process's surroundings (closed standard streams, a deleted working folder, malformed launcher variables,
  SIGTERM and SIGHUP), for every command: tests/test_cli_surroundings.py.

Commands that do work before they fail may print their progress or log lines first (a training run logs each step):
then exactly one line is an error line (`<prog>: error: ...`, `<prog>: interrupted` or `<prog>: interrupted by
SIGTERM`), and it is the last.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import (
    PAGE,
    TOOLS,
    Writer,
    changes,
    declared,
    interrupted,
    run_main,
    snapshot,
    stdout_users,
    write,
)
from cli_helpers import REPO

from vaswani_hf.cli.registry import COMMANDS

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

ERROR_LINE = re.compile(r"^\S+: (error: .*|interrupted|interrupted by SIG[A-Z]+)$")


def assert_one_error_line(err: str, code: int, expected_code: int, *fragments: str, shown: str = "") -> str:
    """The exit status, no traceback, exactly one error line, the last one, holding every fragment."""
    shown = f"exit status {code}\n{shown}\nSTDERR:\n{err[-3000:]}"
    assert code == expected_code, shown
    assert "Traceback" not in err and "Exception ignored" not in err, shown
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if ERROR_LINE.match(line) or "Error" in line]
    assert errors == lines[-1:], f"expected one error line, the last one\n{shown}"
    for fragment in fragments:
        assert fragment in lines[-1], f"{fragment!r} not in the error line\n{shown}"
    return lines[-1]


def open_descriptors_under(folder: Path) -> list[str]:
    """This process's open files and folders under `folder` (a failed command must release what it held)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(folder) or target.startswith(str(folder) + os.sep):
            found.append(target)
    return found


# ---------------------------------------------------------------------------------------------------------------------
# A full disk
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """`mount(free)`: a tmpfs under tmp_path holding a one-page filler and `free` bytes (whole pages) more."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def mount(free: int) -> Path:
        disk = tmp_path / "disk"
        disk.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={PAGE + free},mode=0755", "tmpfs", str(disk)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
        mounted.append(disk)
        write(disk / "filler", b"x" * PAGE)
        return disk

    yield mount
    for disk in mounted:
        subprocess.run(["umount", "--lazy", str(disk)], capture_output=True, check=False)


WRITERS = declared("writers")  # each tool's test file
WRITER_CASES = [pytest.param(w, id=w.id, marks=[pytest.mark.slow] if w.tool == "train" else []) for w in WRITERS]
DISK_CASES = [
    pytest.param(
        w, free, id=f"{w.id}-{free // PAGE}-pages-free", marks=[pytest.mark.slow] if w.tool == "train" else []
    )
    for w in WRITERS
    for free in sorted({0, w.part})
]


def partial_output(writer: Writer, root: Path, paths) -> list[str]:
    """Of `paths` (created or changed under `root` by a command that failed or was stopped), what it must not leave:
    anything, or for a training run, which keeps its complete files, a hidden file or folder (temporary, staging)
    or a checkpoint folder without trainer_state.json (partial)."""
    left = []
    for path in sorted(Path(p) for p in paths):
        relative = path.relative_to(root)
        hidden = any(part.startswith(".") and part != ".vaswani_hf.json" for part in relative.parts)
        partial = path.is_dir() and path.name.startswith("checkpoint-") and not (path / "trainer_state.json").is_file()
        if writer.tool != "train" or hidden or partial:
            left.append(str(relative))
    return left


def leftovers(disk: Path, writer: Writer) -> list[str]:
    """What a failed command left on the disk besides the filler (`partial_output`)."""
    return partial_output(writer, disk, [p for p in disk.rglob("*") if p.relative_to(disk) != Path("filler")])


@pytest.mark.parametrize("writer, free", DISK_CASES)
def test_a_full_disk_stops_the_command_cleanly(writer, free, small_disk, assets, tmp_path, capfd, monkeypatch):
    disk = small_disk(free)
    monkeypatch.chdir(tmp_path)
    argv = writer.argv(assets, tmp_path, disk)
    inputs = [assets.root] + ([tmp_path / "in"] if (tmp_path / "in").exists() else [])
    before = snapshot(*inputs)
    capfd.readouterr()
    code, warned = run_main(writer.tool, argv)
    _, err = capfd.readouterr()
    shown = f"{writer.tool} {' '.join(map(str, argv))} ({free} bytes free)"
    line = assert_one_error_line(err + "".join(f"{w}\n" for w in warned), code, 1, "no space left", shown=shown)
    problems = [] if writer.output in line or str(disk) in line else [f"the error line names no output: {line}"]
    problems += [f"left on the full disk: {p}" for p in leftovers(disk, writer)]
    problems += [] if (disk / "filler").read_bytes() == b"x" * PAGE else ["the filler changed"]
    problems += [f"still open after the command: {p}" for p in open_descriptors_under(disk)]
    problems += [f"input changed: {p}" for p in sorted(changes(before, snapshot(*inputs)))]
    assert not problems, "\n".join([shown, *problems])


# ---------------------------------------------------------------------------------------------------------------------
# Ctrl-C while writing
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("writer", WRITER_CASES)
def test_ctrl_c_while_writing_leaves_no_partial_output(writer, assets, tmp_path, capfd, monkeypatch):
    """Every writer (`Cases.writers`), stopped at its last step before the output appears (`Writer.interrupt`)."""
    monkeypatch.chdir(tmp_path)
    argv = writer.argv(assets, tmp_path, tmp_path)
    monkeypatch.setattr(writer.interrupt, interrupted)
    before = snapshot(assets.root, tmp_path)
    capfd.readouterr()
    code, warned = run_main(writer.tool, argv)
    _, err = capfd.readouterr()
    assert_one_error_line(err + "".join(f"{w}\n" for w in warned), code, 130, "interrupted", shown=writer.id)
    left = partial_output(writer, tmp_path, changes(before, snapshot(assets.root, tmp_path)))
    assert not left and not open_descriptors_under(tmp_path), (left, open_descriptors_under(tmp_path))


# ---------------------------------------------------------------------------------------------------------------------
# A closed standard output
# ---------------------------------------------------------------------------------------------------------------------


def console_script(tool: str) -> str:
    return str(Path(sys.executable).parent / COMMANDS[tool].prog)


def run_into_closed_pipe(argv: list, lines_read: int, cwd: Path) -> tuple[int, str]:
    """Run a console script with standard output into a one-page pipe whose reader reads `lines_read` lines (0: none)
    and closes it. Returns (exit status, stderr)."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PAGE)
    env = {k: v for k, v in os.environ.items() if k != "VASWANI_DEBUG"}
    process = subprocess.Popen(
        [str(a) for a in argv], stdout=write_end, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=cwd, env=env
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb", buffering=0) as reader:
        for _ in range(lines_read):
            line = b""
            while not line.endswith(b"\n"):
                chunk = reader.read(1)
                if not chunk:
                    break
                line += chunk
    _, err = process.communicate(timeout=300)
    return process.returncode, err.decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.parametrize("tool", list(stdout_users()))
def test_a_closed_standard_output_is_one_line(tool, assets, tmp_path):
    """Every command line with a result on standard output (`Cases.stdout`), its reader closing the pipe after
    `read_lines` lines."""
    use = stdout_users()[tool]
    argv = [console_script(tool), *use.argv(assets, tmp_path)]
    before = snapshot(assets.root, tmp_path)
    code, err = run_into_closed_pipe(argv, use.read_lines, tmp_path)
    assert_one_error_line(err, code, 1, "broken pipe", shown=" ".join(map(str, argv)))
    assert len(err.splitlines()) == 1, err
    assert not changes(before, snapshot(assets.root, tmp_path))


# ---------------------------------------------------------------------------------------------------------------------
# The operating system's limits
# ---------------------------------------------------------------------------------------------------------------------


def run_limited(argv: list, limit: int, value: int, cwd: Path, debug: bool = False) -> tuple[int, str]:
    """`python ARGV` in a fresh process with the resource limit `limit` set to `value`. Returns (status, stderr)."""
    import resource

    env = {**{k: v for k, v in os.environ.items() if k != "VASWANI_DEBUG"}, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, *map(str, argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, **({"VASWANI_DEBUG": "1"} if debug else {})},
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(limit, (value, value)),
    )
    return result.returncode, result.stderr


def script(tool: str) -> Path:
    return REPO / "scripts" / f"{'evaluate_translations' if tool == 'evaluate' else tool}.py"


@pytest.mark.parametrize("tool", TOOLS)
def test_too_little_memory_is_one_line(tool, assets, tmp_path):
    """Under a memory limit the import of torch fails (a MemoryError, or the system refusing to map its library)."""
    import resource

    from test_cli_surroundings import RUNS

    argv = [script(tool), *RUNS[tool](assets, tmp_path)]
    code, err = run_limited(argv, resource.RLIMIT_AS, 200 * 2**20, tmp_path)
    assert_one_error_line(err, code, 1, "error: out of memory", "ulimit -v")
    assert len(err.splitlines()) == 1 and not list(tmp_path.iterdir()), err
    code, err = run_limited(argv, resource.RLIMIT_AS, 200 * 2**20, tmp_path, debug=True)
    assert code == 1 and "Traceback" in err


@pytest.mark.parametrize("tool", ["export_marian", "export_ctranslate2", "average_checkpoints"])
def test_a_file_size_limit_is_one_line(tool, assets, tmp_path):
    import resource

    from test_cli_surroundings import RUNS

    before = snapshot(assets.root)
    code, err = run_limited([script(tool), *RUNS[tool](assets, tmp_path)], resource.RLIMIT_FSIZE, 1024, tmp_path)
    assert_one_error_line(err, code, 1, "file too large for the file-size limit (ulimit -f)")
    assert not list(tmp_path.iterdir()) and not changes(before, snapshot(assets.root))


NO_DESCRIPTOR_LEFT = """import os, sys
from vaswani_commands import run
while True:  # every descriptor taken: the command's modules cannot be opened
    try:
        os.open(os.devnull, os.O_RDONLY)
    except OSError:
        break
sys.argv = ["vaswani-evaluate", *sys.argv[1:]]
sys.exit(run("evaluate"))
"""


def test_no_descriptor_left_is_one_line(assets, tmp_path):
    import resource

    argv = ["-c", NO_DESCRIPTOR_LEFT, "--hypotheses", assets.plain, "--references", assets.plain]
    code, err = run_limited(argv, resource.RLIMIT_NOFILE, 64, tmp_path)
    assert_one_error_line(err, code, 1, "vaswani-evaluate: error: too many open files", "ulimit -n")


# ---------------------------------------------------------------------------------------------------------------------
# A home folder whose caches cannot be written
# ---------------------------------------------------------------------------------------------------------------------

CACHE_VARIABLES = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE",
                   "HF_TOKEN_PATH", "TORCH_HOME", "TRITON_HOME", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "SACREBLEU")  # fmt: skip


def run_with_home(argv: list, home: Path, tmp: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`python ARGV` in a fresh process whose HOME is `home`, with no cache variable set (every cache where the
    libraries put it by default, below HOME) and its own temporary folder `tmp` (TMPDIR)."""
    env = {k: v for k, v in os.environ.items() if k not in (*CACHE_VARIABLES, "VASWANI_DEBUG")}
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    tmp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, *map(str, argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
@pytest.mark.parametrize("tool", TOOLS)
def test_a_home_whose_caches_cannot_be_written_moves_them_to_a_temporary_folder(tool, assets, tmp_path):
    """HOME is a file, so that no folder below it can be made: ~/.cache, ~/.config, ~/.triton and ~/.sacrebleu cannot
    be written, for the superuser too (a read-only HOME would bind only other users: root writes through permissions,
    and a read-only bind mount needs privileges the tests do not take). The command runs to the end (exit status 0),
    with its caches in this user's folder below the temporary folder, said in one line; no library complains about
    its cache (no other line names the home folder, none is a warning)."""
    from test_cli_surroundings import RUNS

    home = write(tmp_path / "home", "a file, not a folder")
    (tmp_path / "work").mkdir()
    result = run_with_home([script(tool), *RUNS[tool](assets, tmp_path / "work")], home, tmp_path / "tmp", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    said = [line for line in lines if "caches in" in line]
    folder = tmp_path / "tmp" / f"vaswani_hf-caches-{os.getuid()}"
    assert said == [
        f"{script(tool).name}: caches in {folder}, since these cannot be written: XDG_CACHE_HOME {home}/.cache, "
        f"TRITON_CACHE_DIR {home}/.triton/cache, MPLCONFIGDIR {home}/.config/matplotlib, SACREBLEU {home}/.sacrebleu"
    ], result.stderr[-3000:]
    others = [line for line in lines if line not in said]
    assert not [line for line in others if str(home) in line or "warn" in line.lower()], result.stderr[-3000:]
    assert folder.is_dir() and not stat.S_IMODE(folder.stat().st_mode) & 0o077


def test_caches_that_can_be_written_stay_where_they_are_and_nothing_is_said(assets, tmp_path):
    """A home folder that can be written: no cache is moved, and no line is added."""
    (tmp_path / "home").mkdir()
    result = run_with_home([script("evaluate"), "--hypotheses", assets.plain, "--references", assets.plain],
                           tmp_path / "home", tmp_path / "tmp", tmp_path)  # fmt: skip
    assert result.returncode == 0 and "caches in" not in result.stderr, result.stderr[-3000:]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_unwritable_hf_home_keeps_its_hub_cache_and_token_readable(tmp_path, monkeypatch):
    """HF_HOME that holds downloaded models and the login token but cannot be written (as root, only a read-only file
    system does that, so the check of writability is made to say so): the caches move, yet huggingface_hub still finds
    the models and the token where they are (HF_HUB_CACHE, HF_TOKEN_PATH), so that offline loading and pushing work."""
    import vaswani_commands

    hf_home = tmp_path / "hf"
    (hf_home / "hub").mkdir(parents=True)
    write(hf_home / "token", "hf_x")
    (tmp_path / "home").mkdir()
    monkeypatch.setattr(vaswani_commands, "writable", lambda folder: hf_home not in (folder, *folder.parents))
    monkeypatch.setattr(vaswani_commands, "private_folder", lambda: tmp_path / "tmp")
    env = {"HOME": str(tmp_path / "home"), "HF_HOME": str(hf_home)}
    line = vaswani_commands.move_unwritable_caches(env)
    assert line == f"caches in {tmp_path / 'tmp'}, since these cannot be written: HF_HOME {hf_home}"
    assert env == {
        "HOME": str(tmp_path / "home"),
        "HF_HOME": str(tmp_path / "tmp" / "hf_home"),
        "HF_HUB_CACHE": str(hf_home / "hub"),
        "HF_TOKEN_PATH": str(hf_home / "token"),
    }
