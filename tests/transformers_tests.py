"""transformers' own common model tests, obtained for the installed transformers version.

Every model inside transformers passes the same mixins: `ModelTesterMixin` (tests/test_modeling_common.py),
`GenerationTesterMixin` (tests/generation/test_utils.py) and `ConfigTester` (tests/test_configuration_common.py).
They are not part of the transformers wheel, and they are not copied into this repository: the source distribution
of the installed version on the package index holds tests/, so this module downloads it once with pip (`pip
download --no-binary :all:`, through the user's own pip configuration: index, proxy, certificates) into a cache
outside the repository, `$VASWANI_TEST_CACHE/transformers-tests/<version>` (default
`~/.cache/vaswani_hf/transformers-tests/<version>`), and imports it from there as the package
`transformers_common_tests`.

Parallel workers (pytest-xdist) share one download: a file lock guards it, the tree is extracted into a temporary
folder beside the cache entry and renamed into place in one step, so a reader sees a complete tree or none.

The source distribution holds only tests/'s top-level files. Three modules that test_modeling_common.py and
test_configuration_common.py import are missing from it: tests/exporters/test_export.py (`ExportTesterMixin`),
tests/generation/test_utils.py (`GenerationTesterMixin`) and tests/utils/test_configuration_utils.py
(`config_common_kwargs`). They are answered by our stand-ins (transformers_test_standins.py), unless
`VASWANI_TRANSFORMERS_TESTS` names a full checkout of transformers' tests of the same version (the repository, or
its tests/ folder): then the real modules run and no stand-in is used.

This module is also a pytest plugin (conftest.py lists it): it keeps pytest's configuration so that the markers the
common tests use (`flash_attn_test`, `torch_compile_test`, ...) can be registered under `--strict-markers`, read
from the files themselves rather than listed here and outdated by the next transformers version.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import transformers
from filelock import FileLock

PACKAGE = "transformers_common_tests"
CHECKOUT_VARIABLE = "VASWANI_TRANSFORMERS_TESTS"
CACHE_VARIABLE = "VASWANI_TEST_CACHE"
# The modules the source distribution lacks, by their name inside transformers' tests/ package.
MISSING_FROM_SDIST = ("exporters.test_export", "generation.test_utils", "utils.test_configuration_utils")
_pytest_config = None


class CommonTestsUnavailable(RuntimeError):
    """transformers' test files could not be obtained (no network, no cache, a version without a source
    distribution); the message says what to do."""


def pytest_configure(config):
    global _pytest_config
    _pytest_config = config


def in_ci() -> bool:
    """Whether this run is CI (`CI=true`, set by .ci/run and by every CI service): there a missing download is a
    failure, never a skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def cache_root() -> Path:
    base = os.environ.get(CACHE_VARIABLE)
    if base:
        return Path(base).expanduser() / "transformers-tests"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "vaswani_hf" / "transformers-tests"


def checkout_tests_dir() -> Path | None:
    """The tests/ folder of the checkout named by VASWANI_TRANSFORMERS_TESTS, or None when the variable is unset."""
    named = os.environ.get(CHECKOUT_VARIABLE)
    if not named:
        return None
    root = Path(named).expanduser()
    for candidate in (root / "tests", root):
        if all((candidate / name).is_file() for name in ("test_modeling_common.py", "generation/test_utils.py")):
            _check_checkout_version(candidate.parent / "src" / "transformers" / "__init__.py")
            return candidate
    raise CommonTestsUnavailable(
        f"{CHECKOUT_VARIABLE}={named} holds no tests/test_modeling_common.py and tests/generation/test_utils.py: "
        "name a checkout of transformers (or its tests/ folder) at the installed version "
        f"{transformers.__version__}."
    )


def _check_checkout_version(init: Path) -> None:
    """A checkout's tests run only against the transformers version they were written for (as its
    src/transformers/__init__.py says; a lone tests/ folder cannot tell)."""
    if not init.is_file():
        return
    found = re.search(r'^__version__ = "([^"]+)"', init.read_text(encoding="utf-8"), re.MULTILINE)
    if found and found.group(1) != transformers.__version__:
        raise CommonTestsUnavailable(
            f"{CHECKOUT_VARIABLE} names a checkout of transformers {found.group(1)}, but {transformers.__version__} "
            "is installed: check out the installed version's tag (or install the checkout)"
        )


def _safe_members(archive: tarfile.TarFile, prefix: str):
    """The regular files and folders of `archive` under `prefix`, refusing any name that would leave the target
    folder (an absolute path, '..') and skipping links and devices: the archive is downloaded, so not trusted."""
    for member in archive.getmembers():
        name = member.name
        if not name.startswith(prefix) or not (member.isfile() or member.isdir()):
            continue
        parts = Path(name).parts
        if name.startswith("/") or ".." in parts:
            raise CommonTestsUnavailable(
                f"the transformers source archive holds an unsafe path {name!r}; not extracted"
            )
        yield member


def _download_sdist(version: str, into: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--retries",
        "2",
        "--timeout",
        "30",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(into),
        f"transformers=={version}",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    archives = sorted(into.glob("transformers-*.tar.gz"))
    if done.returncode != 0 or not archives:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CommonTestsUnavailable(
            f"could not download transformers {version}'s source distribution from the package index "
            f"({said[-1] if said else f'pip exited with {done.returncode}'}): connect to the index once (the "
            f"download is kept in {cache_root()}), or set {CHECKOUT_VARIABLE} to a checkout of transformers' tests "
            "at that version."
        )
    return archives[0]


def _extract_tests(archive_path: Path, version: str, target: Path) -> None:
    prefix = f"transformers-{version}/tests/"
    with tarfile.open(archive_path) as archive:
        members = list(_safe_members(archive, prefix))
        for member in members:
            member.name = member.name[len(prefix) :] or "."
        members = [m for m in members if m.name != "."]
        # Python's "data" filter (3.10.12 / 3.11.4 on) checks each member again; the members are checked above
        safety = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(target, members=members, **safety)
    if not (target / "test_modeling_common.py").is_file():
        raise CommonTestsUnavailable(
            f"{archive_path.name} holds no tests/test_modeling_common.py; cannot run the tests"
        )
    # The tree is imported as a package (its modules import each other relatively) and
    # test_configuration_common.py imports its own folder's __init__.py: an empty one, as in transformers' repository.
    for folder in [target, *(p for p in target.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()


def sdist_tests_dir() -> Path:
    """tests/ of the installed transformers version's source distribution: from the cache, or downloaded into it
    once (under a lock; extracted beside the entry and renamed into place)."""
    version = transformers.__version__
    entry = cache_root() / version
    tests_dir = entry / "tests"
    if (tests_dir / "test_modeling_common.py").is_file():
        return tests_dir
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry) + ".lock", timeout=900):
        if (tests_dir / "test_modeling_common.py").is_file():  # another worker finished while this one waited
            return tests_dir
        scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=entry.parent))
        try:
            archive = _download_sdist(version, scratch / "download")
            _extract_tests(archive, version, scratch / "entry" / "tests")
            (scratch / "entry" / "SOURCE").write_text(f"{archive.name} from the package index, by pip\n")
            os.replace(scratch / "entry", entry)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return tests_dir


def _register_markers(tests_dir: Path) -> None:
    """Registers every pytest marker the common test files use (a checkout's generation and export tests too), so
    that `--strict-markers` accepts them."""
    if _pytest_config is None:
        return
    names = set()
    modules = [tests_dir / (dotted.replace(".", "/") + ".py") for dotted in MISSING_FROM_SDIST]
    for path in [*tests_dir.glob("test_*common*.py"), *(m for m in modules if m.is_file())]:
        names.update(re.findall(r"\bmark\.([A-Za-z_][A-Za-z0-9_]*)", path.read_text(encoding="utf-8")))
    for name in sorted(names - {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}):
        _pytest_config.addinivalue_line("markers", f"{name}: a marker of transformers' own common tests")


def _import_package(tests_dir: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        PACKAGE, tests_dir / "__init__.py", submodule_search_locations=[str(tests_dir)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return package


def _install_standins(tests_dir: Path) -> list[str]:
    """Our stand-ins under the names of the modules `tests_dir` lacks (see the module docstring); the names used."""
    import transformers_test_standins as standins

    used = []
    for dotted in MISSING_FROM_SDIST:
        if (tests_dir / (dotted.replace(".", "/") + ".py")).is_file():
            continue  # a later source distribution, or a checkout, that holds the real module
        folder, _ = dotted.split(".")
        if f"{PACKAGE}.{folder}" not in sys.modules and not (tests_dir / folder).is_dir():
            subpackage = types.ModuleType(f"{PACKAGE}.{folder}")
            subpackage.__path__ = []
            sys.modules[f"{PACKAGE}.{folder}"] = subpackage
        sys.modules[f"{PACKAGE}.{dotted}"] = standins
        used.append(dotted)
    return used


def load_common_tests() -> dict:
    """{"modeling": test_modeling_common, "configuration": test_configuration_common, "generation": the module of
    GenerationTesterMixin, "standins": the modules answered by our stand-ins, "source": the tests folder}.
    CommonTestsUnavailable when the files cannot be obtained."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE].loaded
    tests_dir = checkout_tests_dir() or sdist_tests_dir()
    _register_markers(tests_dir)
    package = _import_package(tests_dir)
    standins = _install_standins(tests_dir)
    package.loaded = {
        "modeling": importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        "configuration": importlib.import_module(f"{PACKAGE}.test_configuration_common"),
        "generation": importlib.import_module(f"{PACKAGE}.generation.test_utils"),
        "standins": standins,
        "source": str(tests_dir),
    }
    return package.loaded
