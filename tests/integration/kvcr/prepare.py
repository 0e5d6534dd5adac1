#!/usr/bin/env python
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Prepare $KVH_KVCR_DIR (default /var/tmp/kvshare-k) for the KVCR sandbox test, from what the sandbox build made.

- wheelhouse/: a hard link to every wheel of $KVSHARE_SANDBOX_DIR/wheelhouse (default
  /var/tmp/kvshare-sandbox; `molecule create` / sandbox/create.yml builds it), then
  sandbox/build-wheelhouse.py with KVSHARE_WHEELHOUSE_STEPS=group_vars/dynamo.yml (the steps the KVCR
  hosts install) adds what those steps need beyond it: kvcr 0.1.1, nixl 1.5.0, nixl-cu12 1.5.0 (PyPI);
- models/tiny-llama: hard links to the sandbox's model.
Hard links, not copies (about 1 GB); a copy where the two directories are on different file systems.
Idempotent and cached: a present link is kept, and build-wheelhouse.py skips a wheelhouse whose recipe
stamp is current. The wheels are never replaced in place: a file both directories share is never
written through (the CPU-shim wheel, which build-wheelhouse.py rewrites, is not linked).
Usage: prepare.py  (run by test_kvcr_integration.py as its first step)
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
STEPS = os.path.join(HERE, "group_vars", "dynamo.yml")
# build-wheelhouse.py writes this wheel itself (into the wheelhouse it fills): never a shared inode.
OWN_FILES = ("kvshare_sandbox_cpu_shims-",)


def link_tree(src, dest):
    """Hard-link every file of src into dest (recursively); return how many were new."""
    new = 0
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target = os.path.normpath(os.path.join(dest, rel))
        os.makedirs(target, exist_ok=True)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.startswith(OWN_FILES):
                continue
            path = os.path.join(target, name)
            if os.path.exists(path):
                continue
            try:
                os.link(os.path.join(root, name), path)
            except OSError:
                shutil.copy2(os.path.join(root, name), path)
            new += 1
    return new


def main():
    sandbox = os.environ.get("KVSHARE_SANDBOX_DIR") or "/var/tmp/kvshare-sandbox"
    kvh = os.environ.get("KVH_KVCR_DIR") or "/var/tmp/kvshare-k"
    for part in ("wheelhouse", os.path.join("models", "tiny-llama")):
        if not os.path.isdir(os.path.join(sandbox, part)):
            sys.exit(f"{os.path.join(sandbox, part)} is missing: build the sandbox first (molecule create)")
    wheels = link_tree(os.path.join(sandbox, "wheelhouse"), os.path.join(kvh, "wheelhouse"))
    model = link_tree(os.path.join(sandbox, "models", "tiny-llama"), os.path.join(kvh, "models", "tiny-llama"))
    print(f"{kvh}: {wheels} wheels and {model} model files newly linked from {sandbox}")
    env = dict(os.environ, KVSHARE_WHEELHOUSE_STEPS=STEPS)
    subprocess.run([sys.executable, os.path.join(REPO, "sandbox", "build-wheelhouse.py"), os.path.join(kvh, "wheelhouse")],
                   env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
