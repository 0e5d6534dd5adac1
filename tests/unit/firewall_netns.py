# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Helper of test_firewall_ruleset.py, run by it inside a fresh network namespace (`unshare -n`).

Reads a JSON spec (argv[1]): listeners [[address, port]], then phases [{name, commands, probes}].
Brings lo up, starts the TCP listeners, and per phase runs its commands (nft, ansible-playbook)
and then its probes [[source address, destination address, port]] in parallel, each a TCP connect
from that source with a short timeout: "open" (accepted), "dropped" (no answer: the table dropped
the SYN), "refused" or "error: ...". Prints one JSON document. Every address is a loopback address
of the namespace: nothing leaves it.
"""
import concurrent.futures
import json
import socket
import subprocess
import sys


def probe(src, dst, port, timeout):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.bind((src, 0))
        sock.connect((dst, port))
        return "open"
    except socket.timeout:
        return "dropped"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return "error: %s" % exc
    finally:
        sock.close()


def main(path):
    with open(path) as fh:
        spec = json.load(fh)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    listeners = []
    for address, port in spec["listeners"]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(64)
        listeners.append(sock)  # kept open (and referenced) until the end
    timeout = float(spec.get("timeout", 1.0))
    report = {}
    for phase in spec["phases"]:
        commands = []
        for argv in phase.get("commands", []):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
            commands.append({"argv": argv, "rc": proc.returncode, "stdout": proc.stdout[-6000:],
                             "stderr": proc.stderr[-3000:]})
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            futures = {"%s>%s:%d" % (src, dst, port): pool.submit(probe, src, dst, port, timeout)
                       for src, dst, port in phase.get("probes", [])}
            probes = {key: future.result() for key, future in futures.items()}
        report[phase["name"]] = {"commands": commands, "probes": probes}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
