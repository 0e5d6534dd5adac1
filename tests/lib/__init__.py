# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The test-support library: sandbox hosts (sandbox.py), sandbox copies (sandbox_copy.py), suite
sessions (suite.py) and in-process module runs (unit.py).

Importable as `lib` with tests/ on sys.path (tests/conftest.py puts it there for pytest; the
molecule verifier and bench/bench.py add it themselves).
"""
