#!/usr/bin/env bash
# Runs a command with the simnic preloaded, in a private mount namespace whose /dev also holds a
# character node per simnic device (/dev/infiniband/uverbs-bxsim<N>), for the programs that look
# there before they use a verbs device: UCX (uct_ib_device_is_accessible stats the node, checks
# that it is a character device and that it may be read and written) and what is built on it.
# Nothing outside the namespace changes: /dev there is a fresh tmpfs into which the host's /dev
# entries are bind-mounted, plus the nodes. A node only marks the device (major 231, the
# kernel's uverbs, with no driver behind it: opening it fails with ENXIO); the simnic itself
# never opens it. Needs root (unshare -m, mount, mknod), as CI has.
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

# The host's /dev, kept reachable under a scratch folder while /dev is replaced.
host_dev=$(mktemp -d /tmp/bxsim-dev.XXXXXX)
mount --rbind /dev "$host_dev"
mount -t tmpfs -o mode=0755,size=1m bxsim-dev /dev
shopt -s dotglob nullglob
for entry in "$host_dev"/*; do
  name=${entry##*/}
  if [[ -L $entry ]]; then
    cp -P "$entry" "/dev/$name"
  elif [[ -d $entry ]]; then
    mkdir "/dev/$name"
    mount --rbind "$entry" "/dev/$name"
  else
    touch "/dev/$name"
    mount --bind "$entry" "/dev/$name"
  fi
done
mkdir -p /dev/infiniband
for ((i = 0; i < ${BX_SIM_DEVICES:-2}; ++i)); do
  mknod -m 0666 "/dev/infiniband/uverbs-bxsim$i" c 231 $((192 + i))
done
umount -l "$host_dev"
rmdir "$host_dev"

export LD_PRELOAD=$simnic${LD_PRELOAD:+:$LD_PRELOAD}
exec "$@"
