# TEST DOUBLE for XCENA Maru's maru_handler package (upstream not reachable from CI, no CXL hardware).
"""Only ``maru_handler.rpc_client.RpcClient`` exists in the double (no MaruHandler, no mmap)."""
