# TEST DOUBLE for the Hugging Face Hub's HTTP API (what huggingface_hub's snapshot_download calls), serving local model directories on 127.0.0.1.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""A loopback stand-in of the Hub for the real huggingface_hub client (HF_ENDPOINT=<url>).

Serves each repository {repo_id: local directory} at one commit (the SHA-1 of its file names and
contents), the endpoints snapshot_download uses in huggingface_hub 1.x and 2.x:
- GET  /api/models/<repo>/revision/<rev>          repo info: sha, siblings
- GET  /api/models/<repo>/tree/<rev>[/<path>]     the file list (recursive), git blob ids and sizes
- HEAD /<repo>/resolve/<rev>/<file>              X-Repo-Commit, ETag (the blob id), Content-Length
- GET  /<repo>/resolve/<rev>/<file>              the file (Range honoured)
A repository listed in ``private`` answers 401 unless the request carries ``Authorization: Bearer
<token>``; an unknown repository or revision answers 404 with the Hub's X-Error-Code header. Every
request is recorded (method, path, authorization header) for the test to inspect.
"""
import hashlib
import http.server
import json
import os
import threading
import urllib.parse


def _blob_id(data):
    """A git blob id, as the Hub's ETag of a regular (non-LFS) file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, path):
        self.files = {}
        for root, _dirs, names in os.walk(path):
            for name in sorted(names):
                full = os.path.join(root, name)
                with open(full, "rb") as handle:
                    self.files[os.path.relpath(full, path).replace(os.sep, "/")] = handle.read()
        digest = hashlib.sha1()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name])
        self.sha = digest.hexdigest()


class HubStandin:
    """HubStandin({repo_id: directory}, token=..., private=(...)); .url, .requests, .close()."""

    def __init__(self, repos, token=None, private=()):
        self.repos = {repo_id: Repo(path) for repo_id, path in repos.items()}
        self.token, self.private, self.requests = token, set(private), []
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                standin.answer(self, head=True)

            def do_GET(self):
                standin.answer(self, head=False)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    # -- routing ---------------------------------------------------------------------------------
    def answer(self, req, head):
        url = urllib.parse.urlsplit(req.path)
        path = urllib.parse.unquote(url.path)
        self.requests.append((req.command, path, req.headers.get("Authorization")))
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            for kind in ("/revision/", "/tree/"):
                if kind in rest:
                    repo_id, tail = rest.split(kind, 1)
                    rev = tail.split("/", 1)[0]
                    repo = self.lookup(req, repo_id, rev)
                    if repo is None:
                        return None
                    if kind == "/revision/":
                        return self.send_json(req, head, {
                            "id": repo_id, "modelId": repo_id, "sha": repo.sha, "private": repo_id in self.private,
                            "siblings": [{"rfilename": name} for name in sorted(repo.files)]})
                    prefix = tail.split("/", 1)[1] + "/" if "/" in tail else ""
                    return self.send_json(req, head, [
                        {"type": "file", "oid": _blob_id(data), "size": len(data), "path": name}
                        for name, data in sorted(repo.files.items()) if name.startswith(prefix)])
            return self.error(req, 404, "EntryNotFound", "no such API path")
        if "/resolve/" in path:
            repo_id, tail = path.lstrip("/").split("/resolve/", 1)
            rev, _sep, name = tail.partition("/")
            repo = self.lookup(req, repo_id, rev)
            if repo is None:
                return None
            if name not in repo.files:
                return self.error(req, 404, "EntryNotFound", "%s not in %s" % (name, repo_id))
            data = repo.files[name]
            headers = {"X-Repo-Commit": repo.sha, "ETag": '"%s"' % _blob_id(data), "Accept-Ranges": "bytes"}
            status, body = 200, data
            ranged = req.headers.get("Range", "")
            if ranged.startswith("bytes=") and not head:
                start = int(ranged[len("bytes="):].split("-", 1)[0] or 0)
                status, body = 206, data[start:]
                headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
            return self.send(req, head, status, body, "application/octet-stream", headers)
        return self.error(req, 404, "RepoNotFound", "no such path")

    def lookup(self, req, repo_id, rev):
        repo = self.repos.get(repo_id)
        if repo is None:
            self.error(req, 404, "RepoNotFound", "Repository Not Found for url: %s" % req.path)
            return None
        if repo_id in self.private and req.headers.get("Authorization") != "Bearer %s" % self.token:
            self.error(req, 401, "GatedRepo", "Access to model %s is restricted" % repo_id)
            return None
        if rev not in ("main", repo.sha):
            self.error(req, 404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            return None
        return repo

    # -- answers ---------------------------------------------------------------------------------
    def error(self, req, status, code, message):
        self.send(req, False, status, json.dumps({"error": message}).encode(), "application/json",
                  {"X-Error-Code": code, "X-Error-Message": message})

    def send_json(self, req, head, document):
        self.send(req, head, 200, json.dumps(document).encode(), "application/json", {})

    @staticmethod
    def send(req, head, status, body, content_type, headers):
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            req.send_header(key, value)
        req.end_headers()
        if not head:
            req.wfile.write(body)
