#!/usr/bin/env bash
# Sandbox stand-in for an FS_DAX pool (pmem or CXL memory in fsdax mode): a tmpfs behind an overlay
# mounted with source /dev/pmem0 and "dax" in its options, plus a fake /sys/class/block/pmem0.
# The unmodified Maru resource manager accepts it as an FS_DAX pool (shared/docs/maru_real.md):
# it only checks that /sys/class/block/pmem* exists and that /dev/pmemN is mounted with "dax".
# The sandbox hands the overlay to its hosts as a volume (same path everywhere) and the fake
# sysfs directory to the pool host only, on /sys/class/block.
#   fake-fsdax.sh up DIR SIZE   mount (idempotent; prints "made" when it mounted anything)
#   fake-fsdax.sh down DIR      unmount and remove DIR (its pool data is RAM: gone)
set -euo pipefail
action=${1:?up|down}; dir=${2:?directory}
mem=$dir/mem pool=$dir/pmem0 lower=$dir/dax_lower sys=$dir/sys-class-block
case $action in
  up)
    size=${3:?size}
    mkdir -p "$mem" "$pool" "$lower" "$sys"
    if ! mountpoint -q "$mem"; then
      mount -t tmpfs -o "size=$size,mode=0755" kvshare-fake-cxl "$mem"
      echo "made tmpfs $mem ($size)"
    fi
    mkdir -p "$mem/upper" "$mem/work"
    if ! mountpoint -q "$pool"; then
      # The lower dir's path carries the "dax" the resource manager looks for in the options.
      mount -t overlay /dev/pmem0 -o "lowerdir=$lower,upperdir=$mem/upper,workdir=$mem/work" "$pool"
      echo "made overlay $pool (source /dev/pmem0)"
    fi
    # A dangling link, as the RM only reads the name and the region<N> of its target.
    ln -sfn ../../devices/platform/fake-nvdimm/ndbus0/region0/namespace0.0/block/pmem0 "$sys/pmem0"
    grep -q "^/dev/pmem0 $pool overlay .*dax" /proc/mounts || { echo "overlay $pool has no dax option" >&2; exit 1; }
    ;;
  down)
    for m in "$pool" "$mem"; do
      if mountpoint -q "$m"; then umount "$m"; fi
    done
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 up DIR SIZE | down DIR" >&2; exit 2 ;;
esac
