# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Print, as JSON, which of the requirement strings given as arguments the running interpreter's
environment does not satisfy (by name and version only, not by their dependencies).

Lets the role skip `pip install` for steps that are already in place: pip re-installs dependencies
that were removed on purpose (e.g. CUDA-built torchaudio on a CPU host) whenever it runs.
"""
import json
import sys
from importlib import metadata

try:
    from packaging.requirements import Requirement
except ImportError:  # every venv has pip, which vendors packaging
    from pip._vendor.packaging.requirements import Requirement

unmet = []
for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        unmet.append(spec)
        continue
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        unmet.append(spec)
print(json.dumps(unmet))
