# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Sandbox hosts only (sandbox/build-image.sh): compile each module payload source once per host, not per run.

ansible-core runs a module by importing it and its module_utils from a zip of sources
(``ansible_<module>_payload.zip``), and Python's zipimport compiles every source it imports from a
zip on every import: about a third of a module run's CPU on a sandbox host (measured with a play of
10 ``ansible.builtin.ping`` tasks, 342-373 ms of host CPU a run before, 237-254 ms after). The
sandbox hosts share the controller's cores, so CI pays that for every task on every host.

This hook, loaded at interpreter start by a ``.pth`` file in the system Python's dist-packages
(not by venvs, not with ``-S``), keeps the code objects zipimport compiles from such a payload in
``/var/cache/kvshare-sandbox-ansiballz`` (root only), keyed by the source's digest, its path inside
the zip, the interpreter's bytecode magic and optimization level; a hit gets the current
payload's file name back (tracebacks name it). The code executed is what compiling the same source
gives; any other import, any non-root process and any failure take zipimport's own path.
"""

import os
import zipimport

_CACHE_DIR = "/var/cache/kvshare-sandbox-ansiballz"
_PAYLOAD_MARK = "_payload.zip" + os.sep
_compile_source = zipimport._compile_source  # pylint: disable=protected-access


def _with_filename(code, filename):
    consts = tuple(_with_filename(const, filename) if isinstance(const, type(code)) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _cached_compile_source(pathname, source):
    inner = pathname.partition(_PAYLOAD_MARK)[2]
    if not inner or os.geteuid() != 0:
        return _compile_source(pathname, source)
    import hashlib  # pylint: disable=import-outside-toplevel
    import importlib.util  # pylint: disable=import-outside-toplevel
    import marshal  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + str(sys.flags.optimize).encode() + b"\0"
                            + inner.encode("utf-8", "surrogateescape") + b"\0" + source).hexdigest()
    path = os.path.join(_CACHE_DIR, digest)
    try:
        with open(path, "rb") as handle:
            code = marshal.load(handle)
        return _with_filename(code, pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(_CACHE_DIR, mode=0o700, exist_ok=True)
        partial = "%s.%d" % (path, os.getpid())
        with open(partial, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(partial, path)
    except (OSError, ValueError):
        pass
    return code


zipimport._compile_source = _cached_compile_source  # pylint: disable=protected-access
