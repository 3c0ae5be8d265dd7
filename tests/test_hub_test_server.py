"""The loopback Hub test double (tests/hub_server.py, hub_endpoints.py, hub_store.py) answers its endpoints as its
docstring says, asked directly over HTTP: the tests of the upload and download tools rely on it, so it must not
break silently. Repository creation, regular and LFS uploads, downloads (ETag, commit, range), listings, branches,
and the errors the Hub gives (credentials, missing repository, revision or file, a stale parent, a wrong hash)."""

from __future__ import annotations

import base64
import hashlib
import json
from http.client import HTTPConnection
from urllib.parse import urlsplit

import pytest
from hub_server import FakeHubServer
from hub_store import INITIAL_GITATTRIBUTES, TEST_TOKEN, TEST_USER, git_blob_sha1

REPO = f"{TEST_USER}/tiny"
AUTH = {"Authorization": f"Bearer {TEST_TOKEN}"}


class Answer:
    def __init__(self, status: int, headers: dict, body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)


def ask(
    server: FakeHubServer,
    method: str,
    path: str,
    body: bytes | dict | str | None = None,
    headers: dict | None = None,
    token: bool = True,
) -> Answer:
    """One request to the double; a dict body is sent as JSON."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    url = urlsplit(server.endpoint)
    connection = HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers={**(AUTH if token else {}), **(headers or {})})
        response = connection.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def commit(server, repo: str, *operations: dict, parent: str | None = None, revision: str = "main") -> Answer:
    """A commit in the client's NDJSON form: a header line, then one line per operation."""
    header = {"key": "header", "value": {"summary": "a commit", **({"parentCommit": parent} if parent else {})}}
    lines = [json.dumps(line) for line in (header, *operations)]
    return ask(server, "POST", f"/api/models/{repo}/commit/{revision}", "\n".join(lines))


def regular_file(path: str, data: bytes) -> dict:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64"}}


@pytest.fixture
def server():
    with FakeHubServer(max_requests=200) as hub:
        yield hub


@pytest.fixture
def repo(server) -> str:
    assert ask(server, "POST", "/api/repos/create", {"name": "tiny", "type": "model"}).status == 200
    return REPO


def test_whoami_knows_the_one_token(server):
    answer = ask(server, "GET", "/api/whoami-v2")
    assert answer.status == 200 and answer.json()["name"] == TEST_USER
    assert ask(server, "GET", "/api/whoami-v2", token=False).status == 401
    assert ask(server, "GET", "/api/whoami-v2", headers={"Authorization": "Bearer wrong"}).status == 401


def test_a_created_repository_starts_with_the_hubs_gitattributes(server, repo):
    answer = ask(server, "POST", "/api/repos/create", {"name": "tiny", "type": "model"})
    assert answer.status == 409  # the client's exist_ok relies on this
    assert server.history(repo) == ["initial commit"]
    assert list(server.files(repo)) == [".gitattributes"]
    download = ask(server, "GET", f"/{repo}/resolve/main/.gitattributes")
    assert download.status == 200 and download.body == INITIAL_GITATTRIBUTES
    assert download.headers["etag"] == f'"{git_blob_sha1(INITIAL_GITATTRIBUTES)}"'


@pytest.mark.parametrize(
    "payload, status",
    [
        ({"name": "x", "organization": "someone-else"}, 403),
        ({"name": "x", "type": "dataset"}, 400),
        ({"name": "x", "type": "space"}, 400),  # a Space needs a known sdk
    ],
)
def test_repository_creation_refuses_what_the_hub_refuses(server, payload, status):
    assert ask(server, "POST", "/api/repos/create", payload).status == status
    assert ask(server, "POST", "/api/repos/create", {"name": "x"}, token=False).status == 401
    assert server.hub.repos == {}


def test_a_space_is_kept_apart_from_the_models(server):
    assert ask(server, "POST", "/api/repos/create", {"name": "demo", "type": "space", "sdk": "gradio"}).status == 200
    assert f"spaces/{TEST_USER}/demo" in server.hub.repos and f"{TEST_USER}/demo" not in server.hub.repos
    header = {"key": "header", "value": {"summary": "app"}}
    body = "\n".join(json.dumps(line) for line in (header, regular_file("app.py", b"print(1)\n")))
    assert ask(server, "POST", f"/api/spaces/{TEST_USER}/demo/commit/main", body).status == 200
    assert "app.py" in server.files(f"spaces/{TEST_USER}/demo")


def test_preupload_chooses_lfs_as_the_hub_does(server, repo):
    files = [
        {"path": "model.safetensors", "size": 10, "sample": base64.b64encode(b"abc").decode()},
        {"path": "config.json", "size": 10, "sample": base64.b64encode(b"{}").decode()},
        {"path": "blob.dat", "size": 10, "sample": base64.b64encode(b"a\x00b").decode()},
        {"path": ".gitattributes", "size": 10, "sample": base64.b64encode(b"x").decode()},
    ]
    answer = ask(server, "POST", f"/api/models/{repo}/preupload/main", {"files": files})
    modes = {f["path"]: (f["uploadMode"], f["oid"]) for f in answer.json()["files"]}
    assert modes["model.safetensors"] == ("lfs", None) and modes["blob.dat"] == ("lfs", None)
    assert modes["config.json"] == ("regular", None)
    assert modes[".gitattributes"] == ("regular", git_blob_sha1(INITIAL_GITATTRIBUTES))  # the remote oid


def test_a_regular_file_uploads_and_downloads(server, repo):
    data = b'{"a": 1}\n'
    answer = commit(server, repo, regular_file("config.json", data))
    assert answer.status == 200
    oid = answer.json()["commitOid"]
    assert server.history(repo) == ["a commit", "initial commit"]
    download = ask(server, "GET", f"/{repo}/resolve/main/config.json")
    assert (download.status, download.body) == (200, data)
    assert download.headers["x-repo-commit"] == oid and download.headers["etag"] == f'"{git_blob_sha1(data)}"'
    head = ask(server, "HEAD", f"/{repo}/resolve/{oid}/config.json")  # by commit id too
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(len(data))
    part = ask(server, "GET", f"/{repo}/resolve/main/config.json", headers={"Range": "bytes=2-4"})
    assert (part.status, part.body) == (206, data[2:5])
    assert part.headers["content-range"] == f"bytes 2-4/{len(data)}"


def test_an_lfs_file_uploads_through_the_batch_api(server, repo):
    data = b"\x00weights" * 100
    oid = hashlib.sha256(data).hexdigest()
    batch = {"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}]}
    actions = ask(server, "POST", f"/{repo}.git/info/lfs/objects/batch", batch).json()["objects"][0]["actions"]
    upload = urlsplit(actions["upload"]["href"]).path
    assert ask(server, "PUT", upload, data + b"x").status == 400  # content that does not match its sha256
    assert ask(server, "POST", "/_lfs/verify", {"oid": oid, "size": len(data)}).status == 404  # not stored yet
    assert ask(server, "PUT", upload, data).status == 200
    assert ask(server, "POST", urlsplit(actions["verify"]["href"]).path, {"oid": oid, "size": len(data)}).status == 200
    again = ask(server, "POST", f"/{repo}.git/info/lfs/objects/batch", batch).json()["objects"][0]
    assert "actions" not in again  # stored already: nothing to upload
    lfs_file = {"key": "lfsFile", "value": {"path": "model.safetensors", "algo": "sha256", "oid": oid}}
    assert commit(server, repo, lfs_file).status == 200
    download = ask(server, "GET", f"/{repo}/resolve/main/model.safetensors")
    assert download.body == data
    assert download.headers["x-linked-etag"] == f'"{oid}"' and download.headers["x-linked-size"] == str(len(data))
    listing = ask(server, "POST", f"/api/models/{repo}/paths-info/main", {"paths": ["model.safetensors", "absent"]})
    assert [(e["path"], e["lfs"]["oid"]) for e in listing.json()] == [("model.safetensors", oid)]


def test_commits_refuse_what_the_hub_refuses(server, repo):
    first = commit(server, repo, regular_file("a.txt", b"a")).json()["commitOid"]
    commit(server, repo, regular_file("b.txt", b"b"))
    assert commit(server, repo, regular_file("c.txt", b"c"), parent=first).status == 412  # a commit happened since
    missing_lfs = {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "0" * 64}}
    assert commit(server, repo, missing_lfs).status == 422
    gone = commit(server, repo, {"key": "deletedFile", "value": {"path": "absent.txt"}})
    assert gone.status == 404 and gone.headers["x-error-code"] == "EntryNotFound"
    assert commit(server, repo, regular_file("d.txt", b"d"), revision="no-branch").status == 404
    no_header = ask(server, "POST", f"/api/models/{repo}/commit/main", json.dumps(regular_file("e.txt", b"e")))
    assert no_header.status == 400
    before = dict(server.files(repo))
    assert ask(server, "POST", f"/api/models/{repo}/commit/main", "", token=False).status == 401
    assert server.files(repo) == before and not {"c.txt", "d.txt", "e.txt"} & set(before)


def test_files_and_folders_are_deleted_by_commits(server, repo):
    commit(server, repo, regular_file("keep.txt", b"k"), regular_file("sub/a.txt", b"a"), regular_file("sub/b", b"b"))
    assert commit(server, repo, {"key": "deletedFolder", "value": {"path": "sub"}}).status == 200
    assert commit(server, repo, {"key": "deletedFile", "value": {"path": "keep.txt"}}).status == 200
    assert list(server.files(repo)) == [".gitattributes"]


def test_listings_info_and_branches(server, repo):
    commit(server, repo, regular_file("config.json", b"{}"), regular_file("sub/x.txt", b"x"))
    info = ask(server, "GET", f"/api/models/{repo}").json()
    assert info["id"] == repo and info["sha"] == server.hub.repos[repo].branches["main"]
    assert [s["rfilename"] for s in info["siblings"]] == [".gitattributes", "config.json", "sub/x.txt"]
    top = ask(server, "GET", f"/api/models/{repo}/tree/main").json()
    assert [(e["type"], e["path"]) for e in top] == [
        ("file", ".gitattributes"),
        ("file", "config.json"),
        ("directory", "sub"),
    ]
    everything = ask(server, "GET", f"/api/models/{repo}/tree/main?recursive=true").json()
    assert [e["path"] for e in everything] == [".gitattributes", "config.json", "sub/x.txt"]
    assert [e["path"] for e in ask(server, "GET", f"/api/models/{repo}/tree/main/sub").json()] == ["sub/x.txt"]
    assert ask(server, "GET", f"/api/models/{repo}/tree/main/nothing").status == 404

    assert ask(server, "POST", f"/api/models/{repo}/branch/dev", {}).status == 200
    assert ask(server, "POST", f"/api/models/{repo}/branch/dev", {}).status == 409
    commit(server, repo, regular_file("dev-only.txt", b"d"), revision="dev")
    assert "dev-only.txt" in server.files(repo, "dev") and "dev-only.txt" not in server.files(repo)
    at_dev = ask(server, "GET", f"/api/models/{repo}/revision/dev").json()
    assert at_dev["sha"] == server.hub.repos[repo].branches["dev"]


def test_downloads_name_what_is_missing(server, repo):
    for path, code in (
        (f"/{TEST_USER}/absent/resolve/main/config.json", "RepoNotFound"),
        (f"/{repo}/resolve/no-such-rev/config.json", "RevisionNotFound"),
        (f"/{repo}/resolve/main/absent.json", "EntryNotFound"),
    ):
        answer = ask(server, "GET", path)
        assert answer.status == 404 and answer.headers["x-error-code"] == code, path
    head = ask(server, "HEAD", f"/{repo}/resolve/main/absent.json")
    assert head.status == 404 and head.body == b"" and head.headers["x-error-code"] == "EntryNotFound"


def test_a_private_repository_needs_the_token(server):
    assert ask(server, "POST", "/api/repos/create", {"name": "secret", "visibility": "private"}).status == 200
    assert ask(server, "GET", f"/{TEST_USER}/secret/resolve/main/.gitattributes").status == 200
    assert ask(server, "GET", f"/{TEST_USER}/secret/resolve/main/.gitattributes", token=False).status == 401
    assert ask(server, "GET", f"/api/models/{TEST_USER}/secret", token=False).status == 401


def test_requests_are_recorded_and_unknown_routes_listed(server):
    assert ask(server, "GET", "/api/datasets/x/y").status == 404
    assert ask(server, "GET", "/api/whoami-v2").status == 200
    assert server.requests == [("GET", "/api/datasets/x/y"), ("GET", "/api/whoami-v2")]
    assert server.unhandled == [("GET", "/api/datasets/x/y")]


def test_a_client_in_a_loop_exhausts_the_budget():
    with FakeHubServer(max_requests=3) as server:
        statuses = [ask(server, "GET", "/api/whoami-v2").status for _ in range(5)]
    assert statuses == [200, 200, 200, 400, 400] and server.budget_exhausted
