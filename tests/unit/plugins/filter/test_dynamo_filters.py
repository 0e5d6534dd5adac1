# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for the worker logic behind the kvshare.dynamo filters."""
import json
import shlex

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kvshare.dynamo.plugins.filter import dynamo as public
from ansible_collections.kvshare.dynamo.plugins.filter.internal import dynamo as f
from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as w
from lib.sandbox import service_defaults


def wk(name, gpus=None, **kw):
    d = {"name": name, "engine": "vllm", "model": "/m", "system_port": 18000 + len(name) + hash(name) % 500}
    if gpus is not None:
        d["gpus"] = gpus
    d.update(kw)
    return d


def test_same_gpu_workers_are_serialised_and_others_overlap():
    workers = [wk("a", ["0"]), wk("b", ["0"]), wk("c", ["1"]), wk("d", ["2"])]
    assert w.start_waves(workers) == [["a", "c", "d"], ["b"]]


def test_chained_gpu_sharing_forms_one_group():
    workers = [wk("a", ["0", "1"]), wk("b", ["1"]), wk("c", ["2", "0"]), wk("d", ["3"])]
    assert w.start_waves(workers) == [["a", "d"], ["b"], ["c"]]


def test_workers_without_gpus_start_together():
    assert w.start_waves([wk("a"), wk("b")]) == [["a", "b"]]
    assert w.start_waves([]) == []


def test_gpu_given_as_scalar():
    assert w.start_waves([wk("a", 0), wk("b", "0")]) == [["a"], ["b"]]


def test_valid_inventory_has_no_errors():
    workers = [wk("a", ["0"], system_port=18081, rpc_port=19081, gpu_memory_utilization=0.4,
                  kv_transfer_config={"kv_connector": "ExampleConnector", "kv_role": "kv_both"}),
               wk("b", ["0"], system_port=18082, rpc_port=19082, gpu_memory_utilization=0.4)]
    assert w.worker_errors(workers, "h1", ["fe"]) == []


@pytest.mark.parametrize("workers,needle", [
    ([wk("a", system_port=1), wk("a", system_port=2)], "worker 'a' on h1: duplicate worker name"),
    ([wk("a", system_port=5), wk("b", system_port=5)], "worker 'b' on h1: system_port 5 is already used by worker 'a'"),
    ([wk("a", system_port=5, rpc_port=5)], "rpc_port 5 is already used"),
    ([wk("a", system_port=70000)], "dynamo_workers[a].system_port on h1: must be an integer in 1-65535"),
    ([wk("a", system_port=1, engine="sglang")], "engine 'sglang' is unknown"),
    ([wk("Bad_Name", system_port=1)], "name must match"),
    ([wk("a", ["0"], system_port=1, gpu_memory_utilization=0.6), wk("b", ["0"], system_port=2, gpu_memory_utilization=0.5)],
     "workers a, b share GPU 0 and ask for 1.10"),
    ([wk("a", system_port=1, gpu_memory_utilization=1.5)], "gpu_memory_utilization must be in (0, 1]"),
    ([wk("a", system_port=1, kv_transfer_config="{not json")], "kv_transfer_config is not valid JSON"),
    ([wk("a", system_port=1, kv_transfer_config={"kv_role": "kv_both"})], "kv_transfer_config has no 'kv_connector'"),
    ([wk("a", system_port=1, engine="mocker", kv_transfer_config={"kv_connector": "X"})], "engine mocker has no KV connector"),
    ([wk("a", system_port=1, env={"DYN_CONNECTOR": "x"})], "DYN_CONNECTOR"),
    ([wk("a", system_port=1, extra_args="--enforce-eager")], "dynamo_workers[a].extra_args on h1: must be a list"),
    ([wk("a", system_port=1, model="")], "model is required"),
])
def test_bad_input_is_named(workers, needle):
    errors = w.worker_errors(workers, "h1", ["fe"])
    assert any(needle in e for e in errors), errors


def test_no_frontend_is_an_error():
    errors = w.worker_errors([wk("a", system_port=1)], "h1", [])
    assert errors and "no frontend" in errors[0]


def test_kv_transfer_config_accepts_json_string():
    cfg = w.kv_transfer_config({"name": "a", "kv_transfer_config": '{"kv_connector": "X", "kv_role": "kv_both"}'})
    assert cfg == {"kv_connector": "X", "kv_role": "kv_both"}
    assert w.kv_transfer_config({"name": "a"}) is None


def _systemd_unquote(line):
    """Reverse systemd_command for the subset it produces (quotes, \\ escapes, %% and $$)."""
    return [a.replace("%%", "%").replace("$$", "$") for a in shlex.split(line)]


def test_systemd_command_round_trips_json_and_specials():
    cfg = json.dumps({"kv_connector": "ExampleConnector", "kv_connector_extra_config": {"p": "/a b/%i $HOME \\x"}})
    argv = ["/opt/venv/bin/python", "-m", "dynamo.vllm", "--kv-transfer-config", cfg]
    line = f.systemd_command(argv)
    assert "%%i" in line and "$$HOME" in line
    assert _systemd_unquote(line) == argv


def test_systemd_command_refuses_relative_program():
    with pytest.raises(Exception):
        f.systemd_command(["python", "-m", "x"])


def test_vllm_worker_argv_renders_connector_json():
    worker = {"name": "a", "engine": "vllm", "model": "/m", "served_model_name": "tiny", "gpu_memory_utilization": 0.3,
              "prefix_caching": False, "extra_args": ["--enforce-eager"],
              "kv_transfer_config": {"kv_connector": "MaruKVConnector", "kv_connector_module_path": "maru_vllm",
                                     "kv_role": "kv_both", "kv_connector_extra_config": {"maru_instance_id": "w0"}}}
    argv = f.worker_argv(worker, "/v/bin/python")
    assert argv[:5] == ["/v/bin/python", "-m", "dynamo.vllm", "--model", "/m"]
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert "--no-enable-prefix-caching" in argv and argv[-1] == "--enforce-eager"
    cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert cfg["kv_connector_extra_config"]["maru_instance_id"] == "w0"
    assert "--connector" not in argv


def test_mocker_worker_argv():
    argv = f.worker_argv({"name": "m", "engine": "mocker", "model": "/m", "served_model_name": "mock",
                          "endpoint": "dyn://dynamo.mocker.generate", "extra_args": ["--speedup-ratio", "10"]}, "/p")
    assert argv == ["/p", "-m", "dynamo.mocker", "--model-path", "/m", "--model-name", "mock", "--discovery-backend",
                    "etcd", "--endpoint", "dyn://dynamo.mocker.generate", "--speedup-ratio", "10"]


def test_probe_targets_carry_what_the_ready_module_takes():
    targets = f.worker_probe_targets([{"name": "a", "engine": "vllm", "model": "/m", "served_model_name": "tiny",
                                       "system_port": 18081, "rpc_port": 19081},
                                      {"name": "b", "engine": "mocker", "model": "/m", "system_port": 18082}],
                                     "127.0.10.2")
    assert targets == [{"name": "a", "model": "tiny", "system_url": "http://127.0.10.2:18081", "rpc_port": 19081},
                       {"name": "b", "model": "/m", "system_url": "http://127.0.10.2:18082"}]


def test_probe_targets_ask_a_completion_only_of_workers_started_or_restarted():
    workers = [{"name": n, "engine": "mocker", "model": "/m", "system_port": 18080 + i} for i, n in enumerate("abcd")]
    # b restarted (its files changed), c started; a and d were running and left alone.
    targets = f.worker_probe_targets(workers, "127.0.10.2", ["b", "c"])
    assert [(t["name"], t["completion_probe"]) for t in targets] == [("a", False), ("b", True), ("c", True), ("d", False)]


EXAMPLE = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": {"shared_storage_path": "/srv/kv"}}
MARU = {"kv_connector": "MaruKVConnector", "kv_connector_module_path": "maru_vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"maru_server_url": "tcp://10.0.0.1:5555", "maru_instance_id": "x"}}


def test_pairs_one_per_pool_and_mocker_endpoint():
    hosts = {
        "h2": [{"name": "a", "engine": "vllm", "model": "/m", "kv_transfer_config": EXAMPLE},
               {"name": "b", "engine": "vllm", "model": "/m", "kv_transfer_config": EXAMPLE}],
        "h3": [{"name": "m1", "engine": "mocker", "model": "/m", "endpoint": "dyn://d.mocker.generate"},
               {"name": "m2", "engine": "mocker", "model": "/m", "endpoint": "dyn://d.mocker.generate"}],
    }
    pairs = w.share_pairs(hosts)
    got = sorted((p["a"]["host"] + "/" + p["a"]["worker"]["name"], p["b"]["host"] + "/" + p["b"]["worker"]["name"])
                 for p in pairs)
    assert got == [("h2/a", "h2/b"), ("h3/m1", "h3/m2")]


def test_local_directories_on_two_hosts_are_two_pools():
    hosts = {"h1": [{"name": "a", "engine": "vllm", "model": "/m", "kv_transfer_config": EXAMPLE}],
             "h2": [{"name": "b", "engine": "vllm", "model": "/m", "kv_transfer_config": EXAMPLE}]}
    assert w.share_pairs(hosts) == []


def test_maru_pool_spanning_hosts_pairs_on_one_host_and_across_hosts():
    hosts = {"h1": [{"name": "a", "engine": "vllm", "model": "/m", "kv_transfer_config": MARU},
                    {"name": "b", "engine": "vllm", "model": "/m", "kv_transfer_config": MARU}],
             "h2": [{"name": "c", "engine": "vllm", "model": "/m", "kv_transfer_config": MARU}]}
    same, cross = w.share_pairs(hosts)
    assert (same["a"]["host"], same["a"]["worker"]["name"], same["b"]["host"], same["b"]["worker"]["name"]) \
        == ("h1", "a", "h1", "b")
    assert (cross["a"]["host"], cross["a"]["worker"]["name"], cross["b"]["host"], cross["b"]["worker"]["name"]) \
        == ("h1", "a", "h2", "c")
    assert same["pool"] == cross["pool"] == "maru:tcp://10.0.0.1:5555"


def test_maru_pool_one_worker_per_host_pairs_across_hosts_only():
    hosts = {"h1": [{"name": "a", "engine": "vllm", "model": "/m", "kv_transfer_config": MARU}],
             "h2": [{"name": "c", "engine": "vllm", "model": "/m", "kv_transfer_config": MARU}]}
    (pair,) = w.share_pairs(hosts)
    assert (pair["a"]["host"], pair["b"]["host"]) == ("h1", "h2")


def test_maru_servers_and_instance_ids():
    workers = [{"name": "a", "engine": "vllm", "model": "/m", "kv_transfer_config": dict(MARU, kv_connector_module_path="x")},
               {"name": "b", "engine": "vllm", "model": "/m", "kv_transfer_config": EXAMPLE},
               {"name": "m", "engine": "mocker", "model": "/m", "kv_transfer_config": MARU}]
    assert f.worker_maru_servers(workers) == ["tcp://10.0.0.1:5555"]
    assert w.maru_instance_id(workers[0]) == "x" and w.maru_instance_id(workers[1]) is None
    assert w.maru_server_url({"name": "n", "engine": "vllm", "kv_transfer_config": {"kv_connector": "MaruKVConnector"}}) \
        == "tcp://localhost:5555"


def test_named_pairs_and_unknown_names():
    hosts = {"h1": [{"name": "a", "engine": "vllm", "model": "/m"}, {"name": "b", "engine": "vllm", "model": "/m"}]}
    (pair,) = w.share_pairs(hosts, [{"a": "h1/b", "b": "h1/a"}])
    assert pair["a"]["worker"]["name"] == "b"
    with pytest.raises(ValueError, match="unknown workers"):
        w.share_pairs(hosts, [{"a": "h1/a", "b": "h9/z"}])


def test_ready_summary_lines():
    lines = f.ready_summary([{"name": "a", "ready": True, "registered_after_s": 20.04, "ready_after_s": 20.1,
                              "instance_id_str": "7669808465864704572"},
                             {"name": "b", "ready": False, "last_error": "not registered"},
                             {"name": "c", "ready": True, "completion_probe": False, "instance_id_str": "42"}])
    assert lines == ["a: registered after 20.0 s, ready after 20.1 s, instance 7669808465864704572",
                     "b: NOT READY (not registered)",
                     "c: left running, registered as instance 42 (no completion needed)"]


def test_kv_share_pairs_resolve_the_workers_kv_pool():
    """verify.yml's pairs come from the workers as their pool configures them (kv_pool: maru)."""
    def vllm(name, port, **fields):
        return dict({"name": name, "engine": "vllm", "model": "/m", "gpus": ["0"], "system_port": port}, **fields)

    hostvars = {"p1": {"maru_pool_bind_address": "10.0.0.1",
                       "dynamo_workers": [vllm("a", 1, kv_pool="maru"), vllm("b", 2, kv_pool="maru")]},
                "w1": {"dynamo_workers": [vllm("c", 1, kv_pool={"type": "maru", "host": "p1"})]}}
    groups = {"maru_pool": ["p1"], "dynamo_workers": ["p1", "w1"]}
    same, cross = public.kv_share_pairs(["p1", "w1"], hostvars, None, groups, service_defaults())
    assert same["pool"] == cross["pool"] == "maru:tcp://10.0.0.1:5555"
    assert (same["a"]["worker"]["name"], same["b"]["worker"]["name"], cross["b"]["host"]) == ("a", "b", "w1")
    assert same["maru_server"] == "tcp://10.0.0.1:5555" and same["a_maru_instance_id"] == "p1-a"
    # without groups the pool cannot be found: the workers count as written (no pool)
    assert public.kv_share_pairs(["p1", "w1"], hostvars, None, None, service_defaults()) == []


def _usage_result(pair, total, free, rc=0):
    return {"item": {"item": pair}, "rc": rc, "stdout": json.dumps({"pool_total": total, "pool_free": free})}


def test_verify_pool_space_names_a_pool_too_full_for_worker_a():
    mib = 1024 * 1024
    extra = dict(MARU["kv_connector_extra_config"], maru_pool_size="128M")
    worker = {"name": "vllm-a", "engine": "vllm", "model": "/m",
              "kv_transfer_config": dict(MARU, kv_connector_extra_config=extra)}
    pair = {"a": {"host": "sb2", "worker": worker}, "maru_server": "tcp://10.0.0.1:5555"}
    # The figures of 2026-12-01: 2 GiB pool, 110 MiB free, 128 MiB allocations failing.
    (line,) = f.verify_pool_space([_usage_result(pair, 2048 * mib, 110 * mib)])
    assert "tcp://10.0.0.1:5555" in line and "110 MiB free of 2048 MiB" in line and "94.6 % used" in line
    assert "128 MiB" in line and "sb2/vllm-a" in line and "restart maru-server" in line
    # Room for one more allocation, a failed probe, a skipped item: nothing to say.
    assert f.verify_pool_space([_usage_result(pair, 2048 * mib, 128 * mib)]) == []
    assert f.verify_pool_space([_usage_result(pair, 2048 * mib, 0, rc=1)]) == []
    assert f.verify_pool_space([{"item": {"item": pair}, "skipped": True}]) == []
    # Upstream's default maru_pool_size (1G) when the worker sets none.
    default = dict(pair, a={"host": "sb2", "worker": {"name": "b", "engine": "vllm", "model": "/m",
                                                      "kv_transfer_config": MARU}})
    assert w.maru_pool_size(default["a"]["worker"]) == 1024 * mib
    assert f.verify_pool_space([_usage_result(default, 2048 * mib, 512 * mib)])


def test_pool_probe_reads_requires_and_probes_each_maru_server():
    requires = [{"path": "/mnt/maru-fsdax"}, {"unit": "maru-resource-manager.service"}]
    servers = ["tcp://127.0.0.1:5555", "tcp://127.0.0.2:5555"]
    probe = f.worker_pool_probe(requires, servers, "/opt/dynamo/venv/bin/python", True)
    assert probe["paths"] == ["/mnt/maru-fsdax"]
    assert probe["units"] == ["maru-resource-manager.service", "maru-server.service"]
    assert probe["commands"] == [
        {"name": url, "argv": ["/opt/dynamo/venv/bin/python", "-m", "kvshare_maru_connector", "wait", url, "--timeout", "5"]}
        for url in servers]
    # The local server unit only where this host runs it, and never twice.
    assert f.worker_pool_probe(requires, servers, "/py", False)["units"] == ["maru-resource-manager.service"]
    twice = f.worker_pool_probe(requires + [{"unit": "maru-server.service"}], servers, "/py", True)
    assert twice["units"] == ["maru-resource-manager.service", "maru-server.service"]
    assert f.worker_pool_probe([], [], "/py", True) == {"paths": [], "units": [], "commands": []}
    with pytest.raises(AnsibleFilterError, match="worker_pool_probe: malformed dynamo_worker_requires"):
        f.worker_pool_probe(["/mnt/maru-fsdax"], [], "/py")


def test_pool_problems_in_the_order_the_rollout_reports_them():
    up = {"paths": {"/mnt/maru-fsdax": {"exists": True, "isdir": True}},
          "units": {"maru-server.service": {"ActiveState": "active", "SubState": "running", "LoadState": "loaded"}},
          "commands": {"tcp://127.0.0.1:5555": {"rc": 0, "stdout": "", "stderr": ""}}}
    assert f.worker_pool_problems(up) == []
    down = {"paths": {"/mnt/maru-fsdax": {"exists": True, "isdir": True}, "/mnt/none": {"exists": False, "isdir": False}},
            "units": {"maru-server.service": {"ActiveState": "inactive", "SubState": "dead", "LoadState": "loaded"},
                      "maru-resource-manager.service": None},
            "commands": {"tcp://127.0.0.1:5555": {"rc": 1, "stdout": "", "stderr": " no answer from tcp://127.0.0.1:5555 \n"},
                         "tcp://127.0.0.2:5555": {"rc": 2, "stdout": "", "stderr": ""}}}
    assert f.worker_pool_problems(down) == [
        "path /mnt/none is missing",
        "unit maru-server.service is inactive",
        "unit maru-resource-manager.service could not be read",
        "no answer from tcp://127.0.0.1:5555",
        "tcp://127.0.0.2:5555: probe exited 2",
    ]


def test_verify_check_runs_one_per_maru_a_host_with_the_other_pairs_in_the_first():
    """verify.yml's kv_share_check runs: a Maru pair from A's host (Maru's client reads the pool
    there), the mocker pair side by side with them in the first run, the arguments complete."""
    def vllm(name, port, **fields):
        return dict({"name": name, "engine": "vllm", "model": "/m", "gpus": ["0"], "system_port": port}, **fields)

    def mocker(name, port):
        return {"name": name, "engine": "mocker", "model": "/m", "served_model_name": "tm", "system_port": port,
                "endpoint": "dyn://d.mocker.generate", "rpc_port": port + 100}
    hostvars = {"p1": {"kvshare_bind_address": "127.0.10.2", "maru_pool_bind_address": "127.0.10.2", "dynamo_runtime_venv_root": "/opt/v",
                       "dynamo_workers": [vllm("a", 1, kv_pool="maru"), vllm("b", 2, kv_pool="maru")]},
                "w1": {"kvshare_bind_address": "127.0.10.3",
                       "dynamo_workers": [vllm("c", 1, kv_pool={"type": "maru", "host": "p1"}),
                                          mocker("m1", 5), mocker("m2", 6)]},
                "fe": {"kvshare_bind_address": "127.0.10.1"}}
    groups = {"maru_pool": ["p1"], "dynamo_workers": ["p1", "w1"], "dynamo_frontend": ["fe"]}
    pairs = public.kv_share_pairs(["p1", "w1"], hostvars, None, groups, service_defaults())
    (run,) = f.verify_check_runs(pairs, hostvars, service_defaults(), "fe")
    assert run["host"] == "p1" and len(run["pairs"]) == len(run["args"]) == 3
    assert run["labels"] == ["p1/a -> p1/b (maru:tcp://127.0.10.2:5555)", "p1/a -> w1/c (maru:tcp://127.0.10.2:5555)",
                             "w1/m1 -> w1/m2 (mocker:dyn://d.mocker.generate:tm)"]
    same, cross, mock = run["args"]
    assert same["store_probe"] == ["/opt/v/current/bin/python", "-m", "kvshare_maru_connector", "usage", "--follow",
                                   "tcp://127.0.10.2:5555"]
    assert same["store_probe_follow"] is True and same["store_instance_id"] == "p1-a"
    assert cross["worker_b"] == {"name": "w1/c", "engine": "vllm", "system_url": "http://127.0.10.3:1"}
    assert mock == {"pool": "mocker:dyn://d.mocker.generate:tm", "model": "tm",
                    "worker_a": {"name": "w1/m1", "engine": "mocker", "system_url": "http://127.0.10.3:5", "rpc_port": 105},
                    "worker_b": {"name": "w1/m2", "engine": "mocker", "system_url": "http://127.0.10.3:6", "rpc_port": 106}}
    # No Maru pair: the pairs run from the default host (the frontend's).
    (only,) = f.verify_check_runs(pairs[2:], hostvars, service_defaults(), "fe")
    assert only["host"] == "fe" and only["args"] == [mock]
    # The module's answers per pair, in order; a run that failed whole makes each of its pairs an error.
    results = [{"item": run, "pairs": [{"verdict": "passed", "reasons": [], "report": {"x": 1}},
                                       {"verdict": "failed", "reasons": ["b took 0"], "report": {}},
                                       {"verdict": "not_applicable", "reasons": ["mocker"], "report": {}}]},
               {"item": only, "failed": True, "unreachable": True, "msg": "ssh: connect refused"}]
    outcomes = f.verify_outcomes(results)
    assert [(o["item"]["a"]["worker"]["name"], o["verdict"]) for o in outcomes] == [
        ("a", "passed"), ("a", "failed"), ("m1", "not_applicable"), ("m1", "error")]
    assert outcomes[3]["reasons"] == ["w1/m1 -> w1/m2 (mocker:dyn://d.mocker.generate:tm): ssh: connect refused"]
    assert f.verify_summary(outcomes)[1] == {"host_a": "p1", "host_b": "w1", "pool": "maru:tcp://127.0.10.2:5555",
                                             "verdict": "failed", "reasons": ["b took 0"], "report": {}}
