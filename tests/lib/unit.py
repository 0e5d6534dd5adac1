# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Helpers of the unit tests: a module's main() run in-process, a fixture script loaded by path."""
import importlib.util
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(module, args, capsys):
    """(exit code, JSON result) of module.main() with these module arguments."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            module.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def load_script(path):
    """The Python file at `path` (a fixture builder, not a package module) as a module."""
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
