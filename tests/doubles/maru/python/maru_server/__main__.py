# TEST DOUBLE for XCENA Maru's `python -m maru_server` (upstream not reachable from CI, no CXL hardware).
"""Same entry point as upstream: ``python -m maru_server``."""
from .server import main

main()
