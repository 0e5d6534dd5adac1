# TEST DOUBLE for XCENA Maru: builds an "artifacts" directory from the stand-ins here (upstream is not reachable from CI, no CXL hardware).
# Run it with bash (no shebang: the first line of every test-double file names it as one).
# shellcheck shell=bash
# Usage: bash build-artifacts.sh OUT_DIR [PYTHON_VERSION]
# Produces the layout maru_pool's artifacts install path expects (see roles/maru_pool/README.md):
#   OUT_DIR/bin/maru-resource-manager   OUT_DIR/bin/maru_test_client
#   OUT_DIR/python/maru-*.whl + dependency wheels (pyzmq, msgpack) for PYTHON_VERSION (default 3.11)
#   OUT_DIR/VERSION                     identity recorded by the role's stamp file
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: build-artifacts.sh OUT_DIR [PYTHON_VERSION]}"
pyver="${2:-3.11}"
python="${PYTHON:-python3}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/python"
for tool in maru-resource-manager:maru_resource_manager.py maru_test_client:maru_test_client.py; do
  name="${tool%%:*}" src="${tool#*:}"
  { echo '#!/usr/bin/env python3'; cat "$here/$src"; } >"$out/bin/$name"
  chmod 0755 "$out/bin/$name"
done

build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
cp -r "$here/python" "$build/src"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$out/python" "$build/src"
if ! "$python" -m pip download --quiet --only-binary=:all: --python-version "$pyver" \
      --dest "$out/python" "pyzmq>=25" "msgpack>=1"; then
  echo "WARNING: could not download pyzmq/msgpack wheels; the role's offline pip install will fail" >&2
fi

mapfile -t sources < <(cd "$here" && find python -type f -name '*.py' -o -name pyproject.toml | sort)
ident="testdouble-$(cd "$here" && cat maru_resource_manager.py maru_test_client.py build-artifacts.sh \
  "${sources[@]}" | sha256sum | cut -c1-12)"
echo "$ident" >"$out/VERSION"
echo "built Maru TEST DOUBLE artifacts $ident in $out"
ls -1 "$out/bin" "$out/python"
