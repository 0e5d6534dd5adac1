# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""GPU <-> RDMA HCA topology discovery (stdlib only).

Everything here is a pure function of a sysfs root directory and captured command
output, so it runs unchanged against the live ``/`` and against fake sysfs trees in
tests. See docs/topology.md for the algorithm and its limits.

Path classes follow ``nvidia-smi topo -m`` (best first)::

    PIX  < PXB  < PHB  < NODE < SYS

PIX: the path crosses a single PCIe switch; PXB: several switches, no host bridge;
PHB: the common ancestor is a PCIe host bridge (``pciDDDD:BB``); NODE: different host
bridges on the same NUMA node; SYS: different (or unknown) NUMA nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

PATH_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
CLASS_RANK = dict((c, i) for i, c in enumerate(PATH_CLASSES))
# Anything worse than this means "no GPU-local HCA".
GOOD_CLASS = "PXB"

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
BDF_RE = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")
REGION_RE = re.compile(r"(?:^|/)(region\d+)(?:/|$)")
OVERRIDE_RE = re.compile(r"^([A-Za-z0-9_.\-]+)(?::(\d+))?$")
LINK_LAYERS = ("InfiniBand", "Ethernet", "any")


class TopologyError(Exception):
    """Invalid input (e.g. an HCA override naming a device that does not exist)."""


# --------------------------------------------------------------------------- helpers

def strip_ansi(text):
    """Remove ANSI/VT100 escape sequences (nvidia-smi underlines the topo header)."""
    return ANSI_RE.sub("", text or "")


def natural_key(name):
    """Sort key that orders mlx5_2 before mlx5_10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def normalize_bus_id(bus_id):
    """``00000000:17:00.0`` -> ``0000:17:00.0`` (lower case, 4-digit domain)."""
    bus = (bus_id or "").strip().lower()
    m = re.match(r"^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", bus)
    if not m:
        raise TopologyError("unparsable PCI bus id %r" % bus_id)
    domain = int(m.group(1), 16)
    return "%04x:%s:%s.%s" % (domain, m.group(2), m.group(3), m.group(4))


def _read(path, default=None):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return default


def _read_int(path, default=None):
    value = _read(path)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _sys(root, *parts):
    return os.path.join(root or "/", "sys", *parts)


def _entries(path, key=natural_key):
    """The names in a directory, sorted (natural order by default); [] when it cannot be listed."""
    try:
        return sorted(os.listdir(path), key=key)
    except OSError:
        return []


def _rel(root, path):
    """Turn a realpath inside ``root`` into the absolute path it has on the host."""
    if path is None:
        return None
    root = os.path.realpath(root or "/")
    if root == "/":
        return path
    if path == root:
        return "/"
    if path.startswith(root + os.sep):
        return path[len(root):]
    return path


def _components(sys_path):
    """``/sys/devices/pci0000:15/0000:15:01.0/0000:17:00.0`` -> list after /sys/devices."""
    if not sys_path:
        return []
    parts = [p for p in sys_path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "sys" and parts[1] == "devices":
        return parts[2:]
    return parts


# --------------------------------------------------------------------------- parsers

def parse_query_gpu(text):
    """Parse ``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader``."""
    gpus = []
    for line in strip_ansi(text).splitlines():
        line = line.strip()
        if not line or line.lower().startswith("index"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3:
            raise TopologyError("unexpected nvidia-smi --query-gpu line %r" % line)
        try:
            index = int(cells[0])
        except ValueError:
            raise TopologyError("unexpected GPU index in %r" % line)
        gpus.append({"index": index, "uuid": cells[1], "bus_id": normalize_bus_id(cells[2])})
    gpus.sort(key=lambda g: g["index"])
    return gpus


def parse_topo_matrix(text):
    """Parse ``nvidia-smi topo -m`` (or ``-mp``).

    Returns ``{"columns": [...], "matrix": {row: {col: cell}}, "legend": {"NIC0": "mlx5_0"},
    "affinity": {"GPU0": {"CPU Affinity": ..., "NUMA Affinity": ..., "GPU NUMA ID": ...}}}``
    or ``None`` when the text holds no matrix.
    """
    if not text or not text.strip():
        return None
    lines = strip_ansi(text).splitlines()
    header = None
    start = 0
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.split("\t")]
        if line.startswith("\t") or (cells and cells[0] == "" and any(re.match(r"^GPU\d+$", c) for c in cells)):
            if any(re.match(r"^(GPU|NIC)\d+$", c) for c in cells):
                header = cells
                start = i + 1
                break
    if header is None:
        return None
    columns = [c for c in header[1:] if c != ""]
    device_cols = [c for c in columns if re.match(r"^(GPU|NIC)\d+$", c)]
    extra_cols = [c for c in columns if c not in device_cols]
    matrix, affinity, legend = {}, {}, {}
    in_nic_legend = False
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("NIC Legend"):
            in_nic_legend = True
            continue
        if stripped.startswith("Legend"):
            in_nic_legend = False
            continue
        if in_nic_legend:
            m = re.match(r"^(NIC\d+)\s*:\s*(\S+)$", stripped)
            if m:
                legend[m.group(1)] = m.group(2)
            continue
        cells = line.split("\t")
        label = cells[0].strip()
        if not re.match(r"^(GPU|NIC)\d+$", label) or len(cells) < 2:
            continue
        values = [c.strip() for c in cells[1:]]
        row = {}
        for col, val in zip(device_cols, values):
            row[col] = val
        matrix[label] = row
        rest = values[len(device_cols):]
        # nvidia-smi pads some trailing cells with an extra tab; drop empties from the
        # right-hand side until the count matches the header.
        while len(rest) > len(extra_cols) and "" in rest:
            rest.remove("")
        if extra_cols:
            affinity[label] = dict(zip(extra_cols, rest))
    return {"columns": columns, "device_columns": device_cols, "matrix": matrix,
            "legend": legend, "affinity": affinity}


def topo_class(cell):
    """Map a topo -m cell to a PATH_CLASSES value (None for X, NV#, N/A, ...)."""
    cell = (cell or "").strip().upper()
    return cell if cell in CLASS_RANK else None


# --------------------------------------------------------------------------- sysfs

def pci_device_path(root, bdf):
    """Realpath (host view) of /sys/bus/pci/devices/<bdf>, or None."""
    link = _sys(root, "bus", "pci", "devices", bdf)
    if not os.path.exists(link):
        return None
    return _rel(root, os.path.realpath(link))


def numa_of(root, host_path):
    if not host_path:
        return -1
    value = _read_int(os.path.join(root or "/", host_path.lstrip("/"), "numa_node"))
    return -1 if value is None else value


def _root_join(root, host_path):
    return os.path.join(root or "/", host_path.lstrip("/"))


def list_rdma_devices(root):
    """All /sys/class/infiniband/* devices with their ports (no filtering)."""
    base = _sys(root, "class", "infiniband")
    devices = []
    for name in _entries(base):
        dev_dir = os.path.join(base, name)
        dev_real = os.path.realpath(os.path.join(dev_dir, "device"))
        pci_path = _rel(root, dev_real) if os.path.isdir(dev_real) else None
        driver_link = os.path.join(dev_dir, "device", "driver")
        driver = os.path.basename(os.path.realpath(driver_link)) if os.path.islink(driver_link) else None
        net_dir = os.path.join(dev_dir, "device", "net")
        netdevs = [{"name": netdev,
                    "mtu": _read_int(os.path.join(net_dir, netdev, "mtu")),
                    "operstate": _read(os.path.join(net_dir, netdev, "operstate"))}
                   for netdev in _entries(net_dir, key=None)]
        ports = []
        ports_dir = os.path.join(dev_dir, "ports")
        for pname in _entries(ports_dir):
            if not pname.isdigit():
                continue
            pdir = os.path.join(ports_dir, pname)
            state_raw = _read(os.path.join(pdir, "state"), "") or ""
            phys_raw = _read(os.path.join(pdir, "phys_state"), "") or ""
            ports.append({
                "port": int(pname),
                "state": state_raw.split(":", 1)[-1].strip() if state_raw else None,
                "state_raw": state_raw or None,
                "phys_state": phys_raw.split(":", 1)[-1].strip() if phys_raw else None,
                "link_layer": _read(os.path.join(pdir, "link_layer")),
                "active_mtu": _read(os.path.join(pdir, "active_mtu")),
                "rate": _read(os.path.join(pdir, "rate")),
                "lid": _read(os.path.join(pdir, "lid")),
            })
        devices.append({
            "name": name,
            "pci_path": pci_path,
            "bus_id": os.path.basename(pci_path) if pci_path and BDF_RE.match(os.path.basename(pci_path)) else None,
            "numa_node": numa_of(root, pci_path),
            "driver": driver,
            "is_mlx5": (driver or "").startswith("mlx5") or name.startswith("mlx5"),
            "is_bond": "bond" in name,
            "netdevs": netdevs,
            "ports": ports,
        })
    return devices


def list_dax_devices(root):
    base = _sys(root, "bus", "dax", "devices")
    out = []
    for name in _entries(base):
        real = os.path.realpath(os.path.join(base, name))
        path = _rel(root, real)
        m = REGION_RE.search(path or "")
        out.append({
            "name": name,
            "path": path,
            "in_region": bool(m),
            "region": m.group(1) if m else None,
            "numa_node": _read_int(os.path.join(real, "numa_node")),
            "target_node": _read_int(os.path.join(real, "target_node")),
            "size": _read_int(os.path.join(real, "size")),
        })
    return out


# --------------------------------------------------------------------------- classification

def _switch_of(index):
    """Position of a bridge below the root port -> id of the switch it belongs to.

    Below a root port (index 0 after the host bridge) a standard tree alternates
    upstream port (odd index) and downstream port (even index).
    """
    return index if index % 2 == 1 else index - 1


def classify_path(gpu_path, nic_path, gpu_numa=-1, nic_numa=-1):
    """Classify the PCIe path between two devices from their /sys/devices paths.

    Returns ``(path_class, bridges)``; ``bridges`` are the PCI bridges (BDFs) the path
    crosses below the host bridge, i.e. the ones whose ACS setting matters for P2P.
    """
    a, b = _components(gpu_path), _components(nic_path)
    if not a or not b:
        return None, []
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    if common == 0:
        same_node = gpu_numa is not None and gpu_numa >= 0 and gpu_numa == nic_numa
        return ("NODE" if same_node else "SYS"), []
    if not HOST_BRIDGE_RE.match(a[0]):
        # Not a PCI hierarchy we understand (platform device, virtual bus...).
        return ("PHB" if common >= 1 else "SYS"), []
    # a[0] is the host bridge; a[1] the root port; below that switches.
    if common == 1:
        return "PHB", []
    if common == 2:
        # Common ancestor is the root port (e.g. two functions of one card directly
        # below it). Traffic turns around in the root complex: PHB-like.
        return "PHB", []
    # Bridges crossed: everything strictly between each endpoint and the common
    # ancestor, plus the common ancestor itself.
    up = a[common:-1]
    down = b[common:-1]
    crossed = list(reversed(up)) + [a[common - 1]] + down
    # Index below the host bridge: component k (k >= 1) has bridge index k - 1.
    idx = set()
    for k in range(common, len(a) - 1):
        idx.add(_switch_of(k - 1))
    for k in range(common, len(b) - 1):
        idx.add(_switch_of(k - 1))
    idx.add(_switch_of(common - 2))
    idx.discard(0)  # the root port is not a switch
    idx.discard(-1)
    cls = "PIX" if len(idx) <= 1 else "PXB"
    return cls, [c for c in crossed if BDF_RE.match(c)]


def class_rank(cls):
    return CLASS_RANK.get(cls, len(PATH_CLASSES))


def worse_than(cls, ref=GOOD_CLASS):
    return class_rank(cls) > class_rank(ref)


# --------------------------------------------------------------------------- main entry

def parse_override(value):
    m = OVERRIDE_RE.match((value or "").strip())
    if not m:
        raise TopologyError("HCA override %r is not of the form 'mlx5_k' or 'mlx5_k:port'" % value)
    return m.group(1), int(m.group(2) or 1)


def discover(sysfs_root="/", query_gpu_output=None, topo_output=None,
             exclude_bond_devices=True, hca_overrides=None, link_layer="any"):
    """Compute the GPU -> HCA mapping.

    ``hca_overrides`` maps a GPU index (int or str) to ``"mlx5_k:port"``.
    Raises TopologyError for invalid input; everything else becomes a warning.
    """
    if link_layer not in LINK_LAYERS:
        raise TopologyError("link_layer must be one of %s, got %r" % (", ".join(LINK_LAYERS), link_layer))
    root = sysfs_root or "/"
    host_warnings = []
    gpus = parse_query_gpu(query_gpu_output) if query_gpu_output else []
    topo = parse_topo_matrix(topo_output) if topo_output else None
    hcas = list_rdma_devices(root)
    dax = list_dax_devices(root)
    by_name = dict((h["name"], h) for h in hcas)

    overrides = {}
    for key, value in (hca_overrides or {}).items():
        try:
            gidx = int(key)
        except (TypeError, ValueError):
            raise TopologyError("HCA override key %r is not a GPU index" % (key,))
        name, port = parse_override(value)
        if name not in by_name:
            raise TopologyError(
                "HCA override for GPU %d names RDMA device %r, which does not exist under %s "
                "(present: %s)" % (gidx, name, _sys(root, "class", "infiniband"),
                                   ", ".join(sorted(by_name, key=natural_key)) or "none"))
        if port not in [p["port"] for p in by_name[name]["ports"]]:
            raise TopologyError("HCA override for GPU %d names %s port %d, which does not exist" % (gidx, name, port))
        overrides[gidx] = (name, port)
    gpu_indexes = set(g["index"] for g in gpus)
    for gidx in sorted(set(overrides) - gpu_indexes):
        host_warnings.append("HCA override for GPU %d ignored: no such GPU on this host" % gidx)

    # Candidate (device, port) pairs.
    candidates = []
    for h in hcas:
        if exclude_bond_devices and h["is_bond"]:
            continue
        for p in h["ports"]:
            if p["state"] != "ACTIVE":
                continue
            if link_layer != "any" and p["link_layer"] != link_layer:
                continue
            candidates.append((h, p))
    if gpus and not hcas:
        host_warnings.append("no RDMA device under /sys/class/infiniband: UCX will fall back to TCP/host staging")
    elif gpus and not candidates:
        host_warnings.append("no ACTIVE RDMA port matches (link_layer=%s, exclude_bond_devices=%s)"
                             % (link_layer, exclude_bond_devices))

    nic_of_hca = {}
    if topo:
        nic_of_hca = dict((v, k) for k, v in topo["legend"].items())

    usage = {}
    results = []
    for g in gpus:
        gw = []
        g_path = pci_device_path(root, g["bus_id"])
        g_numa = numa_of(root, g_path)
        label = "GPU%d" % g["index"]
        if g_path is None:
            gw.append("%s not found under %s" % (g["bus_id"], _sys(root, "bus", "pci", "devices")))
        if g_numa < 0 and topo and label in topo["affinity"]:
            val = topo["affinity"][label].get("NUMA Affinity", "")
            if val.isdigit():
                g_numa = int(val)

        def score(cand):
            h = cand[0]
            cls, bridges = classify_path(g_path, h["pci_path"], g_numa, h["numa_node"])
            if cls is None and topo:
                cls = topo_class(topo["matrix"].get(label, {}).get(nic_of_hca.get(h["name"], ""), ""))
            return cls, len(bridges)

        chosen, cls, source = None, None, None
        ranked = []
        for cand in candidates:
            c, nbridges = score(cand)
            ranked.append((class_rank(c), nbridges, usage.get(cand[0]["name"], 0), natural_key(cand[0]["name"]),
                           cand[1]["port"], c, cand))
        ranked.sort(key=lambda r: r[:5])
        best = ranked[0] if ranked else None
        if g["index"] in overrides:
            name, port = overrides[g["index"]]
            h = by_name[name]
            p = [x for x in h["ports"] if x["port"] == port][0]
            chosen, cls, source = (h, p), score((h, p))[0], "override"
            if p["state"] != "ACTIVE":
                gw.append("override %s:%d port state is %s, not ACTIVE" % (name, port, p["state"]))
            if best and class_rank(best[5]) < class_rank(cls):
                gw.append("override %s:%d is %s while %s:%d is %s" % (
                    name, port, cls, best[6][0]["name"], best[6][1]["port"], best[5]))
        elif best:
            chosen, cls, source = best[6], best[5], "discovered"

        entry = {
            "index": g["index"], "uuid": g["uuid"], "bus_id": g["bus_id"], "pci_path": g_path,
            "numa_node": g_numa, "hca": None, "port": None, "ucx_net_devices": None,
            "netdevs": [], "link_layer": None, "path_class": None, "topo_class": None,
            "hca_driver": None, "hca_is_mlx5": None, "acs_bridges": [], "source": source,
            "warnings": gw,
        }
        if chosen:
            h, p = chosen
            usage[h["name"]] = usage.get(h["name"], 0) + 1
            sys_cls, bridges = classify_path(g_path, h["pci_path"], g_numa, h["numa_node"])
            entry.update({
                "hca": h["name"], "port": p["port"], "ucx_net_devices": "%s:%d" % (h["name"], p["port"]),
                "netdevs": [n["name"] for n in h["netdevs"]], "link_layer": p["link_layer"],
                "path_class": cls, "hca_driver": h["driver"], "hca_is_mlx5": h["is_mlx5"],
                "acs_bridges": bridges if sys_cls in ("PIX", "PXB") else [],
            })
            if topo:
                nic = nic_of_hca.get(h["name"])
                tcls = topo_class(topo["matrix"].get(label, {}).get(nic, "")) if nic else None
                entry["topo_class"] = tcls
                if nic is None:
                    gw.append("%s is not in the nvidia-smi topo -m NIC legend" % h["name"])
                elif sys_cls and tcls and tcls != sys_cls:
                    gw.append("sysfs says %s for %s (%s), nvidia-smi topo -m says %s"
                              % (sys_cls, h["name"], nic, tcls))
            if cls is None or worse_than(cls):
                gw.append("best path to %s:%d is %s (worse than %s): no GPU-local HCA, "
                          "expect host-staged or degraded GPUDirect RDMA"
                          % (h["name"], p["port"], cls or "unknown", GOOD_CLASS))
        elif hcas:
            gw.append("no usable RDMA port")
        for w in gw:
            host_warnings.append("GPU %d: %s" % (g["index"], w))
        results.append(entry)

    return {
        "gpus": results,
        "hcas": hcas,
        "dax_devices": dax,
        "warnings": host_warnings,
        "topo_present": topo is not None,
        "settings": {"exclude_bond_devices": bool(exclude_bond_devices), "link_layer": link_layer},
    }


def _override_device(value):
    """An rdma_ucx_hca_overrides value as (device "hca:port", hca, port)."""
    dev = value if ":" in value else value + ":1"
    name, port = dev.split(":")[0], dev.split(":")[1]
    return dev, name, port


def gpu_plan(topology, hca_overrides=None):
    """The per-GPU UCX plan of rdma_ucx: the topology's GPUs with the inventory's HCA overrides
    (keys: GPU index as a string) applied, plus one entry per override for a GPU the topology does
    not have (hosts without hardware). Sorted by GPU index.

    An override keeps the GPU's discovered path facts only when it names the discovered HCA and
    port; otherwise link layer and netdevs come from the named HCA (when known) and the path class
    is unknown.
    """
    topology = topology or {}
    overrides = hca_overrides or {}
    gpus = topology.get("gpus") or []
    hcas = topology.get("hcas") or []
    known = [str(gpu["index"]) for gpu in gpus]
    plan = []
    for gpu in gpus:
        value = overrides.get(str(gpu["index"]), "")
        if not value:
            plan.append(gpu)
            continue
        dev, name, port = _override_device(value)
        hca = [h for h in hcas if h["name"] == name]
        same = gpu["hca"] == name and str(gpu["port"]) == port
        if same:
            link_layer, netdevs = gpu["link_layer"], gpu["netdevs"]
        elif hca:
            layers = [p.get("link_layer") for p in hca[0]["ports"] if p["port"] == int(port)]
            link_layer = layers[0] if layers else None
            netdevs = [n["name"] for n in hca[0]["netdevs"]]
        else:
            link_layer, netdevs = None, []
        entry = dict(gpu)
        entry.update({
            "hca": name, "port": int(port), "ucx_net_devices": dev, "source": "override",
            "hca_is_mlx5": hca[0]["is_mlx5"] if hca else name.startswith("mlx5"),
            "link_layer": link_layer, "netdevs": netdevs,
            "path_class": gpu["path_class"] if same else None,
            "topo_class": gpu.get("topo_class") if same else None,
            "acs_bridges": gpu["acs_bridges"] if same else [],
        })
        plan.append(entry)
    for key in sorted(overrides, key=lambda k: str(k).lower()):
        if str(key) in known:
            continue
        dev, name, port = _override_device(overrides[key])
        plan.append({"index": int(key), "uuid": "", "bus_id": None, "numa_node": -1,
                     "hca": name, "port": int(port), "ucx_net_devices": dev,
                     "hca_is_mlx5": dev.startswith("mlx5"), "link_layer": None, "netdevs": [], "path_class": None,
                     "acs_bridges": [], "source": "override",
                     "warnings": ["GPU not discovered on this host; from rdma_ucx_hca_overrides only"]})
    return sorted(plan, key=lambda entry: entry["index"])
