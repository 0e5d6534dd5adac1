# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Secrets never printed, key/secret files 0600 with the right owner.

A full `site.yml -vvv` run on the sandbox copy, with an HF token set for the workers; its whole
output is searched for every secret value: the etcd CA key, the member and client keys (PEM body
lines and the whole body), the Maru RM `secret` (raw, hex, base64) and the HF token."""
import base64
import glob
import os
import re
import secrets
import stat
import subprocess

import pytest

import faultlib as F

# The Maru RM secret is among the secrets searched for: a case of the KV lane (the molecule hosts).
pytestmark = pytest.mark.kv


def _pem_needles(path):
    """The private parts of a key: its PEM lines that are not public-key material (an EC key's PEM
    ends with its public key, which x509_certificate_info rightly prints), the whole body, and
    the private scalar in hex."""
    with open(path) as handle:
        body = [line.strip() for line in handle if line.strip() and not line.startswith("-----")]
    public = subprocess.run(["openssl", "pkey", "-in", path, "-pubout"], check=True, capture_output=True,
                            text=True).stdout.replace("\n", "")
    text = subprocess.run(["openssl", "pkey", "-in", path, "-noout", "-text"], check=True, capture_output=True,
                          text=True).stdout
    priv = re.search(r"priv:\s*\n((?:\s+[0-9a-f:]+\n)+)", text)
    needles = [line for line in body if len(line) >= 16 and line not in public] + ["".join(body)]
    if priv:
        scalar = re.sub(r"[\s:]", "", priv.group(1))
        needles += [scalar, str(int(scalar, 16))]
    return needles


def test_secrets_never_printed_and_files_private(stack, record):
    """site.yml -vvv output holds no secret; key and secret files are 0600 with the right owner"""
    pki = F.PKI_DIR
    keys = sorted(glob.glob(os.path.join(pki, "*-key.pem")))
    names = {os.path.basename(k) for k in keys}
    assert "ca-key.pem" in names and any(n.startswith("member-") for n in names) \
        and any(n.startswith("client-") for n in names), names
    token = "hf_faults_" + secrets.token_hex(16)
    pool = F.group("maru_pool")[0]
    raw = bytes.fromhex(F.sh(pool, "od -An -tx1 -v %s | tr -d ' \\n'" % F.MARU_SECRET).strip())
    assert len(raw) >= 16
    needles = {"HF token": [token],
               "Maru RM secret": [raw.hex(), base64.b64encode(raw).decode(), raw.decode("latin-1")]}
    for k in keys:
        needles[os.path.basename(k)] = _pem_needles(k)

    res, took = F.playbook("site.yml", "-vvv", "-e", "dynamo_worker_hf_token=%s" % token)
    out = res.stdout + res.stderr
    assert res.returncode == 0, res.stdout[-4000:]
    assert len(out) > 100000, "not a verbose run (%d chars)" % len(out)
    leaks = {what: [n[:12] + "..." for n in found] for what, vals in needles.items()
             if (found := [n for n in vals if n in out])}
    assert not leaks, "secrets in the -vvv output: %s" % leaks
    # The token did reach the workers (root-only file), so the search above was meaningful.
    for h in F.group("dynamo_workers"):
        assert F.sh(h, "cat /etc/dynamo/workers/.secrets.env").strip() == "HF_TOKEN=" + token

    # Files: on the controller, and on every host.
    for k in keys:
        st = os.stat(k)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0, "%s: %o uid %d" % (k, st.st_mode, st.st_uid)
    expect = []
    for m in F.group("etcd"):
        expect.append((m, "/etc/etcd/pki/member-key.pem", "etcd"))
    for h in F.group("dynamo"):
        expect += [(h, "/etc/kvshare/etcd/client-key.pem", "root"), (h, "/etc/kvshare/etcd/client.env", "root")]
    for h in F.group("dynamo_workers"):
        expect.append((h, "/etc/dynamo/workers/.secrets.env", "root"))
    # The resource manager writes its secret as its own account (the workers' one on FS_DAX).
    expect.append((pool, F.MARU_SECRET, F.HOSTVARS[pool].get("maru_pool_rm_user", "root")))
    bad = []
    for h, path, owner in expect:
        got = F.sh(h, "stat -c '%%a %%U' %s" % path).strip()
        if got != "600 %s" % owner:
            bad.append("%s:%s is %s, want 600 %s" % (h, path, got, owner))
    assert not bad, bad
    record["note"] = "%d chars of -vvv output searched for %d secrets; %d files checked" % (
        len(out), len(needles), len(expect) + len(keys))
    record["recovery_s"] = None
    record["wall_run_s"] = took
