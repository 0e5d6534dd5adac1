# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/dynamo_worker/files/model-stage (the staging of a worker's model before it starts):
local model directories, a Hugging Face download (a stand-in for huggingface_hub; then the real
huggingface_hub against a loopback stand-in of the Hub's HTTP API), the offline cache check, the
token on stdin and kept out of messages, and the size it reports."""
import io
import json
import os
import subprocess
import sys

import pytest

from lib.unit import load_script

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "roles", "dynamo_worker", "files", "model-stage")


def load():
    return load_script(SCRIPT, "model_stage")


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "tiny"
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"x" * 1000)
    return path


class Hub:
    """huggingface_hub's snapshot_download, as the script calls it."""

    def __init__(self, path=None, error=None):
        self.path, self.error, self.calls = path, error, []

    def snapshot_download(self, repo_id, token=None, local_files_only=False):
        self.calls.append((repo_id, token, local_files_only))
        if self.error:
            raise self.error
        return self.path


def test_a_local_model_directory_with_its_size(model_dir):
    code, res = load().stage(str(model_dir))
    assert code == 0 and res == {"model": str(model_dir), "path": str(model_dir), "bytes": 1002}


def test_a_local_path_without_config_json_or_missing(tmp_path):
    mod = load()
    assert mod.stage(str(tmp_path)) == (2, "%s is not a model directory (no config.json)" % tmp_path)
    code, msg = mod.stage(str(tmp_path / "nope"))
    assert code == 2 and msg.startswith("no such directory %s" % (tmp_path / "nope"))


def test_the_size_follows_cache_symlinks_and_counts_a_file_once(tmp_path):
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    (blobs / "b1").write_bytes(b"y" * 4096)
    (snap / "config.json").symlink_to(blobs / "b1")
    (snap / "again.json").symlink_to(blobs / "b1")
    assert load().tree_bytes(str(snap)) == 4096


def test_a_hugging_face_id_is_downloaded_with_the_token(model_dir):
    hub = Hub(path=str(model_dir))
    code, res = load().stage("org/m", token="hf_secret", hub=hub)
    assert code == 0 and res["path"] == str(model_dir) and res["bytes"] == 1002
    assert hub.calls == [("org/m", "hf_secret", False)]


def test_offline_only_looks_in_the_cache_and_says_so():
    hub = Hub(error=OSError("Cannot find the requested files in the disk cache\nmore"))
    code, msg = load().stage("org/m", offline=True, hub=hub)
    assert hub.calls == [("org/m", None, True)]
    assert (code, msg) == (3, "not in the Hugging Face cache (HF_HUB_OFFLINE is set): Cannot find the requested files in the disk cache")


def test_a_failed_download_never_shows_the_token():
    hub = Hub(error=ValueError("401 for url with token hf_secret"))
    code, msg = load().stage("org/gated", token="hf_secret", hub=hub)
    assert code == 1 and "hf_secret" not in msg and "<token>" in msg


def test_main_reads_the_token_from_stdin_and_prints_json(model_dir, monkeypatch):
    mod = load()
    seen = {}

    def fake_stage(model, offline=False, token=None, hub=None):
        seen.update(model=model, offline=offline, token=token)
        return 0, {"model": model, "path": str(model_dir), "bytes": 1}

    monkeypatch.setattr(mod, "stage", fake_stage)
    out = io.StringIO()
    assert mod.main(["org/m", "--token-stdin", "--offline"], stdin=io.StringIO("hf_secret\n"), out=out) == 0
    assert seen == {"model": "org/m", "offline": True, "token": "hf_secret"}
    assert json.loads(out.getvalue())["bytes"] == 1


def test_run_as_a_script_like_the_role_does(model_dir, tmp_path):
    source = open(SCRIPT, encoding="utf-8").read()
    ok = subprocess.run([sys.executable, "-c", source, str(model_dir)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and json.loads(ok.stdout)["path"] == str(model_dir)
    bad = subprocess.run([sys.executable, "-c", source, str(tmp_path / "nope")], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("model-stage: no such directory")


# --- the real huggingface_hub client against a loopback stand-in of the Hub ----------------------
# The script as the role runs it (python -c <source> <model>, HOME and the worker's env such as
# HF_ENDPOINT set, the token on stdin), with the huggingface_hub of this venv (the hosts get theirs
# from the wheelhouse); the Hub is tests/doubles/hf_hub/hf_hub_standin.py on 127.0.0.1.
HUB_STANDIN = os.path.join(REPO, "tests", "doubles", "hf_hub", "hf_hub_standin.py")


@pytest.fixture(name="hub")
def fixture_hub(model_dir):
    pytest.importorskip("huggingface_hub")
    standin = load_script(HUB_STANDIN).HubStandin({"kvshare-test/tiny": str(model_dir), "kvshare-test/gated": str(model_dir)},
                                                  token="hf_" + "s3cret" * 4, private=["kvshare-test/gated"])
    yield standin
    standin.close()


def stage_on_host(hub, home, *args, stdin=""):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_ENDPOINT": hub.url}
    source = open(SCRIPT, encoding="utf-8").read()
    return subprocess.run([sys.executable, "-c", source] + list(args), env=env, input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_hugging_face_id_downloads_into_the_accounts_cache_then_offline_finds_it(hub, tmp_path, model_dir):
    home = tmp_path / "home"
    home.mkdir()
    assert stage_on_host(hub, home, "--offline", "kvshare-test/tiny").returncode == 3, "found before any download"
    got = stage_on_host(hub, home, "kvshare-test/tiny")
    assert got.returncode == 0, got.stderr
    res = json.loads(got.stdout)
    assert res["path"].startswith(str(home / ".cache" / "huggingface" / "hub" / "models--kvshare-test--tiny" / "snapshots"))
    assert res["bytes"] == 1002
    assert open(os.path.join(res["path"], "model.safetensors"), "rb").read() == (model_dir / "model.safetensors").read_bytes()
    assert any(method == "GET" and path.endswith("/resolve/%s/model.safetensors" % os.path.basename(res["path"]))
               for method, path, auth in hub.requests), hub.requests
    asked = len(hub.requests)
    offline = stage_on_host(hub, home, "--offline", "kvshare-test/tiny")
    assert offline.returncode == 0 and json.loads(offline.stdout) == res
    assert len(hub.requests) == asked, "the offline check asked the Hub"


def test_a_gated_model_needs_the_token_from_stdin_and_no_message_shows_it(hub, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    refused = stage_on_host(hub, home, "kvshare-test/gated")
    assert refused.returncode == 1 and "download failed: GatedRepoError" in refused.stderr, refused.stderr
    wrong = stage_on_host(hub, home, "--token-stdin", "kvshare-test/gated", stdin="hf_wrong_token_123\n")
    assert wrong.returncode == 1 and "hf_wrong_token_123" not in wrong.stdout + wrong.stderr
    got = stage_on_host(hub, home, "--token-stdin", "kvshare-test/gated", stdin=hub.token + "\n")
    assert got.returncode == 0, got.stderr
    assert hub.token not in got.stdout + got.stderr
    assert ("GET", "/api/models/kvshare-test/gated/revision/main", "Bearer " + hub.token) in hub.requests


def test_an_unknown_hugging_face_id_fails_naming_it(hub, tmp_path):
    got = stage_on_host(hub, tmp_path, "kvshare-test/missing")
    assert got.returncode == 1
    assert got.stderr.startswith("model-stage: download failed: RepositoryNotFoundError")
    assert "kvshare-test/missing" in got.stderr
