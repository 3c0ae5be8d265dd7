"""A TEST DOUBLE of the Hugging Face Hub: just the HTTP endpoints that `huggingface_hub`'s client (2.x) calls for
`create_repo` + `create_commit` (regular and legacy-LFS uploads) and for `hf_hub_download` / `from_pretrained`.

It is NOT the Hub and proves nothing about it: no real auth or permissions (one fixed token), no gated repos, no Xet
storage (run the client with HF_HUB_DISABLE_XET=1 so that LFS files take the legacy LFS "basic" transfer), no CDN
redirects, no server-side YAML validation beyond parsing, no git. It keeps everything in memory and serves on
127.0.0.1 only. Built from reading the installed client (`hf_api.py`, `_commit_api.py`, `lfs.py`,
`file_download.py`, `utils/_http.py`), so it follows what that client sends and expects:

    GET  /api/whoami-v2                                  token check
    POST /api/repos/create                               model or Space (sdk checked); 409 if it exists (the
                                                         client's exist_ok handles it)
    POST /api/validate-yaml                              README.md metadata, parsed with huggingface_hub.ModelCard
    POST /api/models/{repo}/preupload/{rev}              uploadMode "lfs" | "regular" per file, remote oid
    POST /{repo}.git/info/lfs/objects/batch              LFS batch API, "basic" transfer to PUT /_lfs/{oid}
    PUT  /_lfs/{oid}, POST /_lfs/verify                  object storage (sha256 checked)
    POST /api/models/{repo}/commit/{rev}                 NDJSON: header, file (base64), lfsFile, deletedFile/Folder
    POST /api/spaces/{repo}/preupload|commit/{rev},      the same for a Space (`create_repo(repo_type="space")`),
         /spaces/{repo}.git/info/lfs/objects/batch,      stored as the repository "spaces/{id}"
    GET  /api/spaces/{repo}[/revision/{rev}]
    POST /api/models/{repo}/branch/{branch}              create a branch from main
    GET  /api/models/{repo}[/revision/{rev}]             model info (sha, siblings)
    GET  /api/models/{repo}/tree/{rev}[/{path}]          file listing
    POST /api/models/{repo}/paths-info/{rev}             file info
    HEAD|GET /{repo}/resolve/{rev}/{path}                ETag / X-Repo-Commit / Content-Length (+ X-Linked-Etag,
                                                         X-Linked-Size for LFS files), X-Error-Code on 404s

Every request is recorded in `server.requests`; requests the double does not implement get a 404 and are listed in
`server.unhandled`. After `max_requests` requests everything answers 400 (not retried by the client), so a client
stuck in a loop cannot spin forever: `server.budget_exhausted` tells the test.

Three modules, one job each: hub_store.py holds the state (repositories, commits, blobs, LFS objects, the one user),
hub_endpoints.py answers each endpoint above, and this module is the HTTP plumbing and the server.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from hub_endpoints import HubEndpoints
from hub_store import TEST_TOKEN, FakeHub


class HubRequestHandler(HubEndpoints, BaseHTTPRequestHandler):
    """HTTP/1.1 plumbing: read the body (chunked or not), route the request to its endpoint under the state's lock,
    answer in JSON with the Hub's error headers; the endpoints themselves: hub_endpoints.py."""

    protocol_version = "HTTP/1.1"
    server: FakeHubServer

    # -- plumbing -------------------------------------------------------------------------------------------------

    def log_message(self, format, *args):  # noqa: A002 - keep test output quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict | None = None,
        content_type="application/json",
        head: bool = False,
    ):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _json(self, status: int, payload, headers: dict | None = None, head: bool = False):
        self._send(status, json.dumps(payload).encode(), headers, head=head)

    def _error(
        self, status: int, message: str, code: str | None = None, headers: dict | None = None, head: bool = False
    ):
        extra = dict(headers or {})
        extra["X-Error-Message"] = message
        if code:
            extra["X-Error-Code"] = code
        self._json(status, {"error": message}, extra, head=head)

    def _dispatch(self, method: str):
        url = urlsplit(self.path)
        path = url.path
        query = parse_qs(url.query)
        hub = self.server.hub
        with hub.lock:
            self.server.requests.append((method, path))
            over_budget = len(self.server.requests) > self.server.max_requests
            if over_budget:
                self.server.budget_exhausted = True
        body = self._body() if method in ("POST", "PUT") else b""
        if over_budget:
            return self._error(400, "test double: request budget exhausted")
        for pattern, verb, handler in self.ROUTES:
            match = re.fullmatch(pattern, path)
            if match and verb == method:
                args = [unquote(group) for group in match.groups()]
                with hub.lock:
                    return handler(self, *args, body=body, query=query)
        with hub.lock:
            self.server.unhandled.append((method, self.path))
        return self._error(404, f"test double: no route for {method} {path}")

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")


class FakeHubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, max_requests: int = 2000):
        super().__init__(("127.0.0.1", 0), HubRequestHandler)
        self.hub = FakeHub()
        self.requests: list[tuple[str, str]] = []
        self.unhandled: list[tuple[str, str]] = []
        self.max_requests = max_requests
        self.budget_exhausted = False
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> FakeHubServer:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # conveniences for assertions
    def files(self, repo_id: str, revision: str = "main") -> dict[str, dict]:
        repo = self.hub.repos[repo_id]
        return repo.commits[repo.branches[revision]]["files"]

    def history(self, repo_id: str, revision: str = "main") -> list[str]:
        """Commit summaries from the branch head back to the initial commit."""
        repo = self.hub.repos[repo_id]
        oid, out = repo.branches[revision], []
        while oid is not None:
            out.append(repo.commits[oid]["summary"])
            oid = repo.commits[oid]["parent"]
        return out


if __name__ == "__main__":  # manual use: python tests/hub_server.py, then HF_ENDPOINT=... HF_TOKEN=... in a shell
    with FakeHubServer() as server:
        print(f"test double listening on {server.endpoint} (token {TEST_TOKEN}); Ctrl-C to stop", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
