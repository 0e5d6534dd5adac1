# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filter: what keeps a controller-side certificate from being current (etcd and etcd_client PKI)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def pki_problems(spec):
    """Reasons to run the certificate tasks; empty when the certificate and key are current."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import pki as _pki
    try:
        return _pki.certificate_problems(dict(spec))
    except KeyError as exc:
        raise AnsibleFilterError("pki_problems: the spec lacks %s" % exc) from exc


class FilterModule:
    """kvshare.dynamo PKI filters."""

    def filters(self):
        return {"pki_problems": pki_problems}
