# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""packages_missing against real dpkg-query output, captured on a sandbox host (Debian 12)."""
import shutil
import subprocess

import pytest

from ansible_collections.kvshare.dynamo.plugins.filter.internal import packages as f

# dpkg-query -W -f='${db:Status-Abbrev}${Package}|' -- etcd-server etcd-client haproxy libfoo
# (libfoo unknown: dpkg-query names it on stderr and exits 1; haproxy removed, its config kept)
CAPTURED = "ii etcd-server|ii etcd-client|rc haproxy|"


def test_only_installed_packages_count():
    assert f.packages_missing(CAPTURED, ["etcd-server", "etcd-client"]) == []
    assert f.packages_missing(CAPTURED, ["etcd-server", "haproxy", "libfoo"]) == ["haproxy", "libfoo"]


def test_versions_architectures_and_a_skipped_probe_leave_it_to_the_package_module():
    assert f.packages_missing(CAPTURED, ["etcd-server=3.4.30-1", "etcd-client:amd64"]) == \
        ["etcd-server=3.4.30-1", "etcd-client:amd64"]
    assert f.packages_missing("", ["etcd-server"]) == ["etcd-server"]
    assert f.packages_missing(None, ["etcd-server"]) == ["etcd-server"]
    assert f.packages_missing("ii a\nii b\n", ["a", "b"]) == []


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="no dpkg on this machine")
def test_against_this_machines_dpkg():
    proc = subprocess.run(["dpkg-query", "-W", "-f=" + f.DPKG_FORMAT, "--", "dpkg", "kvshare-no-such-package"],
                          capture_output=True, text=True, check=False)
    assert f.packages_missing(proc.stdout, ["dpkg", "kvshare-no-such-package"]) == ["kvshare-no-such-package"]
