#!/usr/bin/env bash
# Build the local Debian 12 image the sandbox hosts run (systemd as PID 1, python3 for Ansible).
# Cached: rebuilt only when the image is missing or this recipe changed (its hash is an image label).
set -euo pipefail

IMAGE="${KVSHARE_SANDBOX_IMAGE:-localhost/kvshare-sandbox:bookworm}"
WORKDIR="${KVSHARE_SANDBOX_DIR:-/var/tmp/kvshare-sandbox}"
# Packages every sandbox host needs before Ansible can manage it: systemd, python3 for modules,
# python3-apt for ansible.builtin.apt, openssh-server (Ansible reaches the hosts over SSH, as on
# bare metal), libnuma1 for the vLLM CPU kernels, ca-certificates for pip.
PACKAGES="systemd,systemd-sysv,dbus,python3,python3-apt,python3-venv,iproute2,procps,sudo,ca-certificates,libnuma1,openssh-server"

mirror() {
  # Use the Debian mirror this machine's apt already uses (no other network is reachable).
  local uri
  uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
  [ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# Loaded by the system Python at start: caches the compiled code of ansible-core's module payloads
# (the file says why; sandbox hosts only).
HOOK="$(dirname "$0")/ansiballz-cache/kvshare_sandbox_ansiballz_cache.py"
recipe_hash=$( { cat "$0"; echo "$PACKAGES"; cat "$HOOK"; } | sha256sum | cut -c1-16)
current=$(podman image inspect --format '{{ index .Labels "kvshare.recipe" }}' "$IMAGE" 2>/dev/null || true)
if [ "$current" = "$recipe_hash" ]; then
  echo "sandbox image $IMAGE is current (recipe $recipe_hash)"
  exit 0
fi

rootfs="$WORKDIR/rootfs-bookworm"
rm -rf "$rootfs"
mkdir -p "$WORKDIR"
echo "building sandbox image $IMAGE with debootstrap from $(mirror) ..."
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$(mirror)" >"$WORKDIR/debootstrap.log" 2>&1 \
  || { tail -n 30 "$WORKDIR/debootstrap.log"; exit 1; }
# Same apt sources as the machine (the only reachable mirror), no recommends, no docs.
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  cp /etc/apt/sources.list.d/*.sources "$rootfs/etc/apt/sources.list.d/"
  rm -f "$rootfs/etc/apt/sources.list"
elif [ -f /etc/apt/sources.list ]; then
  cp /etc/apt/sources.list "$rootfs/etc/apt/sources.list"
fi
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$rootfs/etc/apt/apt.conf.d/90kvshare"
# A container needs no getty, no udev settle and no network wait.
for unit in getty@tty1.service console-getty.service systemd-networkd-wait-online.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
# sshd starts only once sandbox/create.yml has told it where to listen (each host's own
# loopback address; all hosts share this machine's network namespace).
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
  >"$rootfs/etc/ssh/sshd_config.d/00-kvshare.conf"
rm -f "$rootfs/etc/systemd/system/multi-user.target.wants/ssh.service" "$rootfs/etc/systemd/system/sshd.service"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb
install -m 0644 "$HOOK" "$rootfs/usr/lib/python3/dist-packages/kvshare_sandbox_ansiballz_cache.py"
echo "import kvshare_sandbox_ansiballz_cache" >"$rootfs/usr/lib/python3/dist-packages/kvshare_sandbox_ansiballz_cache.pth"
tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change "LABEL kvshare.recipe=$recipe_hash" \
  - "$IMAGE" >/dev/null
rm -rf "$rootfs"
echo "built $IMAGE (recipe $recipe_hash)"
