# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""upgrade.yml between two pinned versions (ai-dynamo 1.6.1 -> 1.6.0, then back): a new venv per
set of pins, workers rolled over one at a time under a client loop; the rollback re-uses the old
venv (nothing installed)."""
import os
import re
import time

import d2lib as D

VENV_RE = re.compile(r"/opt/dynamo/venvs/([0-9a-f]{12})/bin/python")


def running_venvs(inv):
    """{"host/unit": venv id} read from the running processes' command lines."""
    out = {}
    units = [(h, "dynamo-worker@%s" % w["name"], key) for key, (h, w) in inv.worker_map().items()]
    units.append((inv.group("dynamo_frontend")[0], "dynamo-frontend", "frontend"))
    for host, unit, key in units:
        pid = D.unit_times(host, unit)["pid"]
        cmdline = D.sh(host, "tr '\\0' ' ' </proc/%d/cmdline" % pid)
        match = VENV_RE.search(cmdline)
        assert match, (unit, cmdline)
        out[key] = match.group(1)
    return out


def versions(host, venv):
    return D.sh(host, "/opt/dynamo/venvs/%s/bin/python -c 'import importlib.metadata as m; "
                "print(m.version(\"ai-dynamo\"), m.version(\"ai-dynamo-runtime\"))'" % venv).split()


def task_changed(stdout, name):
    """Hosts reported changed by the task whose name contains `name`."""
    changed = set()
    for block in stdout.split("\nTASK [")[1:]:
        if name in block.split("]", 1)[0]:
            changed |= set(re.findall(r"^changed: \[([^\]]+)\]", block, re.M))
    return changed


def _roll(inv, record, label, *args):
    loop = D.ClientLoop(inv)
    before_units = D.worker_units(inv)
    fe = inv.group("dynamo_frontend")[0]
    loop.start()
    time.sleep(2)
    res, took = D.playbook("playbooks/upgrade.yml", *args, log="upgrade-" + label, timeout=1800)
    time.sleep(2)
    loop.stop()
    D.must(res, "upgrade.yml (%s)" % label)
    after_units = D.worker_units(inv)
    windows = D.restart_windows(loop, before_units, after_units)
    fe_times = D.unit_times(fe, "dynamo-frontend")
    fe_back = min([r["t1"] for r in loop.requests if r["status"] == 200 and r["t0"] >= fe_times["enter"]] or [time.monotonic()])
    fe_window = (fe_times["exit"], fe_back)
    for key in inv.worker_map():
        windows.setdefault(key, []).append(fe_window)
    outside, inside = loop.failures(windows)
    workers_phase = min((w[0][0] for k, w in windows.items() if len(w) > 1), default=fe_back)
    figures = {"requests": len(loop.requests), "failed_outside_restart": len(outside),
               "failed_restarting_or_frontend_restart": len(inside), "seconds": round(took, 1),
               "max_workers_down_at_once_after_frontend": loop.max_down(since=max(workers_phase, fe_back))}
    record[label] = figures
    assert outside == [], "%s: failed requests to workers not being restarted: %s" % (label, outside[:5])
    assert figures["max_workers_down_at_once_after_frontend"] <= 1, (label, figures)
    return res


def _host(inv, key):
    return inv.group("dynamo_frontend")[0] if key == "frontend" else key.split("/")[0]


def test_upgrade_and_rollback(stack, record):
    # The frontend host runs no engine: its venv id (a hash of pins + engines) differs from the
    # workers'; each process is followed on its own.
    inv = D.Inv()
    inv.wait_all_serving()
    old = running_venvs(inv)
    for key, venv in old.items():
        assert versions(_host(inv, key), venv) == ["1.6.1", "1.6.1"], key

    hosts = sorted(set(_host(inv, k) for k in old))
    venvs_before = dict((h, set(D.sh(h, "ls /opt/dynamo/venvs").split())) for h in hosts)
    res = _roll(inv, record, "to-1.6.0", "-e", "@" + os.path.join(D.PINS_DIR, "dynamo-1.6.0.yml"))
    new = running_venvs(inv)
    for key, venv in new.items():
        assert venv != old[key], "%s still runs venv %s" % (key, venv)
        assert versions(_host(inv, key), venv) == ["1.6.0", "1.6.0"], key
        D.sh(_host(inv, key), "test -x /opt/dynamo/venvs/%s/bin/python" % old[key])  # the old venv is kept
    # Installed where that venv did not exist yet (a reused copy may keep it from an earlier run).
    fresh = set(h for h in hosts if not set(v for k, v in new.items() if _host(inv, k) == h) <= venvs_before[h])
    assert task_changed(res.stdout, "Install the pinned packages") == fresh
    record["installed_on"] = sorted(fresh)
    inv.wait_all_serving()

    res = _roll(inv, record, "rollback-1.6.1")
    back = running_venvs(inv)
    assert back == old, (back, old)
    assert task_changed(res.stdout, "Install the pinned packages") == set(), "the rollback re-installed"
    assert set(inv.wait_all_serving()) == set(inv.worker_map())
    record.update({"venvs_1.6.1": sorted(set(old.values())), "venvs_1.6.0": sorted(set(new.values()))})
