# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""`site.yml --check` on the converged stack: rc 0 and nothing it would change (the run on fresh
hosts, before converge, is the scenario's `check` step).

Every role's body runs (kvshare_fast_rerun=false): check mode through each task, the path an
operator's `--check` takes after an inventory change. (Molecule's converge passes --skip-tags, so
it records no fast path; without the flag this check would be whole after `molecule converge` and
take the fast path after `./dev.sh sandbox`.)"""
import re

from conftest import ansible_playbook


def test_check_mode_on_the_converged_stack_changes_nothing():
    res = ansible_playbook("site.yml", "--check", "-e", "kvshare_fast_rerun=false", timeout=900)
    out = res.stdout
    assert res.returncode == 0, out[-4000:] + res.stderr[-2000:]
    recap = dict(re.findall(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", out.split("PLAY RECAP", 1)[-1], re.M))
    assert recap and set(recap) >= {"sb1", "sb2", "sb3"}, out[-2000:]
    changed = {h: int(n) for h, n in recap.items() if int(n)}
    assert not changed, "check mode on the converged stack would change %s:\n%s" % (
        changed, "\n".join(line for line in out.splitlines() if line.startswith("changed:"))[-4000:])
