# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Controller side of kvshare.dynamo.converged: the run's inputs, one digest per input.

Inputs are everything a role of this collection may read, taken wide on purpose: a variable that
is not an input costs at most one full run of the role, an input left out would let a re-run skip
a change. The module documents the list.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.kvshare.dynamo.plugins.module_utils import converged as cv
from ansible_collections.kvshare.dynamo.plugins.module_utils import stack

# Variables of this collection's roles (private __ names and registered results are not inputs).
INPUT_NAME = re.compile(r"^(kvshare|etcd|dynamo|maru_pool|kvcr|rdma_ucx|firewall)_")
# Switches of the run itself, not of what it converges to.
NOT_INPUTS = frozenset(["kvshare_fast_rerun", "kvshare_converged_dir",
                        # Facts a role's body sets for itself: unset while a fast re-run skips it.
                        "maru_pool_pools", "rdma_ucx_reboot_required", "rdma_ucx_verify_report",
                        # What validation read on the host (state, fingerprinted where a role owns it).
                        "dynamo_runtime_account"])
# Host facts the roles read (os_family for package names, the vCPU count for worker threads, the
# GPU topology for pinning) or that a different host behind the same name would change.
FACTS = ("os_family", "distribution", "distribution_version", "architecture", "kernel", "processor_vcpus",
         "machine_id", "kvshare_gpu_topology")
# What of the collection decides what a role does: its roles, plugins and playbooks.
COLLECTION_DIRS = ("roles", "plugins", "playbooks")
COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def tree_digest(paths):
    """One digest of the files under paths (names and contents; bytecode caches left out)."""
    digest = hashlib.sha256()
    for base in paths:
        if os.path.isfile(base):
            entries = [base]
        elif os.path.isdir(base):
            entries = []
            for top, dirs, files in os.walk(base):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                entries.extend(os.path.join(top, name) for name in sorted(files) if not name.endswith(".pyc"))
        else:
            digest.update(("missing:%s\n" % base).encode("utf-8", "surrogateescape"))
            continue
        for entry in entries:
            digest.update(("%s\n" % os.path.relpath(entry, base)).encode("utf-8", "surrogateescape"))
            try:
                with open(entry, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
            except OSError as exc:
                digest.update(("unreadable:%s\n" % exc).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _value(self, raw):
        try:
            return self._templar.template(raw)
        except Exception as exc:  # pylint: disable=broad-except
            # Stable across runs as long as the reason is: a variable that only resolves inside a loop.
            return "unresolvable: %s" % type(exc).__name__

    def inputs(self, task_vars):
        found = {}
        for name in sorted(task_vars):
            # kvshare_fast_rerun_*: the parameters of the shared step (roles/kvshare/tasks/fast_rerun.yml).
            if INPUT_NAME.match(name) and name not in NOT_INPUTS and not name.startswith("kvshare_fast_rerun_"):
                found[name] = cv.value_digest(self._value(task_vars[name]))
        facts = self._value(task_vars.get("ansible_facts", {})) or {}
        found["__facts__"] = cv.value_digest(dict((key, facts.get(key)) for key in FACTS))
        found["__groups__"] = cv.value_digest(self._value(task_vars.get("groups", {})))
        found["__host__"] = cv.value_digest([self._value(task_vars.get(key)) for key in
                                             ("inventory_hostname", "ansible_host", "ansible_port", "ansible_user")])
        # Other hosts' addresses as the roles derive them (their etcd_member export; the play's
        # hosts' default IPv4), for a value another host's facts decide.
        hostvars = task_vars.get("hostvars") or {}
        # Each hostvars[host] lookup computes all of that host's variables (and templates the whole
        # value read): read each host once, untemplated, and template only the small export.
        raw_get = getattr(hostvars, "raw_get", hostvars.get)
        raw = {}

        def peer(host):
            if host not in raw:
                found_vars = raw_get(host)
                raw[host] = found_vars if isinstance(found_vars, Mapping) else {}
            return raw[host]
        peers = []
        for host in sorted(self._value(task_vars.get("ansible_play_hosts_all", [])) or []):
            # Facts are module output, never templates.
            peer_facts = peer(host).get("ansible_facts") or {}
            peers.append([host, stack.default_ipv4_address(peer_facts)])
        for host in sorted(self._value(task_vars.get("groups", {})).get("all", [])):
            peers.append([host, self._value(peer(host).get("etcd_member"))])
        found["__peers__"] = cv.value_digest(peers)
        sources = [str(source) for source in self._value(task_vars.get("ansible_inventory_sources", [])) or []]
        found["__inventory__"] = tree_digest(sources)
        found["__collection__"] = tree_digest([os.path.join(COLLECTION_ROOT, name) for name in COLLECTION_DIRS])
        return found

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        if not args.get("stamp_dir") and task_vars.get("kvshare_converged_dir"):
            args["stamp_dir"] = self._value(task_vars["kvshare_converged_dir"])
        fast_rerun = boolean(self._value(task_vars.get("kvshare_fast_rerun", True)), strict=False)
        limited = limited_by_tags(self._value(task_vars.get("ansible_run_tags", ["all"])),
                                  self._value(task_vars.get("ansible_skip_tags", [])))
        if args.get("state") == "read":
            # Only a whole run with the fast re-run on skips roles: nothing to read for another.
            if limited or not fast_rerun:
                result.update(changed=False, readings={}, stamp_dir="")
            else:
                result.update(self._execute_module(module_name="kvshare.dynamo.converged", module_args=args,
                                                   task_vars=task_vars))
            return result
        if not args.get("inputs"):
            args["inputs"] = self.inputs(task_vars)
        recording = args.get("state") == "record"
        if not (limited or recording or not fast_rerun):
            # This run read the host for every role at once (state=read) and no role's body has
            # changed the host since: the comparison needs no module run.
            stamp_dir = args.get("stamp_dir") or cv.DEFAULT_STAMP_DIR
            found = cv.reading_of(task_vars.get("__kvshare_converged_reading"), args.get("name"), stamp_dir)
            if found is not None:
                whole = list(args.get("run_whole") or [])
                converged, start_only, lines = (False, False, whole) if whole else cv.compare_reading(found, args["inputs"])
                result.update(changed=False, converged=converged, start_only=start_only, drift=cv.summarize(lines),
                              inputs=args["inputs"], stamp=os.path.join(stamp_dir, "%s.json" % args.get("name")),
                              read_before=True)
                return result
        if limited or (not fast_rerun and not recording):
            # The host is neither read nor written. A run limited by tags converges part of a role,
            # so it may neither skip one nor record one; with kvshare_fast_rerun false every role
            # runs whole, and still records, for the next run.
            why = ("the run is limited by tags: only a whole run may skip a role or record one" if limited
                   else "kvshare_fast_rerun is false: every role runs whole")
            result.update(changed=False, converged=False, start_only=False, drift=[why], inputs=args["inputs"], stamp="")
            return result
        result.update(self._execute_module(module_name="kvshare.dynamo.converged", module_args=args,
                                           task_vars=task_vars))
        return result


def limited_by_tags(run_tags, skip_tags):
    """True when --tags or --skip-tags select part of the run."""
    return sorted(run_tags or ["all"]) != ["all"] or bool(list(skip_tags or []))
