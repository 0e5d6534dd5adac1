# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""pki.certificate_problems on real files: current when nothing differs, a reason for each difference."""
import datetime
import ipaddress
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible_collections.kvshare.dynamo.plugins.module_utils import pki

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
SANS = ["DNS:m1", "DNS:sb1", "DNS:localhost", "IP:127.0.10.1", "IP:127.0.0.1"]


def _key(path, curve=ec.SECP256R1()):
    key = ec.generate_private_key(curve)
    with open(path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    os.chmod(path, 0o600)
    return key


def _cert(path, key, cn, issuer=None, issuer_key=None, sans=(), ca=False, days=365, eku=()):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(NOW - datetime.timedelta(days=1)).not_valid_after(NOW + datetime.timedelta(days=days)))
    if ca:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(s[4:]) if s.startswith("DNS:") else x509.IPAddress(ipaddress.ip_address(s[3:])) for s in sans]),
            critical=False)
    if eku:
        b = b.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    cert = b.sign(issuer_key or key, hashes.SHA256())
    with open(path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)
    return cert


@pytest.fixture()
def tree(tmp_path):
    d = tmp_path / "pki"
    d.mkdir(mode=0o700)
    ca_key = _key(d / "ca-key.pem")
    ca = _cert(d / "ca.pem", ca_key, "kvshare-etcd-ca", ca=True, days=3650)
    m_key = _key(d / "member-key.pem")
    _cert(d / "member.pem", m_key, "m1", ca, ca_key, SANS, eku=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    ca_spec = {"dir": str(d), "cert": str(d / "ca.pem"), "key": str(d / "ca-key.pem"), "common_name": "kvshare-etcd-ca",
               "ca": True, "renew": "+0s"}
    member = {"cert": str(d / "member.pem"), "key": str(d / "member-key.pem"), "issuer_cert": str(d / "ca.pem"),
              "common_name": "m1", "sans": SANS, "extended_key_usage": ["serverAuth", "clientAuth"], "renew": "+30d"}
    return d, ca_spec, member, (ca, ca_key, m_key)


def test_current_certificates_have_no_problems(tree):
    dummy, ca_spec, member, dummy2 = tree
    assert pki.certificate_problems(ca_spec, now=NOW) == []
    assert pki.certificate_problems(member, now=NOW) == []
    # The same SANs in another order and spelling of the address are the same certificate.
    assert pki.certificate_problems(dict(member, sans=list(reversed(SANS))), now=NOW) == []


@pytest.mark.parametrize("change, needle", [
    ({"sans": SANS + ["DNS:extra"]}, "SANs"),
    ({"common_name": "m2"}, "subject CN=m1, not CN=m2"),
    ({"extended_key_usage": ["clientAuth"]}, "extended key usage"),
    ({"renew": "+400d"}, "within the renew window"),
    ({"renew": "20270101000000Z"}, "is not a relative time"),
    ({"ca": True}, "CA flag"),
])
def test_each_difference_is_a_problem(tree, change, needle):
    dummy, dummy2, member, dummy3 = tree
    problems = pki.certificate_problems(dict(member, **change), now=NOW)
    assert any(needle in p for p in problems), problems


def test_files_modes_keys_and_issuer(tree):
    d, ca_spec, member, (ca, ca_key, m_key) = tree
    os.chmod(d / "member-key.pem", 0o640)
    assert any("mode 0640, not 0600" in p for p in pki.certificate_problems(member, now=NOW))
    os.chmod(d / "member-key.pem", 0o600)
    os.chmod(d, 0o755)
    assert any("directory" in p for p in pki.certificate_problems(ca_spec, now=NOW))
    os.chmod(d, 0o700)
    # A new key beside the old certificate.
    _key(d / "member-key.pem")
    assert "the certificate is not for this key" in pki.certificate_problems(member, now=NOW)
    with open(d / "member-key.pem", "wb") as fh:
        fh.write(m_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    assert pki.certificate_problems(member, now=NOW) == []
    # A CA issued again (same name, new key): the member certificate is no longer signed by it.
    new_ca_key = _key(d / "ca-key.pem")
    _cert(d / "ca.pem", new_ca_key, "kvshare-etcd-ca", ca=True, days=3650)
    assert any("not signed by" in p for p in pki.certificate_problems(member, now=NOW))
    # A key on another curve, and a missing file.
    _key(d / "member-key.pem", ec.SECP384R1())
    assert "the key is not ECC secp256r1" in pki.certificate_problems(member, now=NOW)
    os.remove(d / "member.pem")
    assert pki.certificate_problems(member, now=NOW)[0].startswith("missing: ")


def test_relative_seconds():
    assert pki.relative_seconds("+30d") == 30 * 86400
    assert pki.relative_seconds("+1w2d3h") == 9 * 86400 + 3 * 3600
    assert pki.relative_seconds("+0s") == 0
    assert pki.relative_seconds("30d") is None and pki.relative_seconds("+") is None
