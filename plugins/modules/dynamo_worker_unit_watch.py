#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dynamo_worker_unit_watch
short_description: Watch worker units on their host until their /health is ready or they crash
description:
  - Runs on the worker's host. Polls each unit's systemd state (C(systemctl show)) and the
    worker's own C(/health) on its system port every O(interval) seconds.
  - A worker is B(ready) when its C(/health) answers 200 with status C(ready) or C(healthy).
  - A worker has B(crashed) when systemd restarted it automatically O(crash_limit) times during
    the watch (C(NRestarts); C(Restart=always) otherwise hides the exits), or when it stays
    C(failed) for O(failed_grace) seconds (start limit hit). A crash ends the watch at once and
    fails the task with the first error of the unit's last run (RV(cause)) and its last journal
    lines, unless O(fail_on_crash=false).
  - A unit whose first automatic restart follows an error named in O(final_errors) has crashed
    at once, since a restart cannot mend it and each try reloads the model.
  - With O(observe) greater than 0 the module does not stop at readiness; it samples for that many
    seconds and reports what it saw (restarts during the window, states, health), for diagnosis.
  - A watch that runs out of time without a crash does not fail; the caller reads RV(not_ready).
  - With O(units[].start) the module first starts (or restarts) those units itself, without
    waiting for their jobs (C(--no-block)), all in one C(systemctl) call, then watches them. The
    units of a wave start together, and the start costs no task of its own.
  - Polls are cheap on purpose (one C(systemctl show) for all units, C(/health) over a plain HTTP
    connection), since the watch runs beside engines that are starting on the same CPUs.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  units:
    description: The units to watch.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: A label (the worker's name).
        type: str
        required: true
      unit:
        description: The systemd unit, e.g. C(dynamo-worker@vllm-a.service).
        type: str
        required: true
      health_url:
        description: The worker's C(/health) URL; without it only the unit state is watched.
        type: str
      pool:
        description: The unit is a KV pool service, not a worker (reported as such).
        type: bool
        default: false
      replaced_invocation:
        description:
          - The unit's InvocationID before a C(no_block) restart was queued. Until the unit runs
            another invocation, its C(/health) is not counted (it may still be the old process
            answering, ready, before systemd stopped it).
          - Set by the module itself for a unit it restarts (O(units[].start=restarted)).
        type: str
      wave:
        description:
          - The start wave of the unit. The module starts (O(units[].start)) and watches the
            lowest wave first; the next wave starts as soon as every unit of the one before has a
            ready C(/health). A crash or a wave not ready within O(timeout) ends the watch; the
            units of the waves not started are then RV(pending).
          - Workers that share a GPU go in successive waves (vLLM profiles the free GPU memory as
            it starts); the units' own C(After=) and readiness gate order them the same at boot.
        type: int
        default: 0
      start:
        description:
          - C(started) starts the unit unless it is active, activating or reloading (as
            M(ansible.builtin.systemd_service) C(state=started) does); C(restarted) restarts it
            in any state. C(none) only watches.
          - Every start is queued without waiting (C(--no-block)); the watch then follows it.
        type: str
        choices: [none, started, restarted]
        default: none
  enable:
    description: Enable (C(systemctl enable)) each unit the module starts or restarts that is not enabled yet.
    type: bool
    default: false
  timeout:
    description: Seconds each wave may take to become ready.
    type: float
    default: 300
  interval:
    description: Seconds between polls (at most 1).
    type: float
    default: 0.5
  crash_limit:
    description: Automatic restarts during the watch that count as a crash.
    type: int
    default: 2
  failed_grace:
    description: Seconds a unit may stay C(failed) before it counts as crashed.
    type: float
    default: 15
  final_errors:
    description:
      - Exception class names (without their module) that end the watch at a unit's first automatic
        restart when the run before it logged one as its first error (RV(cause)), instead of after
        O(crash_limit) restarts.
      - The default is the Maru connector's refusal of a KV cache layout, raised once the model is
        loaded; a second try would load the model again and be refused again.
    type: list
    elements: str
    default: [KVLayoutError]
  observe:
    description: Sample for this many seconds instead of waiting for readiness (0 waits).
    type: float
    default: 0
  fail_on_crash:
    description: Fail the task when a unit crashed.
    type: bool
    default: true
  journal_lines:
    description: Journal lines of a crashed unit in the result and message.
    type: int
    default: 40
  journal_exclude:
    description:
      - Journal lines containing any of these strings are left out of RV(journal).
      - The default drops the system server's log line for every 503 answer to a C(/health) poll
        (the watch's and the start-order gate's own polls), which would otherwise fill the tail.
    type: list
    elements: str
    default: ["tower_http::trace::on_failure"]
  progress_s:
    description:
      - With C(async) and C(poll) 0, the action plugin waits for the watch itself and prints a line
        with each unit's state every this many seconds; the task ends within 0.2 s of the watch
        (Ansible's own poll notices the end only at its next poll). Read by the action plugin only.
    type: float
    default: 10
notes:
  - Read-only unless O(units[].start) or O(enable) ask for a change.
  - Without C(async), or with C(poll) above 0, the module runs the usual way.
attributes:
  check_mode:
    description:
      - A watch only reads unit state and /health and reports the same in check mode.
      - A start or enable it would make is reported as a change and not made; the units are then not watched.
    support: full
  diff_mode:
    description: Returns no diff.
    support: none
"""

EXAMPLES = r"""
- name: Watch the workers of this wave start
  kvshare.dynamo.dynamo_worker_unit_watch:
    units:
      - name: vllm-a
        unit: dynamo-worker@vllm-a.service
        health_url: http://127.0.0.1:18081/health
    timeout: 300

- name: Start two workers that share a GPU one after the other (vllm-b restarted) and watch them
  kvshare.dynamo.dynamo_worker_unit_watch:
    units:
      - name: vllm-a
        unit: dynamo-worker@vllm-a.service
        health_url: http://127.0.0.1:18081/health
        start: started
      - name: vllm-b
        unit: dynamo-worker@vllm-b.service
        health_url: http://127.0.0.1:18082/health
        start: restarted
        wave: 1
    enable: true
    timeout: 300
"""

RETURN = r"""
units:
  description:
    - One entry per unit. C(ready_after_s) counts from the start of the unit's wave,
      C(started_after_s) is when that wave started, from the start of the module (null for a
      wave never started).
  returned: always
  type: list
  elements: dict
  sample:
    - name: vllm-a
      unit: dynamo-worker@vllm-a.service
      active_state: active
      sub_state: running
      result: success
      n_restarts: 0
      restarts: 0
      last_exit: null
      health: HTTP 200 ready
      ready: true
      ready_after_s: 41.3
      wave: 0
      started_after_s: 0.0
ready:
  description: Names of the units whose /health was ready.
  returned: always
  type: list
  elements: str
not_ready:
  description: Names of the units not ready when the watch ended (crashed and RV(pending) ones included).
  returned: always
  type: list
  elements: str
crashed:
  description: Names of the units that crashed during the watch.
  returned: always
  type: list
  elements: str
journal:
  description: Last journal lines of each crashed unit, by name.
  returned: always
  type: dict
cause:
  description:
    - The first exception line of each crashed unit's last run (in this watch) that logged one, by name
      (empty when none).
    - The root cause, which a long traceback pushes out of RV(journal) (vLLM logs it before re-raising it wrapped).
  returned: always
  type: dict
pending:
  description: Units of waves never started, because an earlier wave crashed or was not ready in time.
  returned: always
  type: list
  elements: str
started_units:
  description:
    - Names of the units the module started or restarted (O(units[].start)); in check mode, those it would have.
    - Not named C(started), so that the module can run in the background (C(async)), whose status uses that key.
  returned: always
  type: list
  elements: str
enabled:
  description: Units the module enabled (O(enable)); in check mode, those it would have.
  returned: always
  type: list
  elements: str
elapsed_s:
  description: Seconds the watch took (the start included).
  returned: always
  type: float
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import dynamo_http
from ansible_collections.kvshare.dynamo.plugins.module_utils import unit_watch as uw

# ActiveState values that systemd_service's state=started leaves alone.
RUNNING = ("active", "activating", "reloading")


def get_health(url, timeout):
    """(ready, what) for one GET of a worker's /health. dynamo_http costs under 1 ms of CPU a call
    where ansible's open_url builds an SSL context each time (about 50 ms)."""
    res = dynamo_http.get(url, timeout=timeout)
    if res.status is None:
        return False, "no answer (%s)" % res.error
    body = res.text
    status = ""
    if body:
        try:
            status = json.loads(body).get("status") or ""
        except (ValueError, AttributeError):
            status = ""
    return uw.health_ready(res.status, body), ("HTTP %s %s" % (res.status, status)).strip()


def show(module, systemctl, units, properties):
    """One `systemctl show` for every unit: a dict of properties per unit, in order."""
    rc, out, _err = module.run_command([systemctl, "show", "-p", ",".join(properties)] + list(units))
    return uw.parse_show_blocks(out if rc == 0 else "", len(units))


def start_units(module, systemctl, specs):
    """Queue the requested starts; return (names started, units enabled, {name: replaced invocation})."""
    wanted = [u for u in specs if u.get("start", "none") != "none"]
    if not wanted:
        return [], [], {}
    before = show(module, systemctl, [u["unit"] for u in wanted], ("ActiveState", "InvocationID", "UnitFileState"))
    to_enable, to_start, to_restart, replaced = [], [], [], {}
    for spec, props in zip(wanted, before):
        if module.params["enable"] and props.get("UnitFileState") not in ("enabled", "enabled-runtime", "static", "alias"):
            to_enable.append(spec["unit"])
        if spec["start"] == "restarted":
            to_restart.append(spec)
            if props.get("ActiveState") in RUNNING:
                replaced[spec["name"]] = props.get("InvocationID") or ""
        elif props.get("ActiveState") not in RUNNING:
            to_start.append(spec)
    if not module.check_mode:
        for verb, units in (("enable", to_enable), ("start", [u["unit"] for u in to_start]),
                            ("restart", [u["unit"] for u in to_restart])):
            if units:
                argv = [systemctl, verb] + (["--no-block"] if verb != "enable" else []) + units
                rc, out, err = module.run_command(argv)
                if rc != 0:
                    module.fail_json(msg="systemctl %s %s failed (rc %s): %s" % (verb, " ".join(units), rc, (err or out).strip()))
    return [u["name"] for u in to_start + to_restart], to_enable, replaced


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                unit=dict(type="str", required=True),
                health_url=dict(type="str"),
                pool=dict(type="bool", default=False),
                replaced_invocation=dict(type="str"),
                start=dict(type="str", choices=["none", "started", "restarted"], default="none"),
                wave=dict(type="int", default=0),
            )),
            enable=dict(type="bool", default=False),
            timeout=dict(type="float", default=300),
            interval=dict(type="float", default=0.5),
            crash_limit=dict(type="int", default=2),
            failed_grace=dict(type="float", default=15),
            final_errors=dict(type="list", elements="str", default=["KVLayoutError"]),
            observe=dict(type="float", default=0),
            fail_on_crash=dict(type="bool", default=True),
            journal_lines=dict(type="int", default=40),
            journal_exclude=dict(type="list", elements="str", default=["tower_http::trace::on_failure"]),
            progress_s=dict(type="float", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 0 < p["interval"] <= 1:
        module.fail_json(msg="interval must be > 0 and <= 1 (got %s)" % p["interval"])
    if not p["units"]:
        module.exit_json(changed=False, units=[], ready=[], not_ready=[], pending=[], crashed=[], journal={}, cause={},
                         started_units=[], enabled=[], elapsed_s=0.0)
    waves = sorted(set(u["wave"] for u in p["units"]))
    if p["observe"] > 0 and len(waves) > 1:
        module.fail_json(msg="observe watches units as they are: give every unit the same wave")
    systemctl = module.get_bin_path("systemctl", required=True)
    journalctl = module.get_bin_path("journalctl")
    start = time.monotonic()
    # The journal of this watch's runs only: an error of an earlier rollout is not this one's cause.
    since = "@%d" % int(time.time() - 1)
    if module.check_mode:
        would = [start_units(module, systemctl, [u for u in p["units"] if u["wave"] == w]) for w in waves]
        started, enabled = [n for w in would for n in w[0]], [u for w in would for u in w[1]]
        if started or enabled:
            module.exit_json(changed=True, units=[], ready=[], not_ready=[], pending=[], crashed=[], journal={}, cause={},
                             started_units=started, enabled=enabled, elapsed_s=0.0)
    tracks = [uw.UnitTrack(u["name"], u["unit"], u.get("health_url"), u.get("pool"), u.get("replaced_invocation"))
              for u in p["units"]]
    wave_of = dict((track.name, u["wave"]) for track, u in zip(tracks, p["units"]))
    began = {}  # wave -> when its units were started
    started, enabled = [], []

    def begin(wave):
        names, units, replaced = start_units(module, systemctl, [u for u in p["units"] if u["wave"] == wave])
        started.extend(names)
        enabled.extend(units)
        for track in tracks:
            if wave_of[track.name] == wave and replaced.get(track.name) is not None:
                track.replaced_invocation = replaced[track.name]
        began[wave] = time.monotonic()

    current = 0
    begin(waves[current])
    crashed, checked = [], {}

    def cause_of(track):
        """The first error of the track's last run in this watch (journal since the watch began)."""
        if not journalctl:
            return ""
        _rc, out, _err = module.run_command([journalctl, "--no-pager", "--output=cat", "--since", since,
                                             "-n", str(p["journal_lines"] * 20), "-u", track.unit])
        return uw.journal_cause(out, p["journal_exclude"])

    while True:
        now = time.monotonic()
        live = [t for t in tracks if wave_of[t.name] in began]
        for track, props in zip(live, show(module, systemctl, [t.unit for t in live], uw.SHOW_PROPERTIES)):
            track.update(props, now)
            if track.health_url and track.current and (p["observe"] > 0 or track.ready_after is None):
                ok, track.health = get_health(track.health_url, timeout=min(2.0, max(0.5, p["interval"] * 2)))
                if ok and track.ready_after is None:
                    track.ready_after = now - began[wave_of[track.name]]
            if track.crashed(now, p["crash_limit"], p["failed_grace"]) and track.name not in crashed:
                crashed.append(track.name)
            elif track.restarts and checked.get(track.name) != track.restarts and track.name not in crashed:
                # A restart: read the run's error once (a later restart reads it again).
                checked[track.name] = track.restarts
                if uw.final_error(cause_of(track), p["final_errors"]):
                    crashed.append(track.name)
        if p["observe"] > 0:
            if now - start >= p["observe"]:
                break
        elif crashed:
            break
        elif all(t.ready_after is not None or not t.health_url for t in live if wave_of[t.name] == waves[current]):
            # The wave is ready: the next one starts at once (same-GPU workers one after another).
            if current + 1 == len(waves):
                break
            current += 1
            begin(waves[current])
        elif now - began[waves[current]] >= p["timeout"]:
            break
        time.sleep(p["interval"])

    journal, cause = {}, {}
    for track in tracks:
        if track.name in crashed and journalctl:
            _rc, out, _err = module.run_command([journalctl, "--no-pager", "--output=cat", "-n",
                                                 str(p["journal_lines"] * 20), "-u", track.unit])
            journal[track.name] = uw.journal_tail(out, p["journal_lines"], p["journal_exclude"])
            cause[track.name] = cause_of(track)
    reports = []
    for track in tracks:
        report = track.report()
        report["wave"] = wave_of[track.name]
        wave_began = began.get(wave_of[track.name])
        report["started_after_s"] = None if wave_began is None else round(wave_began - start, 2)
        reports.append(report)
    watched = set(t.name for t in tracks if t.health_url)
    result = dict(
        changed=bool(started or enabled),
        units=reports,
        ready=[r["name"] for r in reports if r["ready"]],
        not_ready=[r["name"] for r in reports if not r["ready"] and r["name"] in watched],
        pending=[t.name for t in tracks if wave_of[t.name] not in began],
        crashed=crashed,
        journal=journal,
        cause=cause,
        started_units=started,
        enabled=enabled,
        elapsed_s=round(time.monotonic() - start, 2),
    )
    if crashed and p["fail_on_crash"] and p["observe"] <= 0:
        lines = []
        for report in reports:
            if report["name"] in crashed:
                lines.append("worker %s crashed while starting: %s" % (report["name"], uw.describe(report)))
                if cause.get(report["name"]):
                    lines.append("cause (the first error its last run logged): %s" % cause[report["name"]])
                lines.append("last journal lines of %s:\n%s" % (report["unit"], journal.get(report["name"], "")))
        if result["pending"]:
            lines.append("not started (a later wave): %s" % ", ".join(result["pending"]))
        module.fail_json(msg="\n".join(lines), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
