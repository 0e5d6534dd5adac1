# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Detect DAX devices the way Maru's resource manager sees them. Stdlib only.

Rules (xcena-dev/maru @ 4fd29ce, ``maru_resource_manager/src/pool_manager.cpp``):

* the RM lists ``/sys/bus/dax/devices/dax*`` and keeps a device only when the ``readlink``
  target of that entry contains ``region<N>`` (N becomes the pool id); others (e.g. EFI
  soft-reserved ``platform/hmem.0/dax0.0``) are skipped *silently*;
* the device path is ``/dev/daxX.Y``; a device in ``system-ram`` (kmem) mode has no character
  device and fails to load;
* EVERY matching device becomes a pool and gets a 32-byte header written at offset 0, so
  devices not dedicated to Maru must not be in devdax mode on a Maru host.

``daxctl list`` prints a JSON array of devices, a single object (human mode, one device),
regions with nested ``devices`` (``-R -D``), or nothing/``[]`` when there is no device.

FS_DAX pools (same file, ``scanDevices`` FS_DAX branch and ``findMountPoint``): the RM lists
``/sys/class/block/pmem*`` (the pool id is ``region<N>`` of the ``readlink`` target, else the
digits of the name) and uses the directory where ``/dev/pmemN`` is mounted with ``dax`` among the
mount options: real persistent memory, or CXL memory in fsdax mode. It sizes the pool with
``statfs`` of that directory and creates each allocation there as ``maru_<id>.dat`` (mode 0600,
owned by the RM's user); it writes no header, so an FS_DAX pool is not wiped by claiming it.
"""

from __future__ import annotations

import json
import os
import re

__all__ = ["parse_daxctl_list", "scan_sysfs", "merge", "verdict", "parse_mounts", "scan_fsdax"]

_REGION_RE = re.compile(r"region(\d+)")


def _as_int(value):
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text, 0)
    except ValueError:
        return None


def parse_daxctl_list(text):
    """Return a list of ``{name, mode, size, align, target_node, numa_node, region_id}`` dicts."""
    text = (text or "").strip()
    if not text:
        return []
    data = json.loads(text)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError("daxctl list: expected a JSON array or object")
    devices = []

    def add(dev, region_id=None):
        name = dev.get("chardev") or dev.get("dev")
        if not name:
            return
        devices.append({
            "name": name,
            "mode": dev.get("mode"),
            "size": _as_int(dev.get("size")),
            "align": _as_int(dev.get("align")),
            "target_node": _as_int(dev.get("target_node")),
            "numa_node": _as_int(dev.get("numa_node")),
            "region_id": region_id,
        })

    for item in data:
        if not isinstance(item, dict):
            continue
        if "devices" in item and isinstance(item["devices"], list):
            rid = _as_int(item.get("id"))
            for dev in item["devices"]:
                if isinstance(dev, dict):
                    add(dev, rid)
        else:
            add(item)
    return devices


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def scan_sysfs(root="/"):
    """Walk ``<root>/sys/bus/dax/devices`` like the RM does; return one dict per dax entry."""
    base = os.path.join(root, "sys/bus/dax/devices")
    result = []
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("dax"))
    except (IOError, OSError):
        return result
    for name in names:
        entry = os.path.join(base, name)
        try:
            link = os.readlink(entry)
        except OSError:
            link = ""
        real = os.path.realpath(entry)
        target = link or real
        match = _REGION_RE.search(target)
        driver = ""
        drv_link = os.path.join(entry, "driver")
        if os.path.islink(drv_link):
            driver = os.path.basename(os.readlink(drv_link))
        if driver == "device_dax":
            mode = "devdax"
        elif driver == "kmem":
            mode = "system-ram"
        else:
            mode = None
        size = _as_int(_read(os.path.join(entry, "size")))
        align = _as_int(_read(os.path.join(entry, "align")))
        result.append({
            "name": name,
            "sysfs_target": target,
            "in_region": match is not None,
            "region_id": int(match.group(1)) if match else None,
            "driver": driver or None,
            "sysfs_mode": mode,
            "size": size,
            "align": align,
            "numa_node": _as_int(_read(os.path.join(entry, "numa_node"))),
            "target_node": _as_int(_read(os.path.join(entry, "target_node"))),
            "chardev": os.path.join("/dev", name),
            "chardev_exists": os.path.exists(os.path.join(root, "dev", name)),
        })
    return result


def parse_mounts(text):
    """``/proc/mounts`` lines -> [{source, mount, fstype, options}] (octal escapes decoded)."""
    def unescape(field):
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
    mounts = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mounts.append({"source": unescape(fields[0]), "mount": unescape(fields[1]), "fstype": fields[2],
                       "options": fields[3]})
    return mounts


def _statvfs_size(path):
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def scan_fsdax(root="/", mounts_text=None):
    """FS_DAX pools as the RM finds them: ``pmem*`` in ``<root>/sys/class/block`` mounted with dax.

    Returns one dict per pmem block device: name, region_id, mount (None when no dax mount was
    found), options, size (statfs of the mount) and ``usable`` (the RM turns it into a pool).
    ``mounts_text`` defaults to ``<root>/proc/mounts``.
    """
    base = os.path.join(root, "sys/class/block")
    try:
        names = sorted((n for n in os.listdir(base) if n.startswith("pmem")), key=_natural_key)
    except (IOError, OSError):
        return []
    if mounts_text is None:
        mounts_text = _read(os.path.join(root, "proc/mounts")) or ""
    mounts = parse_mounts(mounts_text)
    pools = []
    for name in names:
        try:
            target = os.readlink(os.path.join(base, name))
        except OSError:
            target = ""
        match = _REGION_RE.search(target)
        if match:
            region_id = int(match.group(1))
        else:
            digits = re.sub(r"\D", "", name)
            region_id = int(digits) if digits else None
        # The RM takes the first /proc/mounts entry for /dev/<name> whose options contain "dax".
        mount = next((m for m in mounts if m["source"] == "/dev/" + name and "dax" in m["options"]), None)
        where = mount["mount"] if mount else None
        pools.append({
            "name": name,
            "sysfs_target": target or None,
            "region_id": region_id,
            "mount": where,
            "fstype": mount["fstype"] if mount else None,
            "options": mount["options"] if mount else None,
            "size": _statvfs_size(os.path.join(root, where.lstrip("/"))) if where else None,
            "usable": mount is not None,
        })
    return pools


def merge(daxctl_devices, sysfs_devices):
    """Join both views by device name; daxctl's mode wins, sysfs tells region and chardev."""
    by_name = {}
    for dev in sysfs_devices:
        by_name[dev["name"]] = dict(dev)
    for dev in daxctl_devices:
        cur = by_name.setdefault(dev["name"], {
            "name": dev["name"], "sysfs_target": None, "in_region": dev.get("region_id") is not None,
            "region_id": dev.get("region_id"), "driver": None, "sysfs_mode": None,
            "chardev": "/dev/" + dev["name"], "chardev_exists": None,
        })
        cur["daxctl_mode"] = dev.get("mode")
        for key in ("size", "align", "numa_node", "target_node"):
            if cur.get(key) is None and dev.get(key) is not None:
                cur[key] = dev[key]
    devices = []
    for name in sorted(by_name, key=_natural_key):
        dev = by_name[name]
        dev.setdefault("daxctl_mode", None)
        dev["mode"] = dev.get("daxctl_mode") or dev.get("sysfs_mode")
        devices.append(dev)
    return devices


def _natural_key(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _norm(name):
    name = str(name)
    return name[5:] if name.startswith("/dev/") else name


def verdict(devices, dedicated=None, allow_undedicated=False, fsdax=None):
    """Classify devices and list problems. ``dedicated``: names or /dev paths given to Maru.

    ``fsdax``: pools from :func:`scan_fsdax`. A dedicated ``pmemN`` must be mounted with dax; an
    FS_DAX pool outside ``dedicated`` is only a warning (the RM writes no header on it).

    Returns dict: ``maru_devices`` (devdax in a region: what the RM will claim),
    ``fsdax_pools`` (names of pmem devices the RM will use as FS_DAX pools),
    ``skipped`` ([{name, reason}]), ``undedicated`` (claimed by Maru but not in ``dedicated``),
    ``missing`` (dedicated but not usable), ``errors`` and ``warnings`` (strings).
    """
    dedicated_names = [_norm(d) for d in (dedicated or [])]
    maru, skipped, errors, warnings = [], [], [], []
    for dev in devices:
        name = dev["name"]
        mode = dev.get("mode")
        if mode == "system-ram":
            skipped.append({"name": name, "reason": "system-ram (kmem) mode: no /dev/%s; the RM fails to load it" % name})
            continue
        if mode not in (None, "devdax"):
            skipped.append({"name": name, "reason": "mode %s is not devdax" % mode})
            continue
        if not dev.get("in_region"):
            skipped.append({"name": name, "reason": "sysfs path has no region<N> component (%s); Maru skips it silently"
                            % (dev.get("sysfs_target") or "unknown")})
            continue
        if dev.get("chardev_exists") is False:
            skipped.append({"name": name, "reason": "character device /dev/%s missing" % name})
            continue
        maru.append(name)
    fsdax_names = [p["name"] for p in fsdax or [] if p.get("usable")]
    for pool in fsdax or []:
        if not pool.get("usable"):
            skipped.append({"name": pool["name"], "reason": "/dev/%s is not mounted with the dax option; the RM "
                            "only uses an fsdax mount (mount -o dax /dev/%s <dir>)" % (pool["name"], pool["name"])})
    for name in fsdax_names:
        if name not in dedicated_names:
            warnings.append("FS_DAX pool %s (%s) is not in the dedicated list; Maru's resource manager uses every "
                            "pmem device mounted with dax" % (name, next(p["mount"] for p in fsdax if p["name"] == name)))
    undedicated = [n for n in maru if n not in dedicated_names]
    missing = [n for n in dedicated_names if n not in maru and n not in fsdax_names]
    for item in skipped:
        if item["name"] in dedicated_names:
            errors.append("dedicated device %s is not usable by Maru: %s" % (item["name"], item["reason"]))
    for name in missing:
        if name not in [s["name"] for s in skipped]:
            errors.append("dedicated device %s not found" % name)
    if undedicated:
        msg = ("devdax device(s) %s are not in the dedicated list; Maru's resource manager writes a header on EVERY "
               "devdax device in a region" % ", ".join(undedicated))
        if allow_undedicated:
            warnings.append(msg)
        else:
            errors.append(msg)
    return {
        "maru_devices": maru,
        "fsdax_pools": fsdax_names,
        "skipped": skipped,
        "undedicated": undedicated,
        "missing": missing,
        "errors": errors,
        "warnings": warnings,
    }
