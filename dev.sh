#!/usr/bin/env bash
# Developer entry point for kvshare.dynamo (run as root on Debian 12).
#   ./dev.sh sandbox   build what the sandbox needs, create 3 sandbox hosts, run site.yml, then verify.yml
#   ./dev.sh test      everything CI runs: yamllint, ansible-lint, pytest, collection build, molecule
#                      (create, converge, idempotence, verify, then the hosts are removed)
# Other targets: bootstrap, lint, unit, build, molecule, verify, bench (after sandbox), faults (own
# sandbox copy), faults-here (on the molecule hosts, after `molecule converge`), day2, destroy.
set -euo pipefail
cd "$(dirname "$0")"
REPO=$PWD
VENV=${KVSHARE_VENV:-$REPO/.venv}
export KVSHARE_SANDBOX_DIR=${KVSHARE_SANDBOX_DIR:-/var/tmp/kvshare-sandbox}
# Upstream sources CI cannot fetch (the Maru archive at the pinned commit): shared/ beside the checkout.
KVSHARE_UPSTREAM_DIR=${KVSHARE_UPSTREAM_DIR:-$REPO/../shared/upstream}
export KVSHARE_UPSTREAM_DIR=$(cd "$KVSHARE_UPSTREAM_DIR" 2>/dev/null && pwd || echo "$KVSHARE_UPSTREAM_DIR")
export PATH="$VENV/bin:$PATH"
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}

APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs python3-venv openssh-client ca-certificates git)

bootstrap() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== apt: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  local stamp="$VENV/.requirements.sha256" want
  want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
  if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "== venv: $VENV from requirements-dev.txt"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -r requirements-dev.txt
    echo "$want" >"$stamp"
  fi
}

lint() {
  echo "== yamllint"; yamllint .
  echo "== ansible-lint (production profile)"
  # Offline (no Galaxy), with a project-local cache: a stale kvshare.dynamo copy installed in
  # ~/.ansible/collections by any earlier tool run would otherwise shadow this checkout.
  rm -rf "$REPO/.ansible/collections/ansible_collections/kvshare"
  ANSIBLE_HOME="$REPO/.ansible" ansible-lint --offline -q
}

unit() {
  echo "== pytest (unit and playbook-logic tests)"
  python -m pytest -q tests
  echo "== playbook coverage"
  python tests/playbook_coverage.py
}

build() {
  echo "== ansible-galaxy collection build, install, and run by FQCN from the artifact"
  local out; out=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$out" . >/dev/null
  printf '[defaults]\ncollections_path = %s/collections\n' "$out" >"$out/ansible.cfg"
  ANSIBLE_CONFIG="$out/ansible.cfg" ansible-galaxy collection install -p "$out/collections" "$out"/kvshare-dynamo-*.tar.gz >/dev/null
  for playbook in site verify teardown; do
    (cd "$out" && ANSIBLE_CONFIG="$out/ansible.cfg" \
       ansible-playbook -i "$REPO/inventories/sandbox" "kvshare.dynamo.$playbook" --syntax-check >/dev/null)
  done
  echo "   $(basename "$out"/kvshare-dynamo-*.tar.gz): $(tar -tzf "$out"/kvshare-dynamo-*.tar.gz | wc -l) files; kvshare.dynamo.site resolves from it"
  rm -rf "$out"
}

molecule_test() {
  echo "== molecule test (sandbox hosts: create, converge, idempotence, verify, destroy)"
  molecule test
}

# CI: the molecule scenario keeps its hosts, the fault suite runs on them, then they are removed.
molecule_keep() {
  echo "== molecule test --destroy never (sandbox hosts: create, converge, idempotence, verify; kept for the fault suite)"
  molecule test --destroy never
}

faults_on_molecule_hosts() {
  echo "== fault suite (tests/faults) on the molecule hosts"
  KVSHARE_FAULTS=1 KVSHARE_FAULTS_INVENTORY="$REPO/inventories/sandbox" \
    KVSHARE_FAULTS_DIR=${KVSHARE_FAULTS_RUN_DIR:-/var/tmp/kvshare-faults-run} \
    python -m pytest -v -p no:cacheprovider tests/faults
}

molecule_destroy() {
  echo "== molecule destroy"
  molecule destroy >/dev/null
}

faults() {
  # Its own copy of the sandbox (127.0.11.N, containers kvshare-f-sb1..3, own kvpool and PKI under
  # KVSHARE_FAULTS_DIR): created, rolled out, put through every fault, then removed. Prints the
  # table of cases and recovery times; reports/faults.json keeps it.
  echo "== fault suite (tests/faults) on a sandbox copy"
  local dir=${KVSHARE_FAULTS_DIR:-/var/tmp/kvshare-sandbox-f} rc=0
  KVSHARE_FAULTS=1 KVSHARE_FAULTS_DESTROY=1 KVSHARE_FAULTS_DIR=$dir \
    python -m pytest -v -p no:cacheprovider tests/faults "$@" || rc=$?
  case "$dir" in /var/tmp/kvshare-sandbox-*) rm -rf "$dir" ;; esac
  return $rc
}

day2() {
  # Its own copy of the sandbox (127.0.12.N, containers kvshare-d-sb1..3, mockers only, own kvpool,
  # PKI and wheelhouse of ai-dynamo 1.6.0 + 1.6.1 under KVSHARE_DAY2_DIR): created, put through
  # status/file_sd, rolling restarts, scale-out, upgrade/rollback, etcd backup/restore, removed.
  echo "== day-2 suite (tests/day2) on a sandbox copy"
  local dir=${KVSHARE_DAY2_DIR:-/var/tmp/kvshare-sandbox-d} rc=0
  KVSHARE_DAY2=1 KVSHARE_DAY2_DESTROY=${KVSHARE_DAY2_DESTROY:-1} KVSHARE_DAY2_DIR=$dir \
    python -m pytest -v -p no:cacheprovider tests/day2 "$@" || rc=$?
  return $rc
}

sandbox() {
  echo "== sandbox hosts"
  ansible-playbook sandbox/create.yml
  echo "== site.yml"
  ansible-playbook site.yml
  echo "== verify.yml"
  ansible-playbook verify.yml
}

case "${1:-}" in
  bootstrap) bootstrap ;;
  sandbox) bootstrap; sandbox ;;
  verify) ansible-playbook verify.yml ;;
  bench) bootstrap; python bench/bench.py "${@:2}" ;;
  faults) bootstrap; faults "${@:2}" ;;
  faults-here) bootstrap; faults_on_molecule_hosts ;;
  day2) bootstrap; day2 "${@:2}" ;;
  destroy) ansible-playbook sandbox/destroy.yml ;;
  lint) bootstrap; lint ;;
  unit) bootstrap; unit ;;
  build) bootstrap; build ;;
  molecule) bootstrap; molecule_test ;;
  test)
    bootstrap
    start=$(date +%s); results=(); logs=$(mktemp -d)
    # The fault suite (./dev.sh faults) is not in this list: with real Maru and three vLLM engines
    # the whole run no longer fits CI's 45 minutes (docs/development.md).
    for step in lint unit build molecule_keep; do
      t0=$(date +%s)
      if "$step" 2>&1 | tee "$logs/$step.log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
        results+=("PASS $step ($(( $(date +%s) - t0 )) s)")
      else
        results+=("FAIL $step ($(( $(date +%s) - t0 )) s)")
        case $step in molecule_keep|faults_on_molecule_hosts) molecule_destroy || true ;; esac
        printf '%s\n' "${results[@]}"; exit 1
      fi
    done
    molecule_destroy
    echo "== summary ($(( $(date +%s) - start )) s)"; printf '%s\n' "${results[@]}"
    grep -h -E "^bad inputs rejected|^faults survived|^nothing lost" "$logs"/*.log || true
    ;;
  *) sed -n '2,6p' "$0"; exit 2 ;;
esac
