"""The endpoints of the loopback Hub TEST DOUBLE (tests/hub_server.py): what each request that `huggingface_hub`'s
client sends for an upload or a download gets as an answer, on the state of hub_store.py. `ROUTES` maps each
(path pattern, method) to its endpoint.

`HubEndpoints` is a mixin of the server's request handler, which provides the plumbing the endpoints answer with
(`_send`, `_json`, `_error`), and `server` (`server.hub`: the state; `server.endpoint`: the base URL).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
from urllib.parse import parse_qs

from hub_store import LFS_PATTERNS, LFS_SIZE_THRESHOLD, TEST_ORGS, TEST_TOKEN, TEST_USER, Repo, git_blob_sha1

SPACE_SDKS = ("gradio", "docker", "static")


def _in_spaces(endpoint):
    """The same endpoint for a Space (`/api/spaces/...`, `/spaces/...`): the double keeps a Space as the repository
    "spaces/{id}"."""

    def space_endpoint(self, repo_id, *args, **kwargs):
        return endpoint(self, f"spaces/{repo_id}", *args, **kwargs)

    return space_endpoint


class HubEndpoints:
    # -- helpers ----------------------------------------------------------------------------------------------------

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {TEST_TOKEN}"

    def _base(self) -> str:
        return self.server.endpoint

    def _repo(self, repo_id: str, write: bool = False, head: bool = False) -> Repo | None:
        hub = self.server.hub
        repo = hub.repos.get(repo_id)
        if write and not self._authorized():
            self._error(401, "Invalid credentials in Authorization header", head=head)
            return None
        if repo is None or (repo.private and not self._authorized()):
            # the Hub answers the same for a missing repo and a private one without access
            self._error(404 if repo is None else 401, "Repository not found", "RepoNotFound", head=head)
            return None
        return repo

    def _resolve(self, repo: Repo, revision: str, head: bool = False) -> str | None:
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.commits:
            return revision
        self._error(404, "Invalid rev id", "RevisionNotFound", head=head)
        return None

    def _files_at(self, repo_id: str, revision: str, write: bool = False):
        """(repository, commit id) of `revision`, or None after answering the error the Hub gives."""
        repo = self._repo(repo_id, write=write)
        if repo is None:
            return None
        commit = self._resolve(repo, revision)
        return None if commit is None else (repo, commit)

    def _tree_entry(self, path: str, entry: dict) -> dict:
        item = {"type": "file", "path": path, "oid": entry["oid"], "size": entry["size"]}
        if entry["lfs"]:
            item["lfs"] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": 134}
        return item

    # -- API --------------------------------------------------------------------------------------------------------

    def whoami(self, body, query):
        if not self._authorized():
            return self._error(401, "Invalid credentials in Authorization header")
        return self._json(
            200,
            {
                "type": "user",
                "name": TEST_USER,
                "fullname": "Test User",
                "orgs": [{"type": "org", "name": name} for name in TEST_ORGS],
                "auth": {"type": "access_token", "accessToken": {"displayName": "test-double", "role": "write"}},
            },
        )

    def create_repo(self, body, query):
        if not self._authorized():
            return self._error(401, "Invalid credentials in Authorization header")
        payload = json.loads(body or b"{}")
        kind = payload.get("type", "model")
        if kind not in ("model", "space"):
            return self._error(400, "test double: only model and Space repos")
        if kind == "space" and payload.get("sdk") not in SPACE_SDKS:
            return self._error(400, f"Invalid sdk: {payload.get('sdk')!r}")
        namespace = payload.get("organization") or TEST_USER
        if namespace not in (TEST_USER, *TEST_ORGS):
            return self._error(403, f"You don't have the rights to create a {kind} under the namespace {namespace}")
        repo_id = f"{namespace}/{payload['name']}"
        key = repo_id if kind == "model" else f"spaces/{repo_id}"  # a Space is stored as "spaces/{id}"
        url = f"{self._base()}/{key}"
        if key in self.server.hub.repos:
            return self._json(409, {"error": f"You already created this {kind} repo", "url": url})
        repo = self.server.hub.create_repo(key, private=payload.get("visibility") == "private")
        repo.space_sdk = payload.get("sdk")
        return self._json(200, {"url": url, "name": repo_id, "id": hashlib.sha1(repo_id.encode()).hexdigest()[:24]})

    def validate_yaml(self, body, query):
        from huggingface_hub import ModelCard

        payload = json.loads(body or b"{}")
        try:
            ModelCard(payload.get("content", ""))
        except Exception as error:  # noqa: BLE001
            return self._json(400, {"errors": [{"message": str(error)}], "warnings": []})
        return self._json(200, {"errors": [], "warnings": []})

    def preupload(self, repo_id, revision, body, query):
        found = self._files_at(repo_id, revision, write=True)
        if found is None:
            return None
        repo, commit = found
        current = repo.commits[commit]["files"]
        files = []
        for item in json.loads(body)["files"]:
            sample = base64.b64decode(item["sample"])
            lfs = (
                any(fnmatch.fnmatch(item["path"].rsplit("/", 1)[-1], p) for p in LFS_PATTERNS)
                or item["size"] >= LFS_SIZE_THRESHOLD
                or b"\x00" in sample
            )
            existing = current.get(item["path"])
            oid = None
            if existing is not None:
                oid = existing["sha256"] if existing["lfs"] else existing["oid"]
            files.append(
                {"path": item["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
        return self._json(200, {"files": files, "commitOid": commit})

    def lfs_batch(self, repo_id, body, query):
        repo = self._repo(repo_id, write=True)
        if repo is None:
            return None
        payload = json.loads(body)
        if payload.get("operation") != "upload" or "basic" not in payload.get("transfers", ["basic"]):
            return self._error(400, "test double: only LFS upload with the basic transfer")
        objects = []
        for obj in payload["objects"]:
            item = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.server.hub.lfs:
                item["actions"] = {
                    "upload": {"href": f"{self._base()}/_lfs/{obj['oid']}"},
                    "verify": {"href": f"{self._base()}/_lfs/verify"},
                }
            objects.append(item)
        return self._json(
            200, {"transfer": "basic", "objects": objects}, headers={"Content-Type": "application/vnd.git-lfs+json"}
        )

    def lfs_put(self, oid, body, query):
        if hashlib.sha256(body).hexdigest() != oid:
            return self._error(400, "test double: uploaded content does not match its sha256")
        self.server.hub.lfs[oid] = body
        return self._send(200, b"", {"ETag": f'"{hashlib.md5(body).hexdigest()}"'})  # noqa: S324 - S3-like etag

    def lfs_verify(self, body, query):
        payload = json.loads(body)
        stored = self.server.hub.lfs.get(payload["oid"])
        if stored is None or len(stored) != payload["size"]:
            return self._error(404, "test double: LFS object missing or wrong size")
        return self._json(200, {"success": True})

    def commit(self, repo_id, revision, body, query):
        repo = self._repo(repo_id, write=True)
        if repo is None:
            return None
        if query.get("create_pr"):
            return self._error(400, "test double: pull requests are not implemented")
        if revision not in repo.branches:
            return self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            return self._error(400, "test double: commit payload must start with a header line")
        header = lines[0]["value"]
        head = repo.branches[revision]
        if header.get("parentCommit") and not head.startswith(header["parentCommit"]):
            return self._error(412, "A commit has happened since. Please refresh and try again.")
        files = dict(repo.commits[head]["files"])
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            if key == "file":
                data = base64.b64decode(value["content"])
                oid = git_blob_sha1(data)
                self.server.hub.blobs[oid] = data
                files[value["path"]] = {"lfs": False, "oid": oid, "size": len(data)}
            elif key == "lfsFile":
                data = self.server.hub.lfs.get(value["oid"])
                if data is None:
                    return self._error(422, f"test double: LFS object {value['oid']} was not uploaded")
                pointer = (
                    f"version https://git-lfs.github.com/spec/v1\noid sha256:{value['oid']}\nsize {len(data)}\n"
                ).encode()
                files[value["path"]] = {
                    "lfs": True,
                    "sha256": value["oid"],
                    "oid": git_blob_sha1(pointer),
                    "size": len(data),
                }
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    return self._error(404, "A file with this name doesn't exist", "EntryNotFound")
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {p: e for p, e in files.items() if not p.startswith(prefix)}
            else:
                return self._error(400, f"test double: unsupported commit operation {key!r}")
        oid = self.server.hub.new_commit(repo, revision, files, header.get("summary", ""))
        return self._json(
            200,
            {
                "success": True,
                "commitOid": oid,
                "pullRequestUrl": None,
                "commitUrl": f"{self._base()}/{repo_id}/commit/{oid}",
            },
        )

    def create_branch(self, repo_id, branch, body, query):
        repo = self._repo(repo_id, write=True)
        if repo is None:
            return None
        if branch in repo.branches:
            return self._error(409, "Reference already exists")
        start = (json.loads(body or b"{}") or {}).get("startingPoint") or "main"
        commit = self._resolve(repo, start)
        if commit is None:
            return None
        repo.branches[branch] = commit
        return self._json(200, {})

    def model_info(self, repo_id, revision=None, body=None, query=None):
        found = self._files_at(repo_id, revision or "main")
        if found is None:
            return None
        repo, commit = found
        files = repo.commits[commit]["files"]
        return self._json(
            200,
            {
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": commit,
                "private": repo.private,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "createdAt": repo.created_at,
                "lastModified": repo.commits[commit]["date"],
                "siblings": [{"rfilename": p} for p in sorted(files)],
            },
        )

    def model_info_main(self, repo_id, body, query):
        return self.model_info(repo_id, None, body=body, query=query)

    def tree(self, repo_id, revision, subpath="", body=None, query=None):
        found = self._files_at(repo_id, revision)
        if found is None:
            return None
        repo, commit = found
        prefix = subpath.strip("/")
        files = repo.commits[commit]["files"]
        recursive = query and query.get("recursive", ["false"])[0].lower() in ("1", "true")
        entries, folders = [], set()
        for path in sorted(files):
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1 :] if prefix else path
            if "/" in rest and not recursive:
                folders.add((prefix + "/" if prefix else "") + rest.split("/", 1)[0])
                continue
            entries.append(self._tree_entry(path, files[path]))
        if prefix and not entries and not folders:
            return self._error(404, f"{prefix} does not exist on {revision}", "EntryNotFound")
        entries += [{"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)]
        return self._json(200, entries)

    def tree_root(self, repo_id, revision, body, query):
        return self.tree(repo_id, revision, "", body=body, query=query)

    def paths_info(self, repo_id, revision, body, query):
        found = self._files_at(repo_id, revision)
        if found is None:
            return None
        repo, commit = found
        files = repo.commits[commit]["files"]
        raw = body.decode()
        if raw.startswith("{"):
            paths = json.loads(raw).get("paths", [])
        else:
            paths = parse_qs(raw).get("paths", [])
        return self._json(200, [self._tree_entry(p, files[p]) for p in paths if p in files])

    def resolve(self, repo_id, revision, filename, body=None, query=None, head=False):
        repo = self._repo(repo_id, head=head)
        if repo is None:
            return None
        commit = self._resolve(repo, revision, head=head)
        if commit is None:
            return None
        entry = repo.commits[commit]["files"].get(filename)
        if entry is None:
            return self._error(404, "Entry not found", "EntryNotFound", headers={"X-Repo-Commit": commit}, head=head)
        data = self.server.hub.content(entry)
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if entry["lfs"]:
            headers.update(
                {
                    "ETag": f'"{entry["sha256"]}"',
                    "X-Linked-Etag": f'"{entry["sha256"]}"',
                    "X-Linked-Size": str(entry["size"]),
                }
            )
        else:
            headers["ETag"] = f'"{entry["oid"]}"'
        status = 200
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "") or "")
        if match and not head:
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start : end + 1], 206
        return self._send(status, data, headers, content_type="application/octet-stream", head=head)

    def resolve_head(self, repo_id, revision, filename, body, query):
        return self.resolve(repo_id, revision, filename, body=body, query=query, head=True)

    _REPO = r"([^/]+/[^/]+?)"
    ROUTES = [
        (r"/api/whoami-v2", "GET", whoami),
        (r"/api/repos/create", "POST", create_repo),
        (r"/api/validate-yaml", "POST", validate_yaml),
        (rf"/api/models/{_REPO}/preupload/([^/]+)", "POST", preupload),
        (rf"/api/models/{_REPO}/commit/([^/]+)", "POST", commit),
        (rf"/api/models/{_REPO}/branch/([^/]+)", "POST", create_branch),
        (rf"/api/models/{_REPO}/revision/([^/]+)", "GET", model_info),
        (rf"/api/models/{_REPO}/tree/([^/]+)", "GET", tree_root),
        (rf"/api/models/{_REPO}/tree/([^/]+)/(.+)", "GET", tree),
        (rf"/api/models/{_REPO}/paths-info/([^/]+)", "POST", paths_info),
        (rf"/api/models/{_REPO}", "GET", model_info_main),
        (rf"/{_REPO}\.git/info/lfs/objects/batch", "POST", lfs_batch),
        (rf"/api/spaces/{_REPO}/preupload/([^/]+)", "POST", _in_spaces(preupload)),
        (rf"/api/spaces/{_REPO}/commit/([^/]+)", "POST", _in_spaces(commit)),
        (rf"/spaces/{_REPO}\.git/info/lfs/objects/batch", "POST", _in_spaces(lfs_batch)),
        (rf"/api/spaces/{_REPO}/revision/([^/]+)", "GET", _in_spaces(model_info)),
        (rf"/api/spaces/{_REPO}", "GET", _in_spaces(model_info_main)),
        (r"/_lfs/verify", "POST", lfs_verify),
        (r"/_lfs/([0-9a-f]{64})", "PUT", lfs_put),
        (rf"/{_REPO}/resolve/([^/]+)/(.+)", "GET", resolve),
        (rf"/{_REPO}/resolve/([^/]+)/(.+)", "HEAD", resolve_head),
    ]
