#!/usr/bin/env bash
# Runs a command with the simnic preloaded, in a private mount namespace whose /dev also holds a
# character node per simnic device (/dev/infiniband/uverbs-bxsim<N>), for the programs that look
# there before they use a verbs device: UCX (uct_ib_device_is_accessible stats the node, checks
# that it is a character device and that it may be read and written) and what is built on it.
# Nothing outside the namespace changes: /dev there is an overlay of the host's /dev and the
# nodes. A node only marks the device (major 231, the kernel's uverbs, with no driver behind it:
# opening it fails with ENXIO); the simnic itself never opens it. Needs root (unshare -m, mount, mknod), as CI has.
#
#   tools/with-simnic-devices.sh build/lib/libbx_simnic.so ucx_info -d
#
# BX_SIM_DEVICES (default 2) says how many devices the simnic makes, and so how many nodes.
set -euo pipefail
simnic=$(realpath "${1:?usage: with-simnic-devices.sh path/to/libbx_simnic.so command [args...]}")
shift
(($# > 0)) || { echo "with-simnic-devices: no command given" >&2; exit 2; }

if [[ -z ${BX_SIMNIC_DEVICES_NS:-} ]]; then
  exec env BX_SIMNIC_DEVICES_NS=1 unshare --mount --propagation private bash "$0" "$simnic" "$@"
fi

# /dev becomes an overlay: the host's /dev below, a scratch tmpfs holding the nodes above (one
# mount, where bind-mounting each of the host's ~100 entries took 1.4 s per program run). The
# mounts under /dev (shm, pts) are kept aside and moved onto the overlay, so shared memory and
# terminals are the host's.
scratch=$(mktemp -d /tmp/bxsim-dev.XXXXXX)
mount -t tmpfs -o mode=0755,size=1m bxsim-dev "$scratch"
mkdir -p "$scratch/upper/infiniband" "$scratch/work" "$scratch/kept"
for ((i = 0; i < ${BX_SIM_DEVICES:-2}; ++i)); do
  mknod -m 0666 "$scratch/upper/infiniband/uverbs-bxsim$i" c 231 $((192 + i))
done
mapfile -t submounts < <(findmnt -rno TARGET | grep '^/dev/' | sort -u)
for i in "${!submounts[@]}"; do
  mkdir "$scratch/kept/$i"
  mount --rbind "${submounts[$i]}" "$scratch/kept/$i"
done
mount -t overlay bxsim-dev -o "lowerdir=/dev,upperdir=$scratch/upper,workdir=$scratch/work" /dev
for i in "${!submounts[@]}"; do mount --move "$scratch/kept/$i" "${submounts[$i]}"; done
# The overlay keeps its layers; the scratch folder's name goes (the namespace ends with the command).
umount -l "$scratch"
rmdir "$scratch"

export LD_PRELOAD=$simnic${LD_PRELOAD:+:$LD_PRELOAD}
exec "$@"
