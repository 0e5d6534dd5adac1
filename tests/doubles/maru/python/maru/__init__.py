# TEST DOUBLE for XCENA Maru's `maru` package (upstream not reachable from CI, no CXL hardware).
"""Marker package of the Maru test double; real Maru has no code here either."""
TEST_DOUBLE = True
