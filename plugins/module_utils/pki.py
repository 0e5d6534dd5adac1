# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Whether a certificate and key that the etcd PKI tasks issued on the controller are still current.

The etcd and etcd_client roles issue their certificates with community.crypto modules on the
controller: one module run each for the key, the signing request, the validity check and the
signature, per certificate and run (28 module runs on a three-host stack). This reads the files
in the controller's own process instead. Any difference from what those tasks would produce, and
any doubt, is a problem: the caller then runs the modules, which decide and act as before. So
this can only skip work that would have changed nothing.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import stat

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_RELATIVE = re.compile(r"^\+(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_EKU = {"serverAuth": "1.3.6.1.5.5.7.3.1", "clientAuth": "1.3.6.1.5.5.7.3.2"}


def relative_seconds(spec):
    """Seconds of a community.crypto relative time ('+30d', '+1w2d'), or None when it is not one."""
    match = _RELATIVE.match(str(spec).strip())
    if not match or not any(match.groups()):
        return None
    return sum(int(n) * _UNITS[u] for n, u in zip(match.groups(), "wdhms") if n)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _san_strings(names):
    out = set()
    for name in names:
        kind, dummy, value = str(name).partition(":")
        if kind == "IP":
            value = str(ipaddress.ip_address(value))
        out.add("%s:%s" % (kind, value))
    return out


def certificate_problems(spec, now=None):
    """What keeps the certificate of `spec` from being current; an empty list when it is.

    spec keys: cert, key (paths), key_mode, cert_mode (octal strings), dir and dir_mode (the
    directory that holds them, when the tasks create it), common_name, sans
    (['DNS:x', 'IP:1.2.3.4']), extended_key_usage (names), ca (bool: a self-signed CA, key usage
    keyCertSign and cRLSign), issuer_cert (the CA that must have signed it, unless ca), renew
    (the renew window, '+30d').
    """
    # Imported here: only the controller needs cryptography (requirements.txt), and a failed
    # import is one more reason to let the modules decide.
    try:
        from cryptography import x509
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtensionOID, NameOID
    except ImportError as exc:
        return ["cryptography is not importable on the controller: %s" % exc]
    spec = dict(spec)
    for name in ("cert", "key", "issuer_cert", "dir"):
        if spec.get(name):
            spec[name] = os.path.expanduser(str(spec[name]))
    problems = []
    if spec.get("dir") and (not os.path.isdir(spec["dir"]) or _mode(spec["dir"]) != int(str(spec.get("dir_mode", "0700")), 8)):
        problems.append("directory %s: missing or not mode %s" % (spec["dir"], spec.get("dir_mode", "0700")))
    paths = [spec["cert"], spec["key"]] + ([] if spec.get("ca") else [spec["issuer_cert"]])
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        return ["missing: %s" % ", ".join(missing)]
    for path, want in ((spec["key"], spec.get("key_mode", "0600")), (spec["cert"], spec.get("cert_mode", "0644"))):
        if _mode(path) != int(str(want), 8):
            problems.append("%s: mode %04o, not %s" % (path, _mode(path), want))
    try:
        with open(spec["key"], "rb") as handle:
            key = serialization.load_pem_private_key(handle.read(), password=None)
        with open(spec["cert"], "rb") as handle:
            cert = x509.load_pem_x509_certificate(handle.read())
        issuer = cert
        if not spec.get("ca"):
            with open(spec["issuer_cert"], "rb") as handle:
                issuer = x509.load_pem_x509_certificate(handle.read())
    except (ValueError, TypeError) as exc:
        return ["unreadable: %s" % exc]
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        problems.append("the key is not ECC secp256r1")
    raw = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, raw) != \
            key.public_key().public_bytes(serialization.Encoding.DER, raw):
        problems.append("the certificate is not for this key")
    names = [(a.oid, a.value) for a in cert.subject]
    if names != [(NameOID.COMMON_NAME, spec["common_name"])]:
        problems.append("subject %s, not CN=%s" % (cert.subject.rfc4514_string(), spec["common_name"]))
    if cert.issuer != issuer.subject:
        problems.append("issued by %s, not %s" % (cert.issuer.rfc4514_string(), issuer.subject.rfc4514_string()))
    else:
        try:
            cert.verify_directly_issued_by(issuer)
        except (InvalidSignature, ValueError, TypeError) as exc:
            problems.append("not signed by %s: %s" % (issuer.subject.rfc4514_string(), exc.__class__.__name__))
    exts = {e.oid: e for e in cert.extensions}
    want_sans = _san_strings(spec.get("sans") or [])
    have_sans = set()
    if ExtensionOID.SUBJECT_ALTERNATIVE_NAME in exts:
        for gn in exts[ExtensionOID.SUBJECT_ALTERNATIVE_NAME].value:
            if isinstance(gn, x509.DNSName):
                have_sans.add("DNS:%s" % gn.value)
            elif isinstance(gn, x509.IPAddress):
                have_sans.add("IP:%s" % gn.value)
            else:
                have_sans.add("other:%r" % gn)
    if have_sans != want_sans:
        problems.append("SANs %s, not %s" % (sorted(have_sans), sorted(want_sans)))
    want_eku = {_EKU.get(u, u) for u in spec.get("extended_key_usage") or []}
    have_eku = set()
    if ExtensionOID.EXTENDED_KEY_USAGE in exts:
        have_eku = {oid.dotted_string for oid in exts[ExtensionOID.EXTENDED_KEY_USAGE].value}
    if have_eku != want_eku:
        problems.append("extended key usage %s, not %s" % (sorted(have_eku), sorted(want_eku)))
    bc = exts.get(ExtensionOID.BASIC_CONSTRAINTS)
    if bool(spec.get("ca")) != bool(bc is not None and bc.value.ca):
        problems.append("CA flag %s, not %s" % (bool(bc is not None and bc.value.ca), bool(spec.get("ca"))))
    if spec.get("ca"):
        ku = exts.get(ExtensionOID.KEY_USAGE)
        if ku is None or not ku.critical or not bc.critical or not (ku.value.key_cert_sign and ku.value.crl_sign):
            problems.append("a CA without critical basic constraints and key usage keyCertSign, cRLSign")
    renew = relative_seconds(spec.get("renew", "+0s"))
    if renew is None:
        problems.append("renew window %r is not a relative time" % spec.get("renew"))
    else:
        now = now or datetime.datetime.now(datetime.timezone.utc)
        if cert.not_valid_after_utc - datetime.timedelta(seconds=renew) <= now:
            problems.append("expires %s, within the renew window %s" % (cert.not_valid_after_utc.isoformat(), spec["renew"]))
        if cert.not_valid_before_utc > now:
            problems.append("not valid before %s" % cert.not_valid_before_utc.isoformat())
    return problems
