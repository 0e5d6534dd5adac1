# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for the fast re-run's gate: plugins/modules/converged.py on a real temporary tree,
plugins/module_utils/converged.py, and the action plugin's input digests."""
import json
import os
import re
import stat

from ansible_collections.kvshare.dynamo.plugins.action import converged as action
from ansible_collections.kvshare.dynamo.plugins.module_utils import converged as cv
from ansible_collections.kvshare.dynamo.plugins.modules import converged
from lib.unit import run_module

INPUTS = {"etcd_version": "aaaa", "kvshare_fast_rerun": "bbbb"}


def run(args, capsys, check=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    return run_module(converged, args, capsys)


def host(tmp_path):
    """A role's files: a config directory walked whole, one file outside it, the stamp directory."""
    conf = tmp_path / "etc" / "svc"
    conf.mkdir(parents=True)
    (conf / "svc.env").write_text("A=1\n")
    os.chmod(conf / "svc.env", 0o640)
    (conf / "svc.conf").write_text("port: 1\n")
    unit = tmp_path / "svc.service"
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    return {
        "name": "svc",
        "stamp_dir": str(tmp_path / "stamps"),
        "trees": [str(conf)],
        "paths": [str(unit)],
        # bash is installed wherever these tests run; the other is not a package anywhere.
        "packages": ["bash", "kvshare-no-such-package"],
        "users": ["root", "kvshare-no-such-user"],
        "groups": ["root"],
    }


def record(args, capsys, inputs=None):
    rc, out = run(dict(args, state="record", inputs=inputs or INPUTS), capsys)
    assert rc == 0 and out["changed"] is False and out["converged"] is True
    return out


def check(args, capsys, inputs=None):
    rc, out = run({"name": args["name"], "stamp_dir": args["stamp_dir"], "inputs": inputs or INPUTS}, capsys)
    assert rc == 0 and out["changed"] is False
    return out


def test_no_record_is_not_converged(tmp_path, capsys):
    out = check(host(tmp_path), capsys)
    assert out["converged"] is False
    assert out["drift"] == ["no record of a full run of this role (the first run, or the last one did not finish)"]


def test_record_then_check_is_converged_and_the_stamp_is_root_only(tmp_path, capsys):
    args = host(tmp_path)
    out = record(args, capsys)
    assert out["stamp"] == args["stamp_dir"] + "/svc.json"
    assert stat.S_IMODE(os.stat(out["stamp"]).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(args["stamp_dir"]).st_mode) == 0o700
    with open(out["stamp"]) as handle:
        stamp = json.load(handle)
    assert stamp["state"]["package:bash"].startswith("installed ")
    assert stamp["state"]["package:kvshare-no-such-package"] == "not installed"
    assert stamp["state"]["user:kvshare-no-such-user"] == "absent"
    assert stamp["state"]["path:%s/svc.env" % args["trees"][0]].startswith("file sha256=")
    out = check(args, capsys)
    assert out["converged"] is True and out["drift"] == []


def test_each_kind_of_file_drift_is_named(tmp_path, capsys):
    args = host(tmp_path)
    record(args, capsys)
    conf = args["trees"][0]
    with open(conf + "/svc.conf", "w") as handle:
        handle.write("port: 2\n")
    os.chmod(conf + "/svc.env", 0o644)
    with open(conf + "/stray.conf", "w") as handle:
        handle.write("x\n")
    os.unlink(args["paths"][0])
    out = check(args, capsys)
    assert out["converged"] is False
    assert sorted(out["drift"]) == sorted([
        "%s/svc.conf: content changed" % conf,
        "%s/svc.env: mode 0644 (was 0640)" % conf,
        "%s/stray.conf: new (file)" % conf,
        "%s: missing" % args["paths"][0],
    ])


def test_each_kind_of_input_change_is_named(tmp_path, capsys):
    args = host(tmp_path)
    record(args, capsys)
    out = check(args, capsys, inputs={"etcd_version": "cccc", "etcd_new": "dddd"})
    assert out["converged"] is False
    assert out["drift"] == ["input etcd_new: newly set", "input etcd_version: changed",
                            "input kvshare_fast_rerun: no longer set"]


def test_check_mode_records_nothing(tmp_path, capsys):
    args = host(tmp_path)
    rc, out = run(dict(args, state="record", inputs=INPUTS), capsys, check=True)
    assert rc == 0 and not os.path.exists(out["stamp"])
    assert check(args, capsys)["converged"] is False


def test_a_stamp_of_another_format_or_garbage_is_not_trusted(tmp_path, capsys):
    args = host(tmp_path)
    out = record(args, capsys)
    with open(out["stamp"]) as handle:
        stamp = json.load(handle)
    stamp["version"] = 0
    with open(out["stamp"], "w") as handle:
        json.dump(stamp, handle)
    assert check(args, capsys)["drift"] == ["the record has format 0, this collection writes 1"]
    with open(out["stamp"], "w") as handle:
        handle.write("{not json")
    drift = check(args, capsys)["drift"]
    assert len(drift) == 1 and drift[0].startswith("the record %s cannot be read" % out["stamp"])


def test_a_name_with_a_slash_is_refused(tmp_path, capsys):
    rc, out = run({"name": "../etc/passwd", "stamp_dir": str(tmp_path)}, capsys)
    assert rc == 1 and "is not a plain name" in out["msg"]


SHOW = """Id=etcd.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled
InvocationID=%s
FragmentPath=/etc/systemd/system/etcd.service
DropInPaths=/etc/systemd/system/etcd.service.d/b.conf /etc/systemd/system/etcd.service.d/a.conf

Id=gone.service
LoadState=not-found
ActiveState=inactive
UnitFileState=
InvocationID=
FragmentPath=
DropInPaths=
"""


def test_units_are_read_in_argument_order_and_a_restart_is_named():
    before = cv.parse_systemctl_show(SHOW % "aaa", ["etcd.service", "gone.service"])
    assert before["etcd.service"] == (
        "load=loaded active=active enabled=enabled invocation=aaa fragment=/etc/systemd/system/etcd.service"
        " dropins=/etc/systemd/system/etcd.service.d/a.conf,/etc/systemd/system/etcd.service.d/b.conf")
    assert before["gone.service"] == "load=not-found active=inactive enabled=- invocation=- fragment=- dropins=-"
    after = cv.parse_systemctl_show(SHOW % "bbb", ["etcd.service", "gone.service"])
    stamp = cv.stamp_document("etcd", {}, {"unit:" + k: v for k, v in before.items()}, "t")
    assert cv.compare(stamp, {}, {"unit:" + k: v for k, v in after.items()}) == [
        "unit etcd.service: it was restarted since the last full run (invocation bbb, was aaa)"]
    failed = dict(after, **{"etcd.service": after["etcd.service"].replace("active=active", "active=failed")})
    assert cv.compare(stamp, {}, {"unit:" + k: v for k, v in failed.items()})[0] == (
        "unit etcd.service: it is now failed (was active)")


def test_packages_with_a_version_or_an_architecture_are_read_by_their_base_name():
    text = "etcd-server\tii \t3.5.16\ncurl\tun \t\n"
    assert cv.parse_dpkg_query(text, ["etcd-server=3.5.16", "curl", "libfoo:amd64"]) == {
        "etcd-server=3.5.16": "installed 3.5.16", "curl": "not installed", "libfoo:amd64": "not installed"}


def test_long_drift_is_capped_with_a_count():
    lines = ["line %d" % index for index in range(20)]
    assert cv.summarize(lines) == lines[:12] + ["... and 8 more"]


def test_the_collection_digest_follows_every_file_but_bytecode(tmp_path):
    roles = tmp_path / "roles"
    (roles / "r" / "tasks").mkdir(parents=True)
    (roles / "r" / "tasks" / "main.yml").write_text("---\n")
    first = action.tree_digest([str(roles)])
    (roles / "r" / "__pycache__").mkdir()
    (roles / "r" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert action.tree_digest([str(roles)]) == first
    (roles / "r" / "tasks" / "main.yml").write_text("---\n# edited\n")
    assert action.tree_digest([str(roles)]) != first
    assert action.tree_digest([str(tmp_path / "nowhere")]) != action.tree_digest([str(tmp_path / "elsewhere")])


def test_run_whole_overrides_a_matching_stamp(tmp_path, capsys):
    args = host(tmp_path)
    record(args, capsys)
    rc, out = run({"name": "svc", "stamp_dir": args["stamp_dir"], "inputs": INPUTS,
                   "run_whole": ["etcd_wipe_data is true"]}, capsys)
    assert rc == 0 and out["converged"] is False and out["drift"] == ["etcd_wipe_data is true"]


def test_a_run_limited_by_tags_neither_skips_nor_records():
    assert action.limited_by_tags(["all"], []) is False
    assert action.limited_by_tags(["etcd_pki"], []) is True
    assert action.limited_by_tags(["all"], ["summary"]) is True


UNIT = "load=loaded active=%s enabled=enabled invocation=%s fragment=/etc/systemd/system/w.service dropins=-"


def stamp_of(state, inputs=None):
    return cv.stamp_document("svc", inputs or INPUTS, state, "2026-12-02T00:00:00Z")


def test_start_only_when_only_units_stopped_or_run_another_invocation():
    recorded = {"unit:a.service": UNIT % ("active", "i1"), "unit:b.service": UNIT % ("active", "i2"),
                "path:/etc/w.env": "file sha256=1 mode=0600 owner=root:root"}
    stopped = dict(recorded, **{"unit:a.service": UNIT % ("inactive", "-"), "unit:b.service": UNIT % ("active", "i9")})
    assert cv.start_only(stamp_of(recorded), INPUTS, stopped) is True
    # Nothing differs: converged, not start-only.
    assert cv.start_only(stamp_of(recorded), INPUTS, recorded) is False
    # Any other difference needs the role's body.
    assert cv.start_only(stamp_of(recorded), dict(INPUTS, etcd_version="x"), stopped) is False
    assert cv.start_only(stamp_of(recorded), INPUTS, dict(stopped, **{"path:/etc/w.env": "absent"})) is False
    disabled = UNIT.replace("enabled=enabled", "enabled=disabled") % ("inactive", "-")
    assert cv.start_only(stamp_of(recorded), INPUTS, dict(stopped, **{"unit:a.service": disabled})) is False
    new_dropin = UNIT.replace("dropins=-", "dropins=/etc/x.conf") % ("inactive", "-")
    assert cv.start_only(stamp_of(recorded), INPUTS, dict(stopped, **{"unit:a.service": new_dropin})) is False
    assert cv.start_only(stamp_of(recorded), INPUTS, dict(stopped, **{"unit:c.service": UNIT % ("active", "i3")})) is False


def test_a_check_reports_start_only_for_a_stopped_unit_on_a_real_host(tmp_path, capsys):
    args = dict(host(tmp_path), units=["kvshare-no-such-unit.service"])
    record(args, capsys)
    assert check(args, capsys)["start_only"] is False
    with open(args["stamp_dir"] + "/svc.json") as handle:
        stamp = json.load(handle)
    key = "unit:kvshare-no-such-unit.service"
    # The record saw it running (whatever systemd, if any, says of it here).
    stamp["state"][key] = re.sub(r"active=\S+", "active=active", stamp["state"][key])
    assert stamp["state"][key].startswith("load=")
    with open(args["stamp_dir"] + "/svc.json", "w") as handle:
        json.dump(stamp, handle)
    out = check(args, capsys)
    assert out["converged"] is False and out["start_only"] is True, out


def read(args, capsys):
    rc, out = run({"state": "read", "stamp_dir": args["stamp_dir"]}, capsys)
    assert rc == 0 and out["changed"] is False and out["stamp_dir"] == args["stamp_dir"]
    return out


def from_reading(prefetch, name, stamp_dir, inputs=None):
    """What the action plugin answers a check with from a reading: (converged, start_only, drift)."""
    found = cv.reading_of(prefetch, name, stamp_dir)
    assert found is not None
    converged, start_only, lines = cv.compare_reading(found, inputs or INPUTS)
    return converged, start_only, cv.summarize(lines)


def test_a_reading_answers_each_role_as_its_own_check_would(tmp_path, capsys):
    """state=read, once for every stamp, gives each role's check the answer of state=check: with
    nothing changed, with files and inputs changed, with a unit stopped, and without a stamp."""
    args = host(tmp_path)
    record(args, capsys)
    other = dict(host(tmp_path / "other"), name="other", stamp_dir=args["stamp_dir"],
                 units=["kvshare-no-such-unit.service"])
    record(other, capsys)
    prefetch = read(args, capsys)
    assert sorted(prefetch["readings"]) == ["other", "svc"]
    assert from_reading(prefetch, "svc", args["stamp_dir"]) == (True, False, [])
    # A role with no stamp: the check's own words.
    assert from_reading(prefetch, "etcd", args["stamp_dir"]) == (False, False, [cv.NO_STAMP])
    assert check(dict(args, name="etcd"), capsys)["drift"] == [cv.NO_STAMP]

    conf = args["trees"][0]
    with open(conf + "/svc.conf", "w") as handle:
        handle.write("port: 2\n")
    with open(conf + "/stray.conf", "w") as handle:
        handle.write("x\n")
    changed_inputs = {"etcd_version": "cccc", "etcd_new": "dddd"}
    prefetch = read(args, capsys)
    out = check(args, capsys, inputs=changed_inputs)
    assert from_reading(prefetch, "svc", args["stamp_dir"], changed_inputs) == (out["converged"], out["start_only"], out["drift"])
    assert len(out["drift"]) == 5, out["drift"]

    # A unit that stopped since: start-only, as the check says.
    with open(other["stamp_dir"] + "/other.json") as handle:
        stamp = json.load(handle)
    key = "unit:kvshare-no-such-unit.service"
    stamp["state"][key] = re.sub(r"active=\S+", "active=active", stamp["state"][key])
    with open(other["stamp_dir"] + "/other.json", "w") as handle:
        json.dump(stamp, handle)
    out = check(other, capsys)
    assert (out["converged"], out["start_only"]) == (False, True)
    assert from_reading(read(args, capsys), "other", args["stamp_dir"]) == (False, True, out["drift"])
    assert from_reading(read(args, capsys), "other", args["stamp_dir"], changed_inputs)[:2] == (False, False)


def test_a_reading_forgotten_or_of_another_directory_is_not_used(tmp_path, capsys):
    args = host(tmp_path)
    record(args, capsys)
    prefetch = read(args, capsys)
    assert cv.reading_of(prefetch, "svc", args["stamp_dir"]) is not None
    # A body ran since (fast_rerun_body.yml sets the reading to {}), or no read in this run.
    assert cv.reading_of({}, "svc", args["stamp_dir"]) is None
    assert cv.reading_of(None, "svc", args["stamp_dir"]) is None
    assert cv.reading_of(prefetch, "svc", str(tmp_path / "elsewhere")) is None
    # No stamp directory at all: nothing recorded, every role reads as missing.
    empty = read({"stamp_dir": str(tmp_path / "none")}, capsys)
    assert empty["readings"] == {} and cv.reading_of(empty, "svc", str(tmp_path / "none")) == {"why": cv.NO_STAMP}


def test_a_body_forgets_the_reading_before_it_changes_the_host():
    """The shared step runs a role's body only through fast_rerun_body.yml, whose first task forgets
    the run's reading (so the roles after it compare with the host again), under the condition the
    record step uses; kvcr.yml, which writes the workers' drop-ins, forgets it too."""
    import yaml
    tasks_dir = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvshare", "tasks")
    with open(os.path.join(tasks_dir, "fast_rerun.yml")) as handle:
        steps = yaml.safe_load(handle)
    with open(os.path.join(tasks_dir, "fast_rerun_record.yml")) as handle:
        record_step = yaml.safe_load(handle)[0]
    bodies = [t for t in steps if "fast_rerun_body" in json.dumps(t) or "converge.yml" in json.dumps(t)]
    # A plain include: `apply` tags would reach every task of the role inside, and a run limited by
    # --tags would run every role's body whole (CI 27's fault 08: --tags dynamo_worker started the
    # stopped pool). Each task of the body file carries its own `always` instead.
    assert len(bodies) == 1 and bodies[0]["ansible.builtin.include_tasks"] == "fast_rerun_body.yml"
    assert bodies[0]["when"].replace("__kvshare_fast_rerun_compare", "X") == \
        record_step["when"].replace("__kvshare_fast_rerun[kvshare_fast_rerun_role]", "X")
    with open(os.path.join(tasks_dir, "fast_rerun_body.yml")) as handle:
        body = yaml.safe_load(handle)
    assert body[0]["ansible.builtin.set_fact"] == {"__kvshare_converged_reading": {}} and "when" not in body[0]
    assert body[1]["ansible.builtin.include_role"]["tasks_from"] == "converge.yml" and len(body) == 2
    assert [task.get("tags") for task in body] == [["always"], ["always"]] and "apply" not in json.dumps(body)
    with open(os.path.join(tasks_dir, "..", "..", "..", "playbooks", "kvcr.yml")) as handle:
        kvcr = yaml.safe_load(handle)[0]
    assert [t["ansible.builtin.set_fact"] for t in kvcr["post_tasks"]] == [{"__kvshare_converged_reading": {}}]
