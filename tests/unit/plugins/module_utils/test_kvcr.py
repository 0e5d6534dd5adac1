# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr: identity, cross-host checks, rendered config, Guard-recovery metrics, host helpers."""
import os
import re
import signal

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "kvcr")
PREFIX = "01010101010101010101010101010101:02020202020202020202020202020202/0303030303030303"
# ai-dynamo 1.6.1 dynamo/vllm/state_agent.py _CACHE_OWNER_PATTERN
DYNAMO_OWNER_RE = re.compile(r"^(?P<domain>[0-9a-f]{32}:[0-9a-f]{32})/[0-9a-f]{16}/[0-9a-f]{32}$")


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


# ---------------------------------------------------------------- identity

def test_owner_id_matches_seed_and_dynamo_pattern():
    assert kvcr.cache_owner_id(0, 2, PREFIX) == PREFIX + "/" + "0" * 32
    assert kvcr.cache_owner_id("1", 2, PREFIX).endswith("/" + "0" * 31 + "1")
    assert kvcr.cache_owner_id(17, 32, PREFIX).endswith("/%032x" % 17)
    assert DYNAMO_OWNER_RE.match(kvcr.cache_owner_id(1, 2, PREFIX))


@pytest.mark.parametrize("slot,count,msg", [
    (2, 2, "outside [0, 2)"), (-1, 2, "decimal integer"), ("", 2, "decimal integer"), (True, 2, "decimal integer"),
    ("1.0", 2, "decimal integer"), (0, 0, "positive"), (0, "x", "positive"),
])
def test_owner_id_refuses_bad_slots(slot, count, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        kvcr.cache_owner_id(slot, count, PREFIX)


def test_owner_id_refuses_bad_prefix():
    with pytest.raises(ValueError, match="prefix"):
        kvcr.cache_owner_id(0, 2, "0101:0202/03")


@pytest.mark.parametrize("host,bad", [
    ("10.0.1.11", False), ("gpu-a.example", False), ("[fd00::1]", False),
    ("127.0.40.1", True), ("0.0.0.0", True), ("localhost", True), ("*", True), ("10.0.1.11:80", True),
    ("tcp://10.0.1.11", True), ("[::1]", True), ("", True),
])
def test_advertise_host(host, bad):
    assert (kvcr.advertise_host_error(host) is not None) is bad


# ---------------------------------------------------------------- cross-host checks

def good_settings(**kw):
    settings = {"variant": "memory_service", "slot_count": 2, "compatibility_digest": "qwen3-0.6b-example-v1",
                "require_two_nodes": True, "router_modes": {"gpu-a": "kv"}, "discovery_backend": "etcd"}
    settings.update(kw)
    return settings


def members(*specs):
    return [{"host": h, "address": a, "slot": s, "kvcr_workers": ["kvcr"]} for h, a, s in specs]


GOOD = members(("gpu-a", "10.0.1.11", 0), ("gpu-b", "10.0.1.12", 1))


def test_good_deployment():
    assert kvcr.deployment_errors(GOOD, good_settings()) == []
    assert kvcr.deployment_errors(GOOD, good_settings(variant="process_local", compatibility_digest="")) == []


def test_duplicate_slot():
    errs = kvcr.deployment_errors(members(("gpu-a", "10.0.1.11", 0), ("gpu-b", "10.0.1.12", 0)), good_settings())
    assert errs == ["kvcr_cache_slot 0 on gpu-b is already used by gpu-a: cache owner ids must be unique"]


def test_out_of_range_and_missing_slots():
    errs = kvcr.deployment_errors(members(("gpu-a", "10.0.1.11", 2), ("gpu-b", "10.0.1.12", None)), good_settings())
    assert "kvcr_cache_slot 2 on gpu-a is outside [0, 2) (kvcr_cache_slot_count)" in errs
    assert any(e.startswith("kvcr_cache_slot on gpu-b must be a non-negative integer") for e in errs)


def test_both_workers_on_one_machine():
    errs = kvcr.deployment_errors(members(("gpu-a", "10.0.1.11", 0), ("gpu-a2", "10.0.1.11", 1)), good_settings())
    assert any("gpu-a, gpu-a2 are one machine (10.0.1.11)" in e for e in errs)
    assert any("at least two nodes" in e for e in errs)
    # allowed when the variant does not require two nodes
    assert kvcr.deployment_errors(members(("gpu-a", "10.0.1.11", 0), ("gpu-a2", "10.0.1.11", 1)),
                                  good_settings(require_two_nodes=False)) == []


def test_single_host_refused_and_two_workers_on_a_host():
    errs = kvcr.deployment_errors(members(("gpu-a", "10.0.1.11", 0)), good_settings())
    assert any("at least two nodes" in e for e in errs)
    two = [{"host": "gpu-a", "address": "a", "slot": 0, "kvcr_workers": ["k0", "k1"]},
           {"host": "gpu-b", "address": "b", "slot": 1, "kvcr_workers": ["kvcr"]}]
    assert any("exactly one worker must be bound to KVCR" in e for e in kvcr.deployment_errors(two, good_settings()))


def test_digest_and_router_mode_and_variant():
    assert any("kvcr_compatibility_digest is required" in e
               for e in kvcr.deployment_errors(GOOD, good_settings(compatibility_digest="")))
    assert any("may only contain" in e for e in kvcr.deployment_errors(GOOD, good_settings(compatibility_digest="a b")))
    errs = kvcr.deployment_errors(GOOD, good_settings(router_modes={"gpu-a": "direct"}))
    assert any("dynamo_frontend_router_mode on gpu-a is 'direct'" in e for e in errs)
    assert any("no frontend" in e for e in kvcr.deployment_errors(GOOD, good_settings(router_modes={})))
    assert any("kvcr_variant must be one of" in e for e in kvcr.deployment_errors(GOOD, good_settings(variant="x")))
    assert any("etcd discovery" in e for e in kvcr.deployment_errors(GOOD, good_settings(discovery_backend="file")))
    assert any("3 KVCR workers" in e for e in kvcr.deployment_errors(
        members(("a", "1", 0), ("b", "2", 1), ("c", "3", 1)), good_settings()))


# ---------------------------------------------------------------- rendered config

OPTS = {"owner_prefix": PREFIX, "cpu_bytes": 2147483648, "control_port": 23280, "socket_path": "/run/kvcr/memory.sock",
        "compatibility_digest": "qwen3-0.6b-example-v1", "secondary_g2_slots": 1024, "enable_telemetry": True}


def test_memory_service_config_matches_seed_shape():
    cfg = kvcr.kv_transfer_config("memory_service", 1, 2, "10.0.1.12", OPTS)
    assert cfg["kv_connector"] == "OffloadingConnector" and cfg["kv_role"] == "kv_both"
    extra = cfg["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec" and extra["self_describing_kv_events"] is True
    assert extra["cpu_bytes_to_use"] == 2147483648
    assert extra["dynamo_state_agent"] == {"raw_advertise_host": "10.0.1.12",
                                           "cache_owner_ids": {"0": PREFIX + "/" + "0" * 31 + "1"}}
    assert extra["secondary_tiers"] == [{
        "type": "kvcr", "kvcr_service_socket_path": "/run/kvcr/memory.sock",
        "compatibility_digest": "qwen3-0.6b-example-v1", "router_capabilities": ["router_hint"],
        "control_host": "10.0.1.12", "control_ports": [23280], "control_advertise_host": "10.0.1.12",
        "enable_telemetry": True}]


def test_process_local_config():
    tier = kvcr.kv_transfer_config("process_local", 0, 2, "10.0.1.11", OPTS)["kv_connector_extra_config"]["secondary_tiers"][0]
    # vLLM 0.31.0 tiering/kvcr: socket path and digest come together or not at all
    assert "kvcr_service_socket_path" not in tier and "compatibility_digest" not in tier
    assert tier["secondary_g2_slots"] == 1024


def test_config_refuses_bad_slot_and_variant():
    with pytest.raises(ValueError, match="outside"):
        kvcr.kv_transfer_config("memory_service", 5, 2, "10.0.1.12", OPTS)
    with pytest.raises(ValueError, match="unknown KVCR variant"):
        kvcr.kv_transfer_config("sidecar", 0, 2, "10.0.1.12", OPTS)


def test_worker_env_and_service_argv():
    assert kvcr.worker_env(1, 2, 0) == {"KVCR_CACHE_SLOT": "1", "KVCR_CACHE_SLOT_COUNT": "2", "PYTHONHASHSEED": "0"}
    assert kvcr.worker_env(0, 2, 0, True)["UCX_PROTO_INFO"] == "y"
    argv = kvcr.service_argv("/opt/v/bin/python", {"socket_path": "/run/kvcr/memory.sock", "pool_dir": "/dev/shm/kvcr",
                                                   "guard_count": 1, "pool_sizes_gb": [2, 0.5], "compatibility_digest": "d",
                                                   "heartbeat_timeout_ms": 0, "log_level": "info"})
    assert argv == ["/opt/v/bin/python", "-m", "kvcr.kvcr_service", "--socket-path", "/run/kvcr/memory.sock",
                    "--pool-dir", "/dev/shm/kvcr", "--guard-count", "1", "--pool-sizes-gb", "2,0.5",
                    "--compatibility-digest", "d", "--log-level", "INFO"]
    assert "--heartbeat-timeout-ms" in kvcr.service_argv("p", {"socket_path": "s", "pool_dir": "d", "pool_sizes_gb": "1",
                                                               "compatibility_digest": "x", "heartbeat_timeout_ms": 1500})


def test_worker_errors():
    cfg = kvcr.kv_transfer_config("memory_service", 0, 2, "10.0.1.11", OPTS)
    pool = {"type": "kvcr", "host": "g0"}  # the worker as its pool configures it (module_utils.kv_pools)
    good = {"name": "kvcr", "engine": "vllm", "gpus": ["0"], "kv_transfer_config": cfg, "kv_pool": pool,
            "extra_args": ["--kv-events-config", "{}"]}
    assert kvcr.worker_errors(good, cfg, "memory_service") == []
    bad = dict(good, prefix_caching=False, gpus=[], kv_transfer_config={"kv_connector": "X"}, extra_args=[])
    assert len(kvcr.worker_errors(bad, cfg, "memory_service")) == 4
    mock = {"name": "kvcr", "engine": "mocker", "kv_pool": pool}
    assert kvcr.worker_errors(mock, cfg, "memory_service", require_hardware=False) == []
    assert "engine must be vllm" in kvcr.worker_errors(mock, cfg, "memory_service")[0]
    # the worker names its pool: the connector is never hand-written
    for worker in (dict(good, kv_pool=None), dict(good, kv_pool={"type": "maru", "host": "g0"})):
        assert kvcr.worker_errors(worker, cfg, "memory_service") == [
            "worker kvcr: must name its pool, kv_pool: kvcr (its kv_transfer_config, env and --kv-events-config come "
            "from this host's KVCR slot)"]


# ---------------------------------------------------------------- Guard-recovery metrics

def test_counters_on_fixture_and_absent():
    c = kvcr.counters(fixture("metrics_a_1.txt"))
    assert c["local_fill"] == 100.0 and c["tier_write_bytes"] == 183500800.0 and c["remote_deliver"] == 0.0
    plain = kvcr.counters(fixture("metrics_plain.txt"))
    assert plain["local_fill"] is None and plain["tier_read_bytes"] is None
    assert plain["external_tokens"] is not None


def seed_deltas():
    return {"gpu-a": kvcr.deltas(fixture("metrics_a_0.txt"), fixture("metrics_a_1.txt")),
            "gpu-b": kvcr.deltas(fixture("metrics_b_0.txt"), fixture("metrics_b_1.txt"))}


def test_identify_source_and_target():
    source, target, errors = kvcr.identify_source(seed_deltas())
    assert (source, target, errors) == ("gpu-a", "gpu-b", [])


def test_identify_source_refuses_ambiguous_pictures():
    d = seed_deltas()
    none = {"gpu-a": d["gpu-b"], "gpu-b": d["gpu-b"]}
    assert "found 0 (none)" in kvcr.identify_source(none)[2][0]
    both = {"gpu-a": d["gpu-a"], "gpu-b": d["gpu-a"]}
    assert "found 2" in kvcr.identify_source(both)[2][0]
    seeded_target = {"gpu-a": d["gpu-a"], "gpu-b": dict(d["gpu-b"], local_fill=3.0)}
    assert "seeded by the first request too" in kvcr.identify_source(seeded_target)[2][0]
    plain = {"gpu-a": kvcr.deltas(fixture("metrics_plain.txt"), fixture("metrics_plain.txt")), "gpu-b": d["gpu-b"]}
    assert plain["gpu-a"]["missing"] == ["local_fill", "remote_deliver", "tier_write_bytes", "tier_read_bytes"]
    assert kvcr.identify_source(plain)[0] is None


def test_recovery_verdict():
    target = kvcr.deltas(fixture("metrics_b_1.txt"), fixture("metrics_b_2.txt"))
    assert target["remote_deliver"] == 100.0 and target["tier_read_bytes"] == 183500800.0
    assert target["external_tokens"] == 6400.0 and not target["reset"]
    assert kvcr.recovery_errors("Yes.", "Yes.", target) == []
    errs = kvcr.recovery_errors("Yes.", "No.", dict(target, remote_deliver=0.0, tier_read_bytes=None))
    assert len(errs) == 3 and "differs" in errs[0] and "is 0 on the target" in errs[1] and "absent" in errs[2]
    # a restarted target (counters went down) is not a recovery
    reset = kvcr.deltas(fixture("metrics_b_2.txt"), fixture("metrics_b_0.txt"))
    assert reset["reset"] and any("restarted" in e for e in kvcr.recovery_errors("a", "a", reset))


def test_rdma_errors():
    assert kvcr.rdma_errors(200000000, 190000000, 183500800) == []
    errs = kvcr.rdma_errors(1000, None, 183500800)
    assert "transmit bytes 1000 do not cover" in errs[0] and "unreadable" in errs[1]
    assert "no KVCR payload" in kvcr.rdma_errors(1, 1, 0)[0]


# ---------------------------------------------------------------- host helpers

def make_ib(root, dev, port, xmit, rcv):
    d = root / "sys/class/infiniband" / dev / "ports" / str(port) / "counters"
    d.mkdir(parents=True)
    (d / "port_xmit_data").write_text("%d\n" % xmit)
    (d / "port_rcv_data").write_text("%d\n" % rcv)


def test_rdma_counters_fake_sysfs(tmp_path):
    make_ib(tmp_path, "mlx5_0", 1, 10, 20)
    make_ib(tmp_path, "mlx5_3", 1, 1000, 2000)
    all_ports = kvcr.rdma_counters(str(tmp_path))
    assert all_ports["xmit_bytes"] == 4040 and all_ports["rcv_bytes"] == 8080 and len(all_ports["ports"]) == 2
    one = kvcr.rdma_counters(str(tmp_path), kvcr.parse_ucx_devices("mlx5_3:1"))
    assert (one["xmit_bytes"], one["rcv_bytes"]) == (4000, 8000)
    missing = kvcr.rdma_counters(str(tmp_path), [("mlx5_9", "1")])
    assert missing["xmit_bytes"] is None and "mlx5_9:1" in missing["errors"][0]
    assert kvcr.rdma_counters(str(tmp_path / "nothing"))["errors"] == [
        "no RDMA device under %s" % (tmp_path / "nothing/sys/class/infiniband")]
    assert kvcr.parse_ucx_devices("mlx5_3:1, mlx5_4") == [("mlx5_3", "1"), ("mlx5_4", "1")]


def test_engine_pids_in_unit_cgroup_only(tmp_path):
    cg = tmp_path / "cg/system.slice/dynamo-worker@kvcr.service"
    (cg / "child").mkdir(parents=True)
    (cg / "cgroup.procs").write_text("100\n101\n")
    (cg / "child" / "cgroup.procs").write_text("102\n")
    proc = tmp_path / "proc"
    for pid, cmd, comm in ((100, b"python3\0-m\0dynamo.vllm\0", "python3"), (101, b"VLLM::EngineCore\0", "VLLM::EngineCor"),
                           (102, b"", "VLLM::EngineCore"), (200, b"VLLM::EngineCore\0", "x")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(cmd)
        (proc / str(pid) / "comm").write_text(comm + "\n")
    found = kvcr.engine_pids(str(cg), proc_root=str(proc))
    assert found == [(101, "VLLM::EngineCore"), (102, "VLLM::EngineCore")]  # pid 200 is another unit's


def test_kill_pids():
    sent = []

    def fake_kill(pid, sig):
        if pid == 2:
            raise ProcessLookupError
        sent.append((pid, sig))
    assert kvcr.kill_pids([1, 2], kill=fake_kill) == ([1], [2])
    assert sent == [(1, signal.SIGKILL)]


# ---------------------------------------------------------------- settings without the preflight

ROLE_DEFAULTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvcr", "defaults", "main.yml")


def test_host_defaults_in_lock_step_with_the_role():
    import yaml
    with open(ROLE_DEFAULTS) as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(os.path.dirname(ROLE_DEFAULTS), "..", "..", "kvshare", "defaults", "main.yml")) as handle:
        contract = yaml.safe_load(handle)["kvshare_service_defaults"]
    for key, value in kvcr.HOST_DEFAULTS.items():
        default = defaults[key]
        if default == "{{ kvshare_service_defaults.%s }}" % key:  # the stack contract's value (roles/kvshare)
            default = contract[key]
        assert default == value, key


def test_host_worker_settings_match_what_the_preflight_exports():
    hv = {"kvcr_cache_slot": 1, "kvshare_bind_address": "10.0.1.12", "kvcr_compatibility_digest": "d-1",
          "kvcr_ucx_proto_info": True}
    got = kvcr.host_worker_settings(hv)
    options = {"owner_prefix": PREFIX, "cpu_bytes": 2147483648, "control_port": 23280, "socket_path": "/run/kvcr/memory.sock",
               "compatibility_digest": "d-1", "secondary_g2_slots": 1024, "enable_telemetry": True}
    assert got["kv_transfer_config"] == kvcr.kv_transfer_config("memory_service", 1, 2, "10.0.1.12", options)
    assert got["env"] == {"KVCR_CACHE_SLOT": "1", "KVCR_CACHE_SLOT_COUNT": "2", "PYTHONHASHSEED": "0", "UCX_PROTO_INFO": "y"}
    assert got["extra_args"] == ["--kv-events-config", '{"enable_kv_cache_events":true,"endpoint":"tcp://*:23080",'
                                 '"publisher":"zmq","topic":"kv-events"}']
    # explicit advertise host wins; gathered facts are the last resort
    hv2 = {"kvcr_cache_slot": 0, "ansible_facts": {"default_ipv4": {"address": "10.9.9.9"}}}
    tier = kvcr.host_worker_settings(hv2)["kv_transfer_config"]["kv_connector_extra_config"]["secondary_tiers"][0]
    assert tier["control_advertise_host"] == "10.9.9.9"
    with pytest.raises(ValueError, match="default IPv4"):
        kvcr.host_worker_settings({"kvcr_cache_slot": 0})


# ---------------------------------------------------------------- RDMA-only transport

def test_ucx_envs_prefers_plan_then_override_then_installed_file():
    plan = [{"index": 0, "ucx_net_devices": "mlx5_3:1", "hca_is_mlx5": True}, {"index": 1, "ucx_net_devices": None}]
    assert kvcr.ucx_envs(["0", 1], plan) == {"0": {"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "rc_x,cuda"}, "1": {}}
    assert kvcr.ucx_envs(["2"], plan) == {"2": None}
    assert kvcr.ucx_envs(["0"], None, {0: "mlx5_1"}, tls="rc_x,cuda") == {
        "0": {"UCX_NET_DEVICES": "mlx5_1:1", "UCX_TLS": "rc_x,cuda"}}
    text = "# rdma_ucx\nCUDA_DEVICE_ORDER=PCI_BUS_ID\nUCX_NET_DEVICES=mlx5_2:1\nUCX_TLS=\"rc_x,cuda\"\n"
    assert kvcr.ucx_envs(["0"], None, {}, files={"0": text})["0"]["UCX_TLS"] == "rc_x,cuda"
    assert kvcr.ucx_envs(["0"], None, {}, files={"0": None}) == {"0": None}
    # extra env of rdma_ucx overrides the planned TLS (it is written after it)
    assert kvcr.planned_ucx_env(plan[0], "", {"UCX_TLS": "tcp"})["UCX_TLS"] == "tcp"


def test_rdma_transport_accepts_the_seed_settings():
    envs = {"0": {"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "rc_x,cuda"}}
    assert kvcr.rdma_transport_errors("gpu-a", ["0"], envs) == []
    assert kvcr.rdma_transport_errors("gpu-a", ["0"], {"0": {"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": " rc_x, cuda"}}) == []


@pytest.mark.parametrize("env,msg", [
    (None, "GPU 0 on gpu-b: no UCX environment"),
    ({}, "GPU 0 on gpu-b: UCX_NET_DEVICES is unset"),
    ({"UCX_NET_DEVICES": "mlx5_3:1"}, "GPU 0 on gpu-b: UCX_TLS=(unset), KVCR requires UCX_TLS=rc_x,cuda"),
    ({"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "rc_v,cuda"}, "UCX_TLS=rc_v,cuda"),
    ({"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "tcp,cuda"}, "UCX_TLS=tcp,cuda"),
    ({"UCX_NET_DEVICES": "all", "UCX_TLS": "rc_x,cuda"}, "must name HCA ports"),
    ({"UCX_NET_DEVICES": "eth0", "UCX_TLS": "rc_x,cuda"}, "network interfaces"),
])
def test_rdma_transport_refuses_and_names_gpu_and_host(env, msg):
    errors = kvcr.rdma_transport_errors("gpu-b", ["0"], {"0": env})
    assert len(errors) == 1 and msg in errors[0] and "kvcr_allow_non_rdma_transport=true" in errors[0]


def test_rdma_transport_needs_a_gpu():
    assert "names no GPU" in kvcr.rdma_transport_errors("gpu-b", [], {})[0]


def test_pool_limit_matches_the_service_allocation():
    # the sandbox's 0.125 GB pool: 128 MiB + 100 MiB journal = the file size the service creates
    assert kvcr.pool_bytes(1, [0.125]) == 239075328
    assert kvcr.pool_bytes(1, "2") == 2 * 1024 ** 3 + 100 * 1024 ** 2
    assert kvcr.pool_limit_error(1, [2], 3) == ""
    assert "more than kvcr_service_pool_limit_gb=3" in kvcr.pool_limit_error(1, [3], 3)
    assert "2 Guard(s)" in kvcr.pool_limit_error(2, [1.5], 3)


# ---------------------------------------------------------------- rc_mlx5 across the resend

def test_rc_mlx5_count_rises_on_both_sides():
    counts = {"source gpu-a kvcr-service.service": (kvcr.transport_count(fixture("ucx_source_before.txt")),
                                                    kvcr.transport_count(fixture("ucx_source_after.txt"))),
              "target gpu-b dynamo-worker@kvcr.service": (kvcr.transport_count(fixture("ucx_target_before.txt")),
                                                          kvcr.transport_count(fixture("ucx_target_after.txt")))}
    assert counts["source gpu-a kvcr-service.service"] == (2, 4)
    assert kvcr.transport_rise_errors(counts) == []


def test_rc_mlx5_seen_only_before_the_resend_is_no_proof():
    # the old greps passed on this: rc_mlx5 is in the journal, but the resend went over TCP
    before = kvcr.transport_count(fixture("ucx_target_before.txt"))
    after = kvcr.transport_count(fixture("ucx_target_after_tcp.txt"))
    assert before == after == 2
    errors = kvcr.transport_rise_errors({"target gpu-b": (before, after), "source gpu-a": (2, 4)})
    assert errors == ["target gpu-b: rc_mlx5 count did not rise across the resend (2 -> 2): UCX chose no RC "
                      "transport for it (UCX_PROTO_INFO=y must be set)"]
    assert "unreadable" in kvcr.transport_rise_errors({"s": (None, 3)})[0]


def test_transport_count_is_word_bounded():
    assert kvcr.transport_count("rc_mlx5/mlx5_0:1 rc_mlx5x xrc_mlx5 rc_mlx5") == 2


# ---------------------------------------------------------------- cgroup layouts

@pytest.mark.parametrize("sub", ["", "unified", "systemd"])
def test_unit_cgroup_dirs_finds_v2_and_hybrid_layouts(tmp_path, sub):
    cg = tmp_path / sub / "system.slice" / "dynamo-worker@kvcr.service"
    cg.mkdir(parents=True)
    (cg / "cgroup.procs").write_text("12\n")
    assert kvcr.unit_cgroup_dirs(str(tmp_path), "/system.slice/dynamo-worker@kvcr.service") == [str(cg).replace("//", "/")]
    assert kvcr.unit_cgroup_dirs(str(tmp_path), "") == []


def test_settings_that_must_agree_across_kvcr_hosts():
    """Each host reads its own copy (issue 34): a per-host kvcr_cache_slot_count that differs is refused,
    naming every host with its value; 2 and "2" are one value."""
    same = {"kvcr_variant": "memory_service", "kvcr_cache_slot_count": 2, "kvcr_hash_seed": 0, "--block-size": 64}
    assert kvcr.agreement_errors([("gpu-a", same), ("gpu-b", dict(same, kvcr_cache_slot_count="2"))]) == []
    assert kvcr.agreement_errors([("gpu-a", same), ("gpu-b", dict(same, kvcr_cache_slot_count=3))]) == [
        "kvcr_cache_slot_count differs between the KVCR hosts: 2 on gpu-a, 3 on gpu-b. Every host of group kvcr needs "
        "one value: every worker's KVCR_CACHE_SLOT_COUNT and the state agent's slots; set it once, in the group's "
        "variables"]
    errs = kvcr.agreement_errors([("a", same), ("b", dict(same, kvcr_hash_seed=1, **{"--block-size": 16})),
                                  ("c", dict(same, kvcr_compatibility_digest=""))], group="kv")
    assert [e.split(" differs")[0] for e in errs] == ["kvcr_hash_seed", "the KVCR workers' vLLM --block-size"]
    assert "0 on a, 1 on b, 0 on c" in errs[0] and "Every host of group kv needs" in errs[0]
    assert errs[1].startswith("the KVCR workers' vLLM --block-size differs between the KVCR hosts: 64 on a, 16 on b, 64 on c")
    # a host without the setting (no KVCR worker) is left to the worker checks
    assert kvcr.agreement_errors([("a", {"--block-size": 64}), ("b", {})]) == []
    assert kvcr.agreement_errors([("a", {"kvcr_compatibility_digest": "x"}), ("b", {"kvcr_compatibility_digest": ""})]) == [
        "kvcr_compatibility_digest differs between the KVCR hosts: x on a, '' on b. Every host of group kvcr needs one "
        "value: a memory service refuses claims from engines with another digest; set it once, in the group's variables"]


def test_agreed_settings_are_role_variables_with_defaults():
    """Every agreed kvcr_* setting has its default mirrored in HOST_DEFAULTS (the filter reads unset ones there)."""
    keys = [k for k, dummy in kvcr.AGREED_SETTINGS]
    assert keys[-1] == "--block-size" and all(k in kvcr.HOST_DEFAULTS for k in keys[:-1])


def test_agreement_filter_reads_defaults_and_the_workers_block_size():
    from ansible_collections.kvshare.dynamo.plugins.filter import kvcr as filters
    worker = {"name": "kvcr", "engine": "vllm", "model": "m", "extra_args": ["--block-size", "64"]}
    hostvars = {"a": {"dynamo_workers": [worker]},
                "b": {"dynamo_workers": [dict(worker, extra_args=[])], "kvcr_cache_slot_count": 2}}
    errs = filters.kvcr_agreement_errors(["a", "b"], hostvars)
    assert errs == [e for e in errs if "--block-size differs" in e] and "64 on a, 16 on b" in errs[0]
    hostvars["b"]["kvcr_cache_slot_count"] = 4
    assert "kvcr_cache_slot_count differs between the KVCR hosts: 2 on a, 4 on b" in filters.kvcr_agreement_errors(
        ["a", "b"], hostvars)[0]


# ---------------------------------------------------------------- HCA locality, link layer, memlock (issue 35)

import importlib.util  # noqa: E402
import json  # noqa: E402

from ansible_collections.kvshare.dynamo.plugins.filter import kvcr as kvcr_filters  # noqa: E402
from ansible_collections.kvshare.dynamo.plugins.module_utils import topology  # noqa: E402

TOPOLOGY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")
RDMA_UCX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "rdma_ucx")
_build_spec = importlib.util.spec_from_file_location("build_sysfs", os.path.join(TOPOLOGY, "build_sysfs.py"))
build_sysfs = importlib.util.module_from_spec(_build_spec)
_build_spec.loader.exec_module(build_sysfs)


def captured_plan(tmp_path, case, overrides=None):
    """rdma_ucx's per-GPU plan of a captured topology, as its preflight builds it (discover + gpu_plan)."""
    root, query, topo = build_sysfs.build_case(case, str(tmp_path / case))
    return topology.gpu_plan(topology.discover(root, query, topo, hca_overrides=overrides), overrides)


def test_hca_gpu_local_infiniband_ports_pass(tmp_path):
    plan = captured_plan(tmp_path, "dgx_h100")           # PIX for GPUs 0-6, PXB for GPU 7, all NDR InfiniBand
    assert kvcr.hca_errors("gpu-a", [str(g["index"]) for g in plan], plan) == []
    # an override naming the discovered port keeps its path facts
    plan = captured_plan(tmp_path, "dgx_h100", {"7": "mlx5_11:1"})
    assert [g["source"] for g in plan if g["index"] == 7] == ["override"]
    assert kvcr.hca_errors("gpu-a", ["7"], plan) == []


def test_hca_not_gpu_local_is_refused_naming_host_gpu_and_variable(tmp_path):
    plan = captured_plan(tmp_path, "two_socket")         # NODE, PHB, NODE, NODE: no GPU-local HCA at all
    errors = kvcr.hca_errors("gpu-b", ["2"], plan)
    assert errors == ["GPU 2 on gpu-b: HCA port mlx5_0:1 (discovered by rdma_ucx) is not GPU-local: PCIe path NODE, "
                      "KVCR requires PIX or PXB; " + kvcr._HCA_HINT]
    assert "rdma_ucx_hca_overrides" in errors[0] and "kvcr_allow_non_rdma_transport=true" in errors[0]
    errors = kvcr.hca_errors("gpu-b", ["1"], plan)        # PHB, and bnxt_re0 is Ethernet on a non-mlx5 HCA
    assert len(errors) == 2
    assert errors[0].startswith("GPU 1 on gpu-b: HCA port bnxt_re0:1 (discovered by rdma_ucx) is not GPU-local: "
                                "PCIe path PHB")
    assert errors[1].startswith("GPU 1 on gpu-b: HCA port bnxt_re0:1 (discovered by rdma_ucx) is Ethernet on a "
                                "non-mlx5 HCA")
    # the topology only warns (rdma_ucx serves other workers too): KVCR is where it becomes an error
    assert any("worse than PXB" in w for w in topology.discover(*build_sysfs.build_case(
        "two_socket", str(tmp_path / "again")))["warnings"])


def test_hca_override_to_a_remote_port_is_refused(tmp_path):
    # mlx5_7 is an Ethernet (RoCE) port of an mlx5 HCA: the link layer fits, but it sits across the sockets from
    # GPU 0 (SYS); an operator's pin does not make a port GPU-local
    plan = captured_plan(tmp_path, "dgx_h100", {"0": "mlx5_7:1"})
    errors = kvcr.hca_errors("gpu-a", ["0"], plan)
    assert errors == ["GPU 0 on gpu-a: HCA port mlx5_7:1 (rdma_ucx_hca_overrides[0]) is not GPU-local: PCIe path "
                      "SYS, KVCR requires PIX or PXB; " + kvcr._HCA_HINT]
    # a pin the discovery did not resolve (no path known) is refused too
    root, query, topo = build_sysfs.build_case("dgx_h100", str(tmp_path / "unresolved"))
    plan = topology.gpu_plan(topology.discover(root, query, topo), {"0": "mlx5_7:1"})
    assert "PCIe path unknown (not in the discovered topology)" in kvcr.hca_errors("gpu-a", ["0"], plan)[0]


def test_hca_link_layer_rules():
    base = {"index": 0, "hca": "mlx5_0", "ucx_net_devices": "mlx5_0:1", "path_class": "PIX", "source": "discovered"}
    assert kvcr.hca_errors("h", ["0"], [dict(base, link_layer="InfiniBand", hca_is_mlx5=True)]) == []
    assert kvcr.hca_errors("h", ["0"], [dict(base, link_layer="Ethernet", hca_is_mlx5=True)]) == []   # RoCE
    assert "non-mlx5" in kvcr.hca_errors("h", ["0"], [dict(base, link_layer="Ethernet", hca_is_mlx5=False)])[0]
    assert "link layer unknown" in kvcr.hca_errors("h", ["0"], [dict(base, link_layer=None, hca_is_mlx5=True)])[0]
    # GPUs without a plan entry or an HCA are rdma_transport_errors' to report
    assert kvcr.hca_errors("h", ["1"], [dict(base, link_layer="InfiniBand")]) == []
    assert kvcr.hca_errors("h", ["0"], [dict(base, hca=None, link_layer=None)]) == []
    # through the filter the role calls (plan | kvcr_hca_errors(host, gpus)), GPU indexes as ints
    assert kvcr_filters.kvcr_hca_errors([dict(base, path_class="SYS", link_layer="InfiniBand")], "h", [0])[0] \
        .startswith("GPU 0 on h: HCA port mlx5_0:1 (discovered by rdma_ucx) is not GPU-local: PCIe path SYS")


def _captured_memlock_values():
    with open(os.path.join(RDMA_UCX, "verify_report_cases.json")) as handle:
        text = handle.read()
    return sorted(set(re.findall(r'"LimitMEMLOCK": "([^"]*)"', text)))


def test_memlock_values_systemd_reports():
    # the values systemctl show reported in the captured rdma_ucx verify cases
    assert _captured_memlock_values() == ["18446744073709551615", "8388608", "infinity"]
    assert kvcr.memlock_bytes("infinity") is None and kvcr.memlock_bytes("18446744073709551615") is None
    assert kvcr.memlock_bytes("8388608") == 8388608 and kvcr.memlock_bytes("8M") == 8388608
    assert kvcr.memlock_bytes("4G") == 4 * 1024 ** 3
    with pytest.raises(ValueError):
        kvcr.memlock_bytes("lots")


def test_memlock_errors_from_systemctl_show():
    needs = {"kvcr-service.service": {"need": {"guard_count": "1", "pool_sizes_gb": [2]},
                                      "what": "the memory service's pools"},
             "dynamo-worker@kvcr.service": {"need": 2147483648, "what": "the KVCR worker's CPU buffer (kvcr_cpu_bytes) of GPU(s) 0"}}

    def shown(service, worker):
        return [{"item": "kvcr-service.service", "stdout": service}, {"item": "dynamo-worker@kvcr.service", "stdout": worker}]

    loaded_inf = "LimitMEMLOCK=infinity\nLoadState=loaded"
    assert kvcr_filters.kvcr_memlock_errors(shown(loaded_inf, "LoadState=loaded\nLimitMEMLOCK=18446744073709551615"),
                                            "gpu-a", needs) == []
    # first run: the units are not installed yet, nothing to judge
    assert kvcr_filters.kvcr_memlock_errors(shown("LimitMEMLOCK=8388608\nLoadState=not-found",
                                                  "LimitMEMLOCK=8388608\nLoadState=not-found"), "gpu-a", needs) == []
    errors = kvcr_filters.kvcr_memlock_errors(shown("LimitMEMLOCK=8388608\nLoadState=loaded", loaded_inf), "gpu-a", needs)
    assert errors == ["kvcr-service.service on gpu-a: LimitMEMLOCK=8388608 bytes is below the %d bytes the memory "
                      "service's pools pins for RDMA; it must be infinity, as the roles render it (a drop-in or an "
                      "override lowered it)" % (100 * 1024 ** 2 + 2 * 1024 ** 3)]
    errors = kvcr_filters.kvcr_memlock_errors(shown(loaded_inf, "LimitMEMLOCK=1073741824\nLoadState=loaded"), "gpu-a", needs)
    assert len(errors) == 1 and errors[0].startswith("dynamo-worker@kvcr.service on gpu-a: LimitMEMLOCK=1073741824")
    assert "kvcr_cpu_bytes) of GPU(s) 0" in errors[0]
    # a limit as large as the need is enough
    assert kvcr_filters.kvcr_memlock_errors([{"unit": "u", "limit": "3G"}], "h", {"u": {"need": 3 * 1024 ** 3}}) == []


def test_preflight_wires_the_hca_device_and_memlock_checks():
    import yaml
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvcr", "tasks",
                           "preflight.yml")) as handle:
        tasks = dict((t["name"], t) for t in yaml.safe_load(handle))
    hca = tasks["Check that the KVCR worker's GPUs have a GPU-local InfiniBand/RoCE HCA port (PIX/PXB)"]
    assert "kvshare.dynamo.kvcr_hca_errors" in json.dumps(hca)
    assert {"not kvcr_allow_non_rdma_transport | bool", "kvcr_require_hardware | bool"} <= set(hca["when"])
    find = tasks["Find the RDMA verbs devices (/dev/infiniband/uverbs*)"]
    assert find["ansible.builtin.find"]["paths"] == "{{ __kvcr_uverbs_dir }}" and find["ansible.builtin.find"]["patterns"] == "uverbs*"
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvcr", "defaults",
                           "main.yml")) as handle:
        assert yaml.safe_load(handle)["__kvcr_uverbs_dir"] == "/dev/infiniband"
    assert "kvcr_require_hardware | bool" in find["when"]
    assert "not (kvshare_validate_offline | default(false) | bool)" in find["when"]
    show = tasks["Read the memlock limit systemd gives the installed KVCR units"]
    assert show["when"] == find["when"] and show["check_mode"] is False
