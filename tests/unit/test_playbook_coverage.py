# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Every playbook in playbooks/ is run by some test (tests/playbook_coverage.py prints the table in CI)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import playbook_coverage as pc  # noqa: E402


def test_every_playbook_has_a_test():
    rows = pc.table()
    assert len(rows) == len(pc.playbooks()) >= 13
    missing = [name for name, direct, _parents, via in rows if not (direct or via)]
    assert missing == [], "playbooks no test runs: %s" % missing


def test_site_and_verify_run_on_sandbox_hosts_in_ci():
    rows = {name: direct + via for name, direct, _p, via in pc.table()}
    for name in ("site", "verify"):
        assert any(suite == "molecule" for suite, _w, _x, _f in rows[name]), rows[name]
