# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""``python -m kvshare_maru_connector usage --follow``: one reading per stdin line, one connection.

The client here is a stand-in for Maru's RpcClient (maru_handler.rpc_client): the usage reading
against the real maru-server runs in every verify.yml of the sandbox and the molecule scenario."""
import importlib.util
import io
import os
import json

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "..", "..", "roles", "dynamo_runtime", "files", "kvshare_maru_connector.py")
SPEC = importlib.util.spec_from_file_location("kvshare_maru_connector_follow_under_test", MODULE)
KMC = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(KMC)


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeClient:
    """Stands in for maru_handler.rpc_client.RpcClient: get_stats/get_usage answers, or an error."""
    made = []

    def __init__(self, fail_at=()):
        self.calls = 0
        self.closed = False
        self.fail_at = fail_at
        FakeClient.made.append(self)

    def get_stats(self):
        self.calls += 1
        if self.calls in self.fail_at:
            raise ConnectionError("connection reset")
        return _Obj(kv_manager=_Obj(total_entries=self.calls, total_size=1024 * self.calls))

    def get_usage(self):
        return _Obj(instances=[_Obj(instance_id="sb2-vllm-a", used=512, allocated=1024, regions=1)],
                    pool_total=4096, pool_free=3072)

    def close(self):
        self.closed = True


def test_one_reading_per_line_over_one_connection(monkeypatch):
    FakeClient.made = []
    monkeypatch.setattr(KMC, "_client", lambda url, timeout_ms: FakeClient())
    out = io.StringIO()
    KMC.follow("tcp://127.0.0.1:5555", io.StringIO("\n\n\n"), out)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["kv_bytes"] for x in lines] == [1024, 2048, 3072]
    assert lines[0]["instances"] == {"sb2-vllm-a": {"used": 512, "allocated": 1024, "regions": 1}}
    assert len(FakeClient.made) == 1 and FakeClient.made[0].closed


def test_a_failed_reading_is_reported_and_the_next_one_reconnects(monkeypatch):
    FakeClient.made = []
    monkeypatch.setattr(KMC, "_client", lambda url, timeout_ms: FakeClient(fail_at=(2,)))
    out = io.StringIO()
    KMC.follow("tcp://127.0.0.1:5555", io.StringIO("\n\n\n"), out)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert lines[1] == {"error": "maru-server tcp://127.0.0.1:5555: connection reset"}
    assert lines[0]["kv_bytes"] == 1024 and lines[2]["kv_bytes"] == 1024  # a new connection
    assert len(FakeClient.made) == 2 and all(c.closed for c in FakeClient.made)


def test_usage_without_follow_reads_once(monkeypatch):
    FakeClient.made = []
    monkeypatch.setattr(KMC, "_client", lambda url, timeout_ms: FakeClient())
    assert KMC.usage("tcp://127.0.0.1:5555")["pool_free"] == 3072
    assert FakeClient.made[0].closed
