# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Print, as JSON, what the role needs to know of the running interpreter's environment, in one run.

Argument: JSON {"steps": [[requirement, ...], ...], "remove": [name, ...]}. Output:
  unmet    per step, the requirements the environment does not satisfy (by name and version
           only, not by their dependencies): the role skips `pip install` for satisfied steps,
           because pip re-installs dependencies removed on purpose (e.g. CUDA-built torchaudio on
           a CPU host) whenever it runs;
  present  the names of `remove` that are installed (the role runs `pip uninstall` only then);
  purelib  the environment's site-packages (where the connector modules go).
"""
import json
import sys
import sysconfig
from importlib import metadata

try:
    from packaging.requirements import Requirement
except ImportError:  # every venv has pip, which vendors packaging
    from pip._vendor.packaging.requirements import Requirement


def installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet(specs):
    out = []
    for spec in specs:
        req = Requirement(spec)
        version = installed(req.name)
        if version is None or (req.specifier and not req.specifier.contains(version, prereleases=True)):
            out.append(spec)
    return out


def main(argv):
    query = json.loads(argv[1])
    print(json.dumps({
        "unmet": [unmet(step) for step in query.get("steps", [])],
        "present": [name for name in query.get("remove", []) if installed(Requirement(name).name) is not None],
        "purelib": sysconfig.get_paths()["purelib"],
    }))


if __name__ == "__main__":
    main(sys.argv)
