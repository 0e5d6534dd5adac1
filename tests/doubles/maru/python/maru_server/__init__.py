# TEST DOUBLE for XCENA Maru's maru_server package (upstream not reachable from CI, no CXL hardware).
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""maru-server stand-in; see maru_server.server."""
