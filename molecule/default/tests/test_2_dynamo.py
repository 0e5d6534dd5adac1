# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Dynamo: units, listen addresses, every worker answering a direct-routed completion, start order."""
import re

import pytest

from conftest import FRONTEND, HOSTVARS, address, completion, generate_instances, instance_of, workers

WORKERS = list(workers())
IDS = ["%s/%s" % (h, w["name"]) for h, w in WORKERS]


def test_frontend_unit_and_port(hosts):
    host = hosts[FRONTEND]
    svc = host.service("dynamo-frontend")
    assert svc.is_running and svc.is_enabled
    assert host.socket("tcp://%s:8000" % address(FRONTEND)).is_listening
    assert not host.socket("tcp://0.0.0.0:8000").is_listening
    assert host.process.filter(user="dynamo", comm="python")


@pytest.mark.parametrize("host,worker", WORKERS, ids=IDS)
def test_worker_unit_and_ports(hosts, host, worker):
    h = hosts[host]
    svc = h.service("dynamo-worker@%s" % worker["name"])
    assert svc.is_running and svc.is_enabled
    assert h.socket("tcp://%s:%s" % (address(host), worker["system_port"])).is_listening
    assert h.socket("tcp://%s:%s" % (address(host), worker["rpc_port"])).is_listening
    assert h.check_output("systemctl show -p User --value dynamo-worker@%s" % worker["name"]) == "dynamo"
    assert h.check_output("systemctl show -p LimitMEMLOCK --value dynamo-worker@%s" % worker["name"]) == "infinity"


def test_every_worker_registered_once():
    assert len(generate_instances()) == len(WORKERS)


@pytest.mark.parametrize("host,worker", WORKERS, ids=IDS)
def test_worker_answers_direct_routed_completion(host, worker):
    (iid,) = instance_of(host, worker)
    status, body = completion(worker, iid)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 2


def test_untargeted_request_is_refused_in_direct_mode():
    dummy, worker = WORKERS[0]
    from conftest import FRONTEND_URL, http_json
    status, dummy = http_json(FRONTEND_URL + "/v1/completions",
                              {"model": worker["served_model_name"], "prompt": "hi", "max_tokens": 1})
    assert status == 400


def _start_times(h, names):
    out = {}
    for name in names:
        mono = h.check_output("systemctl show -p ExecMainStartTimestampMonotonic --value dynamo-worker@%s" % name)
        out[name] = int(mono) / 1e6
    return out


def test_same_gpu_workers_started_one_after_another(hosts):
    """vllm-a and vllm-b share GPU 0: b starts only once a is proven ready (>10 s of vLLM start)."""
    times = _start_times(hosts["sb2"], ["vllm-a", "vllm-b"])
    assert times["vllm-b"] - times["vllm-a"] > 10, times


def test_workers_on_different_gpus_started_together(hosts):
    times = _start_times(hosts["sb3"], ["mock-a", "mock-b"])
    assert abs(times["mock-b"] - times["mock-a"]) < 3, times


def test_model_allowance_reaches_boot_wait_and_liveness_grace(hosts):
    """The readiness timeout with the staged model's allowance (dynamo_worker_ready_timeout + 10 s per
    GiB, or part of one, of the largest model: tasks/models.yml) is also what vllm-a's boot-time gate
    for its same-GPU successor waits at most, and the liveness probe's start grace: a worker loading
    a large model is neither overtaken by its successor nor restarted as hung."""
    h = hosts["sb2"]
    model = {w["model"] for w in HOSTVARS["sb2"]["dynamo_workers"]}
    assert len(model) == 1, model
    size = sum(int(line) for line in h.check_output("find -L %s -type f -printf '%%s\\n'" % model.pop()).split())
    expected = int(HOSTVARS["sb2"].get("dynamo_worker_ready_timeout", 300)) + 10 * -(-size // (1 << 30))
    assert expected > int(HOSTVARS["sb2"].get("dynamo_worker_ready_timeout", 300)), expected
    health = h.file("/etc/systemd/system/dynamo-worker-health.service").content_string
    assert re.search(r'"--start-grace" "%d"' % expected, health), health  # (argv quoted: systemd_command)
    gate = h.file("/etc/systemd/system/dynamo-worker@vllm-a.service.d/10-exec.conf").content_string
    assert re.search(r"/health --timeout %d\b" % expected, gate), gate
