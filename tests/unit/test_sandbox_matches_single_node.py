# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The sandbox's Maru host is inventories/single_node's host plus the forced overrides, and no more.

Both hosts (sandbox sb2, single_node gpu-node-1) are rendered the way site.yml writes them (worker
unit, each worker's environment and command-line drop-in with its connector JSON, the Maru units),
offline by tests/unit/render_lib.py (the same render as the golden test): nothing is installed or started. Every difference, after each
host's addresses and name are put in neutral form, is reduced to a key (`env:NAME`, `unit:Key`,
`argv:--flag`, `connector:key`) and must be listed under `keys` in `sandbox_forced_overrides`
(inventories/sandbox/host_vars/sb2.yml); every listed key must really differ, so the list
cannot go stale.
"""
import json
import os
import re
import shlex

import pytest
import yaml

import render_lib

REPO = render_lib.REPO
pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
UNITS = "/etc/systemd/system/"
VENV = re.compile(r"/opt/dynamo/venvs/[0-9a-f]{12}")


def _short_name(path):
    """The worker's and the Maru pool's files under the names the keys use (vllm-a.env, vllm-a-10-exec.conf, ...)."""
    if path.startswith(UNITS + "dynamo-worker@") and path.endswith(".service.d/10-exec.conf"):
        return path[len(UNITS + "dynamo-worker@"):-len(".service.d/10-exec.conf")] + "-10-exec.conf"
    if path == UNITS + "maru-resource-manager.service.d/10-args.conf":
        return "maru-resource-manager-10-args.conf"
    if path in (UNITS + "dynamo-worker@.service", UNITS + "maru-resource-manager.service", UNITS + "maru-server.service"):
        return path[len(UNITS):]
    if "/workers/" in path and path.endswith(".env"):
        return os.path.basename(path)
    return None


def render(rendered_inventory, inventory, host, addresses):
    """The host's worker and Maru files from the session's render (render_lib), in neutral form."""
    files = {}
    for path, text in rendered_inventory(inventory)[host].items():
        name = _short_name(path)
        if name is None:
            continue
        text = VENV.sub("/opt/dynamo/venvs/current", text)
        for addr in addresses:
            text = text.replace(addr, "<ADDR>")
        files[name] = text.replace(host, "<HOST>")
    return dict(sorted(files.items()))


def _line_key(name, line):
    """The key of one differing line: env:NAME, unit:Key (per file), or None for comments."""
    if not line.strip() or line.startswith("#"):
        return []
    key, dummy, value = line.partition("=")
    if name.endswith(".env"):
        return ["env:" + key]
    if key == "ExecStart" and "dynamo." in value:
        return None  # compared argument by argument
    return ["unit:%s:%s" % (re.sub(r"^(vllm-[a-z])-", "", name), key)]


def _argv(text):
    line = next(x for x in text.splitlines() if x.startswith("ExecStart=") and "dynamo." in x)
    return shlex.split(line.partition("=")[2])


def _argv_items(argv):
    """--flag -> value (the connector JSON parsed), in order; bare flags map to True."""
    items, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            items[arg] = json.loads(value) if arg == "--kv-transfer-config" else value
            i += 2
        else:
            items[arg] = True
            i += 1
    return items


def differences(sandbox, single):
    keys = set()
    assert sorted(sandbox) == sorted(single), "different files: %s vs %s" % (sorted(sandbox), sorted(single))
    for name in sandbox:
        a, b = sandbox[name].splitlines(), single[name].splitlines()
        for line in set(a).symmetric_difference(b):
            found = _line_key(name, line)
            if found is not None:
                keys.update(found)
        if name.endswith("-10-exec.conf"):
            ia, ib = _argv_items(_argv(sandbox[name])), _argv_items(_argv(single[name]))
            for flag in set(ia) | set(ib):
                if flag == "--kv-transfer-config" and flag in ia and flag in ib:
                    ca, cb = ia[flag], ib[flag]
                    ea, eb = ca.pop("kv_connector_extra_config", {}), cb.pop("kv_connector_extra_config", {})
                    keys.update("connector:" + k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
                    keys.update("connector:" + k for k in set(ea) | set(eb) if ea.get(k) != eb.get(k))
                elif ia.get(flag) != ib.get(flag):
                    keys.add("argv:" + flag)
    return keys


@pytest.fixture(scope="module")
def rendered(rendered_inventory):
    return (render(rendered_inventory, "sandbox", "sb2", ["127.0.10.2"]),
            render(rendered_inventory, "single_node", "gpu-node-1", ["192.0.2.11", "127.0.0.1"]))


def test_sandbox_pool_host_is_single_node_plus_listed_overrides(rendered):
    sandbox, single = rendered
    assert any(n.endswith("-10-exec.conf") for n in sandbox), sorted(sandbox)
    listed = yaml.safe_load(open(os.path.join(REPO, "inventories", "sandbox", "host_vars", "sb2.yml")))
    found = differences(sandbox, single)
    allowed = {k for item in listed["sandbox_forced_overrides"] for k in item["keys"]}
    assert found - allowed == set(), "differences not listed in sandbox_forced_overrides: %s" % sorted(found - allowed)
    assert allowed - found == set(), "listed overrides that no longer differ: %s" % sorted(allowed - found)
    # Both really run the collection's connector against a Maru server, with the same ordering.
    for files in (sandbox, single):
        exec_conf = files["vllm-b-10-exec.conf"]
        assert "PartOf=maru-server.service" in exec_conf and "-m kvshare_maru_connector wait tcp://<ADDR>:5555" in exec_conf
        cfg = _argv_items(_argv(exec_conf))["--kv-transfer-config"]
        assert cfg["kv_connector"] == "MaruKVConnector" and cfg["kv_connector_module_path"] == "kvshare_maru_connector"


def test_a_new_difference_is_caught(rendered):
    """The comparison is not blind: one more environment variable on the sandbox side is reported."""
    sandbox, single = dict(rendered[0]), rendered[1]
    sandbox["vllm-a.env"] += "EXTRA_KNOB=1\n"
    sandbox["vllm-a-10-exec.conf"] = sandbox["vllm-a-10-exec.conf"].replace("--no-enable-prefix-caching", "--enable-prefix-caching")
    found = differences(sandbox, single)
    assert "env:EXTRA_KNOB" in found
    assert "argv:--enable-prefix-caching" in found
