# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Scale-out: a worker and a host added to the inventory; site.yml starts only the new ones."""
import json
import os
import re

import d2lib as D
from lib.sandbox import REPO, SANDBOX_DIR, service_defaults
from lib.sandbox_copy import mocker
from lib.unit import load_script

HUB_STANDIN = os.path.join(REPO, "tests", "doubles", "hf_hub", "hf_hub_standin.py")
HF_MODEL = "kvshare-test/tiny-llama"


def _untouched(before_units, before_ids, inv):
    after_units, after_ids = D.worker_units(inv), inv.wait_all_serving()
    for key, b in before_units.items():
        a = after_units[key]
        assert (a["enter"], a["pid"]) == (b["enter"], b["pid"]), "%s was restarted: %s -> %s" % (key, b, a)
        assert after_ids[key] == before_ids[key], "%s changed instance id" % key
    return after_ids


def _members(host):
    """The etcd cluster's member names, as `host`'s member lists them."""
    return sorted(m.get("name", "") for m in json.loads(D.etcdctl(host, "member list -w json"))["members"])


def _models_not_there_refused(hub, before_units, before_ids):
    """sb3 given a new worker whose model is not there, twice, with only sb3 and the worker role
    run: a local path that does not exist is refused by the validation before any host changes; a
    Hugging Face id the Hub does not have fails the role's staging, before any unit of the worker is
    written. Each failure names the host, the worker and its model as the inventory wrote them;
    every running worker is left alone."""
    config_dir = D.Inv().hostvars["sb3"].get("dynamo_runtime_config_dir") or service_defaults()["dynamo_runtime_config_dir"]
    for worker, model, task in (
            (mocker("mock-e", "2", 3, model="/opt/kvshare/models/not-staged", served_model_name="tiny-absent",
                    endpoint="dyn://dynamo.absent.generate"),
             "/opt/kvshare/models/not-staged", "Check the local model paths"),
            (mocker("mock-e", "2", 3, model="kvshare-test/not-on-the-hub", served_model_name="tiny-absent",
                    endpoint="dyn://dynamo.absent.generate", env={"HF_ENDPOINT": hub.url}),
             "kvshare-test/not-on-the-hub", "Fail naming the workers whose model is not there")):
        D.make_copy(extra_workers={"sb3": [worker]})
        try:
            res, dummy = D.playbook("site.yml", "--limit", "sb3", "--tags", "dynamo_worker", log="scale-out-model-absent")
        finally:
            D.make_copy()
        out = res.stdout
        assert res.returncode != 0, out[-4000:]
        failed = re.findall(r"TASK \[([^\]]+)\] \*+\n(?:(?!TASK \[).*\n)*?fatal: \[sb3\]", out)
        assert failed and failed[-1].endswith(task), "expected %r to fail, failed: %s\n%s" % (task, failed, out[-4000:])
        assert re.search(r'sb3: dynamo_workers\[mock-e\]\.model \\?"%s\\?": \S' % re.escape(model), out), \
            "mock-e's model %s not named:\n%s" % (model, out[-4000:])
        written = D.sh("sb3", "ls %s/workers; systemctl list-units --all --plain --no-legend 'dynamo-worker@mock-e*'"
                       % config_dir)
        assert "mock-e" not in written, "the refused worker's files or unit exist:\n" + written
    assert any(path.startswith("/api/models/kvshare-test/not-on-the-hub") for dummy, path, dummy2 in hub.requests), \
        hub.requests
    _untouched(before_units, before_ids, D.Inv())


def test_scale_out_worker_and_host(stack, record):
    """One site.yml run after two inventory changes an operator makes together: a worker added on an
    existing host (sb3, a third GPU) and a new host (sb4) with one worker that is also a new etcd
    member. The run starts exactly the two new workers and adds the member; every running worker
    keeps its unit (PID, start time) and instance id. (Once, not one run per change: each run is a
    whole site.yml on every host, as the inventory changed, and CI's time is the budget.)
    sb3's new worker names its model by a Hugging Face id: the role stages it before the worker
    starts, downloading it with the host's huggingface_hub into the service account's cache from a
    loopback stand-in of the Hub (HF_ENDPOINT in the worker's env; tests/doubles/hf_hub), and the
    mocker then loads it from that cache. It has an endpoint and model name of its own: workers of
    one endpoint must load the same model.
    Then the way back, as docs/day2.md tells an operator: playbooks/remove_host.yml drains sb4's
    worker and takes its member out of etcd, the host goes, and site.yml on the base inventory
    (here only the etcd client proxies and the workers: that is all the copy's base inventory
    changes) prunes mock-e from sb3. Every other worker keeps serving, unrestarted."""
    inv = D.Inv()
    before_units, before_ids = D.worker_units(inv), inv.wait_all_serving()
    members = _members("sb1")
    hub = load_script(HUB_STANDIN).HubStandin({HF_MODEL: os.path.join(SANDBOX_DIR, "models", "tiny-llama")})
    try:
        hf_worker = mocker("mock-e", "2", 3, model=HF_MODEL, served_model_name="tiny-hf",
                           endpoint="dyn://dynamo.hf.generate", env={"HF_ENDPOINT": hub.url})
        _models_not_there_refused(hub, before_units, before_ids)
        D.make_copy(extra_workers={"sb3": [hf_worker]}, extra_hosts=1, extra_etcd=True)
        inv = D.Inv()
        res, dummy = D.playbook("sandbox/create.yml", "--limit", "sb4", log="scale-out-create-sb4")
        D.must(res, "sandbox/create.yml --limit sb4")
        res, took = D.playbook("site.yml", log="scale-out")
        D.must(res, "site.yml (a worker on sb3 and the host sb4 added)")
        # Staged before the worker started: downloaded from the Hub into the account's cache.
        staged = re.search(r'"%s: (/\S+/models--kvshare-test--tiny-llama/snapshots/[0-9a-f]{40}), (\d+) bytes"' % HF_MODEL,
                           res.stdout)
        assert staged, "no staging report for %s:\n%s" % (HF_MODEL, res.stdout[-4000:])
        assert int(staged.group(2)) > 0
        snapshot = staged.group(1).rsplit("/", 1)[1]
        assert any(method == "GET" and path == "/%s/resolve/%s/model.safetensors" % (HF_MODEL, snapshot)
                   for method, path, dummy in hub.requests), hub.requests
        assert D.sh("sb3", "runuser -u dynamo -- test -f %s/config.json && echo cached" % staged.group(1)).strip() == "cached"
        record["hf_staged"] = {"model": HF_MODEL, "bytes": int(staged.group(2)), "hub_requests": len(hub.requests)}
        after = _untouched(before_units, before_ids, inv)
        assert {"sb3/mock-e", "sb4/mock-e"} <= set(after), sorted(after)
        assert set(after) == set(before_ids) | {"sb3/mock-e", "sb4/mock-e"}, sorted(after)
        assert _members("sb1") == sorted(members + ["sb4"]), _members("sb1")
        record.update({"kept": {k: str(v) for k, v in before_ids.items()},
                       "new": {k: str(after[k]) for k in ("sb3/mock-e", "sb4/mock-e")},
                       "site_s": round(took, 1)})
        # The way back. sb4's worker drained, its member out of the cluster, the rest untouched.
        res, took = D.playbook("playbooks/remove_host.yml", "-e", "remove_host=sb4", "-e", "remove_host_skip_confirmation=true",
                               log="scale-out-remove-sb4")
        D.must(res, "playbooks/remove_host.yml -e remove_host=sb4")
        record["remove_host_s"] = round(took, 1)
        assert _members("sb1") == members, _members("sb1")
        assert D.sh("sb4", "systemctl is-active etcd dynamo-worker@mock-e etcd-client-proxy", check=False).split() \
            == ["inactive"] * 3
        assert D.sh("sb4", "ls -d /var/lib/etcd/*.removed-*", check=False).strip(), "the member's data dir was not kept aside"
    finally:
        if "remove_host_s" not in record:  # failed before: sb4 must not stay an etcd member
            D.playbook("playbooks/remove_host.yml", "-e", "remove_host=sb4", "-e", "remove_host_skip_confirmation=true",
                       log="scale-out-remove-sb4-cleanup")
        D.playbook("sandbox/destroy.yml", "--limit", "sb4", log="scale-out-destroy-sb4")
        D.make_copy()
        hub.close()
    res, took = D.playbook("site.yml", "--tags", "etcd_client,dynamo_worker", log="scale-out-back")
    D.must(res, "site.yml --tags etcd_client,dynamo_worker (back to the base inventory)")
    record["back_s"] = round(took, 1)
    inv = D.Inv()
    _untouched(before_units, before_ids, inv)
    assert set(inv.wait_all_serving()) == set(inv.worker_map())
    config_dir = inv.hostvars["sb3"].get("dynamo_runtime_config_dir") or service_defaults()["dynamo_runtime_config_dir"]
    assert "mock-e" not in D.sh("sb3", "ls %s/workers" % config_dir)
    assert _members("sb1") == members
    res, dummy = D.playbook("verify.yml", log="scale-out-verify")
    D.must(res, "verify.yml after remove_host.yml and the base inventory's site.yml")
