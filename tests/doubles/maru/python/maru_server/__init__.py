# TEST DOUBLE for XCENA Maru's maru_server package (upstream not reachable from CI, no CXL hardware).
"""maru-server stand-in; see maru_server.server."""
