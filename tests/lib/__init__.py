"""The test-support library: sandbox hosts (sandbox.py), sandbox copies (sandbox_copy.py), suite
sessions (suite.py) and in-process module runs (unit.py).

Importable as `lib` with tests/ on sys.path (tests/conftest.py puts it there for pytest; the
molecule verifier and bench/bench.py add it themselves).
"""
