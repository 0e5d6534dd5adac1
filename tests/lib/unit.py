# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Helpers of the unit tests: a module's main() run in-process, a fixture script loaded by path."""
import importlib.machinery
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


def load_script(path, name=None):
    """The Python file at `path` (a fixture builder or a shipped script, with or without .py, not a
    package module) as a module named `name` (default: the file name less .py)."""
    name = name or os.path.basename(path).rsplit(".py", 1)[0].replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module
