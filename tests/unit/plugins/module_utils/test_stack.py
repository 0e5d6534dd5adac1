# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils/stack.py: the one address fallback and the frontend URL."""
from ansible_collections.kvshare.dynamo.plugins.filter import stack as filters
from ansible_collections.kvshare.dynamo.plugins.filter.internal import stack as internal_filters
from ansible_collections.kvshare.dynamo.plugins.module_utils import stack
from lib.sandbox import service_defaults

SERVICE_DEFAULTS = service_defaults()


def test_address_order():
    facts = {"default_ipv4": {"address": "127.0.0.9"}}
    assert stack.address_of({"kvshare_bind_address": "127.0.0.1", "ansible_facts": facts, "ansible_host": "h"}, "n") == "127.0.0.1"
    assert stack.address_of({"ansible_facts": facts, "ansible_host": "h"}, "n") == "127.0.0.9"
    assert stack.address_of({"ansible_default_ipv4": {"address": "127.0.0.8"}, "ansible_host": "h"}, "n") == "127.0.0.8"
    assert stack.address_of({"ansible_host": "127.0.0.7"}, "n") == "127.0.0.7"
    assert stack.address_of({}, "n") == "n"
    assert stack.address_of({"kvshare_bind_address": "", "ansible_host": None}, "n") == "n"


def test_bind_address_is_the_first_two_steps():
    assert stack.bind_address_of({"ansible_host": "127.0.0.7"}) is None
    assert stack.bind_address_of({"kvshare_bind_address": " 127.0.0.2 "}) == "127.0.0.2"
    assert stack.bind_address_of({"ansible_facts": {"default_ipv4": {"address": "127.0.0.9"}}}) == "127.0.0.9"


def test_frontend_url():
    hostvars = {"fe": {"kvshare_bind_address": "127.0.10.1"}, "fe2": {"dynamo_frontend_http_host": "127.0.0.5",
                                                                      "dynamo_frontend_http_port": 9000}}
    assert stack.frontend_url(hostvars, {"dynamo_frontend": ["fe"]}, SERVICE_DEFAULTS) == "http://127.0.10.1:8000"
    assert stack.frontend_url(hostvars, {"dynamo_frontend": ["fe2", "fe"]}, SERVICE_DEFAULTS) == "http://127.0.0.5:9000"
    assert stack.frontend_url(hostvars, {"dynamo_frontend": []}, SERVICE_DEFAULTS) == ""
    assert stack.frontend_url(hostvars, {}, SERVICE_DEFAULTS) == ""
    assert filters.frontend_url({"dynamo_frontend": ["fe"]}, hostvars, SERVICE_DEFAULTS) == "http://127.0.10.1:8000"
    assert filters.host_address("fe", hostvars) == "127.0.10.1"
    assert filters.host_address("unknown", hostvars) == "unknown"


def test_worker_system_url():
    assert stack.worker_system_url({"h": {"kvshare_bind_address": "127.0.0.3"}}, "h", 18081) == "http://127.0.0.3:18081"
    assert stack.worker_system_url({"h": {"ansible_host": "127.0.0.4"}}, "h", 9090) == "http://127.0.0.4:9090"


def test_one_frontend_only():
    """The docs say one frontend; everything probes the first: a second is refused, naming the hosts."""
    assert stack.frontend_group_errors({"dynamo_frontend": ["fe"]}) == []
    assert stack.frontend_group_errors({"dynamo_frontend": []}) == []
    assert stack.frontend_group_errors({}) == []
    assert stack.frontend_group_errors({"dynamo_frontend": ["fe", "fe2", "fe3"]}) == [
        "group dynamo_frontend has 3 hosts (fe, fe2, fe3): a deployment has one frontend. The workers' readiness "
        "probes, verify.yml, status.yml and the frontend URL use the first, fe, only: fe2, fe3 would be started "
        "but never proven ready, nor used. Keep one host in dynamo_frontend"]
    assert internal_filters.frontend_group_errors({"fe_group": ["a", "b"]}, "fe_group")[0].startswith("group fe_group has 2 hosts (a, b)")
    assert internal_filters.frontend_group_errors({"dynamo_frontend": ["a", "b"]})[0].startswith("group dynamo_frontend has 2")


def test_default_ipv4_address_and_the_variables_bind_address_of_reads():
    """The fast re-run's peer digest reads the fact here; callers that pick a host's variables for
    bind_address_of pick BIND_ADDRESS_VARIABLES, so the fact's name is written in stack.py alone."""
    assert stack.default_ipv4_address({"default_ipv4": {"address": "127.0.0.5"}}) == "127.0.0.5"
    assert stack.default_ipv4_address({"default_ipv4": {}}) is None
    assert stack.default_ipv4_address({}) is None and stack.default_ipv4_address(None) is None
    host_vars = {"ansible_facts": {"default_ipv4": {"address": "127.0.0.6"}}, "ansible_host": "127.0.0.7", "other": 1}
    picked = dict((k, host_vars.get(k)) for k in stack.BIND_ADDRESS_VARIABLES)
    assert stack.bind_address_of(picked) == stack.bind_address_of(host_vars) == "127.0.0.6"
    assert stack.bind_address_of({"ansible_default_ipv4": {"address": "127.0.0.8"}}) == "127.0.0.8"
    assert "ansible_default_ipv4" in stack.BIND_ADDRESS_VARIABLES


def test_etcd_client_urls_take_the_port_from_the_contract():
    """A member's export wins, then its own etcd_address and port, then its address and the
    contract's client port (changed here: no 2379 may come from anywhere else)."""
    from ansible_collections.kvshare.dynamo.plugins.filter.etcd import etcd_client_urls
    hostvars = {"e1": {"kvshare_bind_address": "127.0.10.1"},
                "e2": {"kvshare_bind_address": "127.0.10.2", "etcd_client_port": 2479},
                "e3": {"etcd_member": {"client_url": "https://127.0.10.3:3379"}},
                "e4": {"etcd_address": "127.0.10.9"}}
    contract = dict(SERVICE_DEFAULTS, etcd_client_port=12379)
    assert etcd_client_urls(["e1", "e2", "e3", "e4"], hostvars, contract) == [
        "https://127.0.10.1:12379", "https://127.0.10.2:2479", "https://127.0.10.3:3379", "https://127.0.10.9:12379"]
    assert etcd_client_urls(["e1"], hostvars, SERVICE_DEFAULTS, False) == ["http://127.0.10.1:2379"]
