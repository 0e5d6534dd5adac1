# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Same-GPU workers start one at a time at boot: asserted from the rendered units, not byte for byte.

Catches: the ``After=dynamo-worker@<previous>.service`` of a worker's drop-in removed (or pointing at
the wrong worker, or added between workers on different GPUs), and the previous worker's
``ExecStartPost=`` readiness wait removed or aimed at another worker's /health (without it the
previous worker is "active" at once and ``After=`` orders nothing). The golden files
(test_render_golden.py) see such a change too, but a golden refresh accepts it; this test does not.

The units are rendered offline for every host of the shipped inventories (tests/unit/render_lib.py,
the render of the golden test) and for a sandbox copy whose sb3 holds longer and bridged same-GPU
chains. Each worker's unit is read the way systemd reads it: the template unit
(dynamo-worker@.service), then every drop-in (template-wide, dash-prefix and instance directories,
one file per name, in file-name order), multiple and space-separated ``After=``/``Before=``, empty
assignments resetting a list, specifiers (%i). The expected order is derived here from the
inventory's ``dynamo_workers`` (name, gpus) alone: workers that share a GPU, directly or through a
chain of shared GPUs, form one group (plugins/module_utils/workers.py, gpu_groups); inside a group
each worker starts after the one before it in inventory order, as the rollout's start waves do.
Workers of different groups are not ordered against each other, and no worker depends
(Requires=/Wants=/BindsTo=/PartOf=/Requisite=) on another: the design orders only (README, "systemd
keeps the same order at boot").
"""
import json
import os
import re
import shlex
import subprocess

import pytest
import yaml

import render_lib

pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")

# Where systemd looks for units, highest priority first.
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/usr/lib/systemd/system", "/lib/systemd/system")
ORDERING = ("After", "Before")
DEPENDENCIES = ("Requires", "Requisite", "Wants", "BindsTo", "PartOf", "Upholds")
WORKER_UNIT = re.compile(r"^dynamo-worker@(.+)\.service$")
WAIT_READY = "worker-wait-ready"


# --- systemd unit files, read as systemd reads them ----------------------------------------------

def unit_lines(text):
    """(section, key, value) of one unit file: comments skipped, backslash continuations joined."""
    entries, section, pending = [], None, None
    for raw in text.splitlines():
        line = raw.strip()
        if line[:1] in ("#", ";") or (not line and pending is None):
            continue
        if line.endswith("\\"):
            pending = (pending or "") + line[:-1] + " "
            continue
        line, pending = (pending or "") + line, None
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, eq, value = line.partition("=")
        assert eq, "not a unit file line: %r" % line
        entries.append((section, key.strip(), value.strip()))
    return entries


def expand(value, unit):
    """The specifiers the worker units use: %i/%I (instance), %n (unit name), %p (prefix), %%."""
    prefix, _at, rest = unit.partition("@")
    instance = rest.rsplit(".", 1)[0]
    table = {"i": instance, "I": instance, "n": unit, "N": unit.rsplit(".", 1)[0], "p": prefix, "%": "%"}
    return re.sub(r"%(.)", lambda match: table.get(match.group(1), match.group(0)), value)


def unit_sources(files, unit):
    """The unit file and its drop-ins, in the order systemd applies them: [(path, text)]."""
    name, _dot, kind = unit.rpartition(".")
    template = re.sub(r"@[^@]*$", "@", name) + "." + kind if "@" in name else None
    main = next((d + "/" + unit for d in UNIT_DIRS if d + "/" + unit in files), None)
    if main is None and template:
        main = next((d + "/" + template for d in UNIT_DIRS if d + "/" + template in files), None)
    if main is None:
        return []
    # Drop-in directories from the least to the most specific; a file name seen again replaces the
    # earlier one (a more specific directory, or a higher-priority unit directory, wins).
    base = name.split("@", 1)[0]
    parts = base.split("-")
    stems = [kind] + ["-".join(parts[:n]) + "-." + kind for n in range(1, len(parts))]
    stems += ([template] if template else []) + [unit]
    dropins = {}
    for stem in stems:
        for directory in reversed(UNIT_DIRS):
            prefix = "%s/%s.d/" % (directory, stem)
            for path in files:
                if path.startswith(prefix) and "/" not in path[len(prefix):] and path.endswith(".conf"):
                    dropins[path[len(prefix):]] = path
    return [(main, files[main])] + [(dropins[n], files[dropins[n]]) for n in sorted(dropins)]


def load_unit(files, unit):
    """{(section, key): [values in effect]} of `unit` (empty assignments reset), and its sources."""
    sources = unit_sources(files, unit)
    settings = {}
    for _path, text in sources:
        for section, key, value in unit_lines(text):
            value = expand(value, unit)
            if value == "":
                settings[(section, key)] = []
            else:
                settings.setdefault((section, key), []).append(value)
    return settings, [path for path, _text in sources]


def unit_names(settings, key):
    """The units a list setting names ([Unit] key, space-separated values, all assignments)."""
    return {name for value in settings.get(("Unit", key), []) for name in value.split()}


def worker_names(settings, key):
    """The workers (dynamo-worker@<name>.service) a [Unit] list setting names."""
    return {match.group(1) for match in map(WORKER_UNIT.match, unit_names(settings, key)) if match}


def seconds(span):
    """A systemd time span (\"420\", \"7min\", \"1h 30s\", \"infinity\") in seconds."""
    if span.strip() == "infinity":
        return float("inf")
    scale = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
             "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "ms": 0.001, "msec": 0.001}
    found = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", span)
    assert found, "not a time span: %r" % span
    return sum(float(number) * scale[unit] for number, unit in found)


def command_argv(value):
    """(prefix characters, argv) of an Exec*= value."""
    prefix = re.match(r"^[-@:+!]*", value).group(0)
    return prefix, shlex.split(value[len(prefix):])


def environment(files, settings):
    """The variables of the unit's EnvironmentFile= files that the render wrote (later files win)."""
    env = {}
    for value in settings.get(("Service", "EnvironmentFile"), []):
        path = value.lstrip("-")
        for line in files.get(path, "").splitlines():
            key, eq, val = line.partition("=")
            if eq and not line.startswith("#"):
                env[key.strip()] = val.strip()
    return env


# --- the expected order, from the inventory alone ------------------------------------------------

def inventory_workers(inventory_dir, tmp_path):
    """{host: dynamo_workers} of every host in group dynamo_workers, as the inventory writes them
    (ansible-inventory --list: group_vars and host_vars merged, nothing templated)."""
    proc = subprocess.run([os.path.join(render_lib.BIN, "ansible-inventory"), "-i", str(inventory_dir), "--list"],
                          cwd=render_lib.REPO, env=render_lib.ansible_env(tmp_path), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    hostvars = data["_meta"]["hostvars"]
    hosts = set()
    pending = ["dynamo_workers"]
    while pending:
        group = data.get(pending.pop()) or {}
        hosts.update(group.get("hosts") or [])
        pending.extend(group.get("children") or [])
    return {host: list(hostvars.get(host, {}).get("dynamo_workers") or []) for host in sorted(hosts)}


def gpus_of(worker):
    gpus = worker.get("gpus")
    if gpus is None or gpus == "":
        return set()
    return {str(gpu) for gpu in (gpus if isinstance(gpus, list) else [gpus])}


def expected_after(workers):
    """{worker: the worker it must start after (None for the first of its group)}: groups of workers
    joined by shared GPUs (transitively), each in inventory order."""
    groups = []  # [gpus, names]
    order = [w["name"] for w in workers]
    for worker in workers:
        gpus, names = gpus_of(worker), [worker["name"]]
        for group in [g for g in groups if gpus and g[0] & gpus]:
            groups.remove(group)
            gpus, names = gpus | group[0], group[1] + names
        groups.append([gpus, sorted(names, key=order.index)])
    return {name: (names[pos - 1] if pos else None) for _gpus, names in groups for pos, name in enumerate(names)}


# --- the check --------------------------------------------------------------------------------------

def check_host(host, files, workers):
    """Assert the boot order of one host's workers; return the ordered pairs [(later, earlier)]."""
    expected = expected_after(workers)
    units = {}
    for worker in workers:
        settings, sources = load_unit(files, "dynamo-worker@%s.service" % worker["name"])
        assert sources, "%s: no unit rendered for worker %s" % (host, worker["name"])
        units[worker["name"]] = (settings, sources)

    # The ordering relation systemd sees among the workers: x after y by x's After= or y's Before=.
    ordered = set()
    for name, (settings, _sources) in units.items():
        ordered |= {(name, other) for other in worker_names(settings, "After")}
        ordered |= {(other, name) for other in worker_names(settings, "Before")}
    want = {(name, after) for name, after in expected.items() if after}
    missing, extra = sorted(want - ordered), sorted(ordered - want)
    assert not missing, "%s: workers not ordered after the previous worker on their GPU (later, earlier): %s; %s" % (
        host, missing, {n: units[n][1] for n, _earlier in missing})
    assert not extra, "%s: workers ordered against a worker that is not the previous one on their GPU: %s" % (host, extra)

    for name, (settings, sources) in units.items():
        for key in DEPENDENCIES:
            assert not worker_names(settings, key), (
                "%s: dynamo-worker@%s has %s= on another worker (%s): the design orders same-GPU workers "
                "(After=), it never couples their lifecycles" % (host, name, key, sorted(worker_names(settings, key))))

    # Each worker that another one starts after is active only once its own /health is ready.
    by_name = {w["name"]: w for w in workers}
    for later, earlier in sorted(want):
        settings, sources = units[earlier]
        env = environment(files, settings)
        assert env.get("DYN_SYSTEM_PORT") == str(by_name[earlier]["system_port"]), (
            "%s: %s's environment files %s do not set its system port" % (host, earlier, settings.get(("Service", "EnvironmentFile"))))
        health = "http://%s:%s/health" % (env["DYN_SYSTEM_HOST"], env["DYN_SYSTEM_PORT"])
        posts = [command_argv(value) for value in settings.get(("Service", "ExecStartPost"), [])]
        waits = [(prefix, argv) for prefix, argv in posts if any(arg.endswith("/" + WAIT_READY) for arg in argv)]
        assert waits, ("%s: %s starts after %s, but %s has no ExecStartPost= readiness wait (%s ... %s): it is active "
                       "at once and After= orders nothing; its sources: %s" % (host, later, earlier, earlier, WAIT_READY, health, sources))
        assert any(health in argv for _prefix, argv in waits), (
            "%s: %s's ExecStartPost= waits for %s, not for its own /health %s" % (host, earlier, waits, health))
        assert all("-" in prefix for prefix, _argv in waits), (
            "%s: %s's readiness wait may fail the unit (no '-' prefix): %s" % (host, earlier, waits))
        # The start timeout must cover the unit's bounded waits (pool wait, readiness wait), or
        # systemd kills the start while the wait is still within its bound.
        timeouts = [float(argv[argv.index("--timeout") + 1])
                    for key in ("ExecStartPre", "ExecStartPost") for value in settings.get(("Service", key), [])
                    for _prefix, argv in [command_argv(value)] if "--timeout" in argv]
        limit = settings.get(("Service", "TimeoutStartSec"), ["90"])[-1]
        assert seconds(limit) > sum(timeouts), (
            "%s: %s's TimeoutStartSec=%s does not cover its bounded waits %s" % (host, earlier, limit, timeouts))
    return sorted(want)


def check_inventory(rendered, inventory_dir, tmp_path):
    workers = inventory_workers(inventory_dir, tmp_path)
    assert workers, "no host in group dynamo_workers of %s" % inventory_dir
    return {host: check_host(host, rendered[host], host_workers) for host, host_workers in sorted(workers.items())}


@pytest.mark.parametrize("inventory", render_lib.INVENTORIES)
def test_same_gpu_workers_are_ordered_at_boot(rendered_inventory, inventory, tmp_path):
    inventory_dir = render_lib.copy_inventory(tmp_path, inventory)  # as rendered: without local host_vars
    pairs = check_inventory(rendered_inventory(inventory), inventory_dir, tmp_path)
    # What the shipped inventories say about their GPUs (a reader's check of the derivation above).
    shared = {"sandbox": {"sb2": [("vllm-b", "vllm-a")], "sb3": []},
              "single_node": {"gpu-node-1": [("vllm-b", "vllm-a")]},
              "two_node_kvcr": {"gpu-a": [], "gpu-b": []}}
    assert pairs == shared[inventory]


# sb3 of a sandbox copy: mocker workers in chains of three, a worker that shares two GPUs, one that
# bridges two groups (GPU 5 and GPU 6 joined by a worker on both), and workers without a GPU.
CHAINS = [
    {"name": "m-a", "gpus": ["0"]},
    {"name": "m-b", "gpus": ["1"]},
    {"name": "m-c", "gpus": ["0"]},
    {"name": "m-d", "gpus": ["2", "3"]},
    {"name": "m-e", "gpus": ["3"]},
    {"name": "m-f"},
    {"name": "m-g", "gpus": ["0"]},
    {"name": "m-h", "gpus": ["5"]},
    {"name": "m-i", "gpus": ["6"]},
    {"name": "m-j", "gpus": ["5", "6"]},
    {"name": "m-k", "gpus": []},
    {"name": "m-l", "gpus": ["4"]},
]


def chains_host_vars(path):
    """sb3's host_vars with CHAINS as its workers (mockers: no pool, no model download)."""
    with open(path) as handle:
        host_vars = yaml.safe_load(handle)
    host_vars["dynamo_workers"] = [
        dict(worker, engine="mocker", model="/opt/kvshare/models/tiny-llama", served_model_name="tiny-mock",
             endpoint="dyn://dynamo.mocker.generate", system_port=18101 + pos, rpc_port=19101 + pos)
        for pos, worker in enumerate(CHAINS)]
    return host_vars


def test_longer_and_bridged_gpu_chains(tmp_path, monkeypatch):
    copied = []

    def copy_with_chains(tmp, inventory):
        inv = real_copy(tmp, inventory)
        path = inv / "host_vars" / "sb3.yml"
        path.write_text(yaml.safe_dump(chains_host_vars(str(path)), sort_keys=False))
        copied.append(inv)
        return inv
    real_copy = render_lib.copy_inventory
    monkeypatch.setattr(render_lib, "copy_inventory", copy_with_chains)
    rendered = render_lib.render_inventory(tmp_path, "sandbox", limit="sb3")
    workers = inventory_workers(copied[0], tmp_path)
    assert [w["name"] for w in workers["sb3"]] == [w["name"] for w in CHAINS]
    pairs = check_host("sb3", rendered["sb3"], workers["sb3"])
    assert pairs == sorted([("m-c", "m-a"), ("m-g", "m-c"), ("m-e", "m-d"), ("m-j", "m-i"), ("m-i", "m-h")])
