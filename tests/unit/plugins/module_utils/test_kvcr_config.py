# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr_config: cache identity, the rendered worker config and environment, the memory service's argv."""
import os
import re

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config
from lib.sandbox import service_defaults

CONTRACT = service_defaults()

PREFIX = "01010101010101010101010101010101:02020202020202020202020202020202/0303030303030303"
# ai-dynamo 1.6.1 dynamo/vllm/state_agent.py _CACHE_OWNER_PATTERN
DYNAMO_OWNER_RE = re.compile(r"^(?P<domain>[0-9a-f]{32}:[0-9a-f]{32})/[0-9a-f]{16}/[0-9a-f]{32}$")


# ---------------------------------------------------------------- identity

def test_owner_id_matches_seed_and_dynamo_pattern():
    assert kvcr_config.cache_owner_id(0, 2, PREFIX) == PREFIX + "/" + "0" * 32
    assert kvcr_config.cache_owner_id("1", 2, PREFIX).endswith("/" + "0" * 31 + "1")
    assert kvcr_config.cache_owner_id(17, 32, PREFIX).endswith("/%032x" % 17)
    assert DYNAMO_OWNER_RE.match(kvcr_config.cache_owner_id(1, 2, PREFIX))


@pytest.mark.parametrize("slot,count,msg", [
    (2, 2, "outside [0, 2)"), (-1, 2, "decimal integer"), ("", 2, "decimal integer"), (True, 2, "decimal integer"),
    ("1.0", 2, "decimal integer"), (0, 0, "positive"), (0, "x", "positive"),
])
def test_owner_id_refuses_bad_slots(slot, count, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        kvcr_config.cache_owner_id(slot, count, PREFIX)


def test_owner_id_refuses_bad_prefix():
    with pytest.raises(ValueError, match="prefix"):
        kvcr_config.cache_owner_id(0, 2, "0101:0202/03")


# ---------------------------------------------------------------- rendered config

OPTS = {"owner_prefix": PREFIX, "cpu_bytes": 2147483648, "control_port": 23280, "socket_path": "/run/kvcr/memory.sock",
        "compatibility_digest": "qwen3-0.6b-example-v1", "secondary_g2_slots": 1024, "enable_telemetry": True}


def test_memory_service_config_matches_seed_shape():
    cfg = kvcr_config.kv_transfer_config("memory_service", 1, 2, "10.0.1.12", OPTS)
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
    tier = kvcr_config.kv_transfer_config("process_local", 0, 2, "10.0.1.11", OPTS)["kv_connector_extra_config"]["secondary_tiers"][0]
    # vLLM 0.31.0 tiering/kvcr: socket path and digest come together or not at all
    assert "kvcr_service_socket_path" not in tier and "compatibility_digest" not in tier
    assert tier["secondary_g2_slots"] == 1024


def test_config_refuses_bad_slot_and_variant():
    with pytest.raises(ValueError, match="outside"):
        kvcr_config.kv_transfer_config("memory_service", 5, 2, "10.0.1.12", OPTS)
    with pytest.raises(ValueError, match="unknown KVCR variant"):
        kvcr_config.kv_transfer_config("sidecar", 0, 2, "10.0.1.12", OPTS)


def test_worker_env_and_service_argv():
    assert kvcr_config.worker_env(1, 2, 0) == {"KVCR_CACHE_SLOT": "1", "KVCR_CACHE_SLOT_COUNT": "2", "PYTHONHASHSEED": "0"}
    assert kvcr_config.worker_env(0, 2, 0, True)["UCX_PROTO_INFO"] == "y"
    argv = kvcr_config.service_argv("/opt/v/bin/python", {"socket_path": "/run/kvcr/memory.sock", "pool_dir": "/dev/shm/kvcr",
                                                          "guard_count": 1, "pool_sizes_gb": [2, 0.5], "compatibility_digest": "d",
                                                          "heartbeat_timeout_ms": 0, "log_level": "info"})
    assert argv == ["/opt/v/bin/python", "-m", "kvcr.kvcr_service", "--socket-path", "/run/kvcr/memory.sock",
                    "--pool-dir", "/dev/shm/kvcr", "--guard-count", "1", "--pool-sizes-gb", "2,0.5",
                    "--compatibility-digest", "d", "--log-level", "INFO"]
    assert "--heartbeat-timeout-ms" in kvcr_config.service_argv("p", {"socket_path": "s", "pool_dir": "d", "pool_sizes_gb": "1",
                                                                      "compatibility_digest": "x", "heartbeat_timeout_ms": 1500})


# ---------------------------------------------------------------- settings without the preflight

ROLE_DEFAULTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvcr", "defaults", "main.yml")


def test_the_role_reads_its_worker_facing_defaults_from_the_contract():
    """Each kvcr_* setting a worker derives has one home, the contract: the role's default reads it."""
    import yaml
    with open(ROLE_DEFAULTS) as handle:
        defaults = yaml.safe_load(handle)
    for key in kvcr_config.HOST_KEYS:
        assert key in CONTRACT, key
        assert defaults[key] == "{{ kvshare_service_defaults.%s }}" % key, key


def test_host_worker_settings_match_what_the_preflight_exports():
    hv = {"kvcr_cache_slot": 1, "kvshare_bind_address": "10.0.1.12", "kvcr_compatibility_digest": "d-1",
          "kvcr_ucx_proto_info": True}
    got = kvcr_config.host_worker_settings(hv, CONTRACT)
    options = {"owner_prefix": PREFIX, "cpu_bytes": 2147483648, "control_port": 23280, "socket_path": "/run/kvcr/memory.sock",
               "compatibility_digest": "d-1", "secondary_g2_slots": 1024, "enable_telemetry": True}
    assert got["kv_transfer_config"] == kvcr_config.kv_transfer_config("memory_service", 1, 2, "10.0.1.12", options)
    assert got["env"] == {"KVCR_CACHE_SLOT": "1", "KVCR_CACHE_SLOT_COUNT": "2", "PYTHONHASHSEED": "0", "UCX_PROTO_INFO": "y"}
    assert got["extra_args"] == ["--kv-events-config", '{"enable_kv_cache_events":true,"endpoint":"tcp://*:23080",'
                                 '"publisher":"zmq","topic":"kv-events"}']
    # explicit advertise host wins; gathered facts are the last resort
    hv2 = {"kvcr_cache_slot": 0, "ansible_facts": {"default_ipv4": {"address": "10.9.9.9"}}}
    tier = kvcr_config.host_worker_settings(hv2, CONTRACT)["kv_transfer_config"]["kv_connector_extra_config"]["secondary_tiers"][0]
    assert tier["control_advertise_host"] == "10.9.9.9"
    with pytest.raises(ValueError, match="default IPv4"):
        kvcr_config.host_worker_settings({"kvcr_cache_slot": 0}, CONTRACT)
