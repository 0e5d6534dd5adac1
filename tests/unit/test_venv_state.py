# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/dynamo_runtime/files/venv_state.py, run as the role runs it, against this test's own environment."""
import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "dynamo_runtime", "files", "venv_state.py")


def state(query):
    out = subprocess.run([sys.executable, SCRIPT, json.dumps(query)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_reports_unmet_steps_present_removals_and_site_packages():
    pytest_version = metadata.version("pytest")
    got = state({"steps": [["pytest==" + pytest_version, "packaging"],
                           ["pytest<1", "kvshare-no-such-package==1.0"]],
                 "remove": ["pytest", "kvshare-no-such-package"]})
    assert got == {"unmet": [[], ["pytest<1", "kvshare-no-such-package==1.0"]],
                   "present": ["pytest"],
                   "purelib": sysconfig.get_paths()["purelib"]}


def test_nothing_asked_nothing_unmet():
    assert state({"steps": [], "remove": []})["unmet"] == []
