# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filter: which packages a dpkg-query probe did not find installed."""

from __future__ import annotations

# The probe the roles run (one command module run; the apt module costs about 2 s of host CPU
# even when everything is installed, opening the apt cache):
#   dpkg-query -W -f=${db:Status-Abbrev}${Package}| -- <names>
DPKG_FORMAT = "${db:Status-Abbrev}${Package}|"


def packages_missing(dpkg_output, names):
    """The names that the probe's output does not list as installed ("ii"), in their order.

    A name with a version, an architecture or a pattern ("etcd=3.4*", "pkg:amd64") never matches
    the probe's plain package names, so it counts as missing and the package module decides.
    """
    installed = set()
    for entry in str(dpkg_output or "").replace("\n", "|").split("|"):
        if entry.startswith("ii "):
            installed.add(entry[3:].strip())
    return [name for name in names or [] if str(name) not in installed]


class FilterModule:
    """kvshare.dynamo package filters."""

    def filters(self):
        return {"packages_missing": packages_missing}
