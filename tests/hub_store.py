"""The state of the loopback Hub TEST DOUBLE (tests/hub_server.py): its one user and token, its repositories with
their branches and commits, and the content they point at (git blobs for regular files, sha256-addressed objects for
LFS files), all in memory. Which files the double stores with LFS follows the Hub's default .gitattributes.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from datetime import datetime, timezone

TEST_TOKEN = "hf_testdouble_0123456789abcdef"
TEST_USER = "test-user"
TEST_ORGS = ("org",)

# The Hub's default .gitattributes tracks these with LFS; the Hub also makes LFS any file >= 10 MB or binary.
LFS_PATTERNS = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.model",
    "*.pkl",
    "*.npy",
    "*.npz",
    "*.zip",
    "*.gz",
    "*.spm",
)
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
INITIAL_GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS).encode()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class Repo:
    def __init__(self, repo_id: str, private: bool):
        self.repo_id = repo_id
        self.private = private
        self.created_at = _now()
        self.commits: dict[str, dict] = {}  # oid -> {"files": {path: entry}, "parent", "summary", "date"}
        self.branches: dict[str, str] = {}  # name -> commit oid


class FakeHub:
    """State shared by the handler threads; all mutation under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # git sha1 -> content (regular files)
        self.lfs: dict[str, bytes] = {}  # sha256 -> content (LFS objects)
        self._counter = itertools.count()

    def new_commit(self, repo: Repo, branch: str, files: dict, summary: str) -> str:
        parent = repo.branches.get(branch)
        digest = hashlib.sha1(f"{repo.repo_id}|{parent}|{summary}|{next(self._counter)}".encode())
        for path in sorted(files):
            digest.update(f"{path}:{files[path]['oid']}".encode())
        oid = digest.hexdigest()
        repo.commits[oid] = {"files": files, "parent": parent, "summary": summary, "date": _now()}
        repo.branches[branch] = oid
        return oid

    def create_repo(self, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_id, private)
        oid = git_blob_sha1(INITIAL_GITATTRIBUTES)
        self.blobs[oid] = INITIAL_GITATTRIBUTES
        entry = {"lfs": False, "oid": oid, "size": len(INITIAL_GITATTRIBUTES)}
        self.new_commit(repo, "main", {".gitattributes": entry}, "initial commit")
        self.repos[repo_id] = repo
        return repo

    def content(self, entry: dict) -> bytes:
        return self.lfs[entry["sha256"]] if entry["lfs"] else self.blobs[entry["oid"]]
