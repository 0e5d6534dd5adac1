# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""etcd: a 3-member TLS cluster, healthy from every member, secured files, shared keyspace."""
import pytest

from conftest import address, group

ETCDCTL = "set -a; . /etc/etcd/etcdctl.env; set +a; etcdctl "
# etcdctl refuses --endpoints next to ETCDCTL_ENDPOINTS: override the variable instead.
ETCDCTL_AT = "set -a; . /etc/etcd/etcdctl.env; set +a; ETCDCTL_ENDPOINTS=https://%s:2379 etcdctl "


@pytest.mark.parametrize("member", group("etcd"))
def test_cluster_healthy_over_tls_from_each_member(hosts, member):
    out = hosts[member].check_output(ETCDCTL + "endpoint health --cluster 2>&1")
    healthy = [line for line in out.splitlines() if "is healthy" in line]
    assert len(healthy) == len(group("etcd")), out
    assert all(line.startswith("https://") for line in healthy), out


@pytest.mark.parametrize("member", group("etcd"))
def test_member_listens_on_its_own_address_only(hosts, member):
    host = hosts[member]
    assert host.socket("tcp://%s:2379" % address(member)).is_listening
    assert host.socket("tcp://%s:2380" % address(member)).is_listening
    assert not host.socket("tcp://0.0.0.0:2379").is_listening
    assert host.service("etcd").is_running and host.service("etcd").is_enabled


@pytest.mark.parametrize("member", group("etcd"))
def test_member_secrets_are_private(hosts, member):
    key = hosts[member].file("/etc/etcd/pki/member-key.pem")
    assert key.user == "etcd" and key.mode == 0o600
    assert hosts[member].process.filter(comm="etcd")[0].user == "etcd"


def test_plaintext_and_certless_clients_are_refused(hosts):
    host = hosts[group("etcd")[0]]
    url = "https://%s:2379" % address(group("etcd")[0])
    no_cert = host.run("etcdctl --endpoints=%s --cacert=/etc/etcd/pki/ca.pem --dial-timeout=2s get x" % url)
    assert no_cert.rc != 0
    plain = host.run("etcdctl --endpoints=http://%s:2379 --dial-timeout=2s get x" % address(group("etcd")[0]))
    assert plain.rc != 0


def test_key_written_through_one_member_is_read_through_another(hosts):
    first, second = group("etcd")[0], group("etcd")[1]
    hosts[first].check_output(ETCDCTL_AT % address(first) + "put kvshare/test/written-on %s" % first)
    got = hosts[second].check_output(ETCDCTL_AT % address(second) + "get --print-value-only kvshare/test/written-on")
    assert got.strip() == first


@pytest.mark.parametrize("host", group("dynamo"))
def test_dynamo_hosts_hold_client_credentials_privately(hosts, host):
    env = hosts[host].file("/etc/kvshare/etcd/client.env")
    assert env.user == "root" and env.mode == 0o600
    assert "BEGIN" in env.content_string and "ETCD_ENDPOINTS=https://" in env.content_string
    # Dynamo reaches etcd through this host's client proxy (docs/etcd.md), which is up.
    assert "ETCD_ENDPOINTS=https://%s:23790\n" % address(host) in env.content_string
    assert hosts[host].service("etcd-client-proxy").is_running
    assert hosts[host].service("etcd-client-proxy").is_enabled
