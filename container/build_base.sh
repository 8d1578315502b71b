#!/usr/bin/env bash
# Build an offline Debian base image for the trcomp training image.
#
# No container registry is reachable on some machines (CI, air-gapped hosts),
# so we debootstrap a minimal Debian rootfs from the host's apt mirror and
# `docker import` it. The image carries what container/Dockerfile needs to
# install torch, torch-xla and the SageMaker training toolkit with pip:
# python3 with headers, pip, venv, gcc, and the host's CA bundle (registries
# may sit behind a TLS-inspecting proxy that only the host trusts).
#
# Usage: container/build_base.sh [--force] [TAG]
#   TAG       image tag (default: $TRCOMP_BASE_TAG or trcomp-base:bookworm)
#   --force   rebuild even if the tag already exists
# Environment:
#   DEBIAN_MIRROR   apt mirror (default: the first URIs: line of the host's
#                   /etc/apt/sources.list.d/debian.sources, else deb.debian.org)
#   DEBIAN_SUITE    default bookworm
#   HOST_CA_BUNDLE  default /etc/ssl/certs/ca-certificates.crt
set -euo pipefail

force=0
tag="${TRCOMP_BASE_TAG:-trcomp-base:bookworm}"
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) tag="$arg" ;;
  esac
done

if [[ $force == 0 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag already exists (use --force to rebuild)"
  exit 0
fi

suite="${DEBIAN_SUITE:-bookworm}"
ca_bundle="${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
mirror="${DEBIAN_MIRROR:-}"
if [[ -z $mirror ]]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror="${mirror:-http://deb.debian.org/debian}"
fi

for tool in debootstrap docker; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found; run 'make docker-engine' first" >&2; exit 1; }
done
[[ $(id -u) == 0 ]] || { echo "error: debootstrap needs root; run as root" >&2; exit 1; }

rootfs=$(mktemp -d /tmp/trcomp-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

# gcc, libc6-dev, python3-dev: the toolkit ships only as an sdist with a C extension.
# g++: torch.compile (inductor) builds its CPU kernels with it.
# procps: `ps`, used by people debugging a stuck job inside the container.
packages=python3,python3-venv,python3-pip,python3-dev,gcc,g++,libc6-dev,ca-certificates,procps
echo "debootstrap $suite from $mirror into $rootfs"
start=$SECONDS
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
  || { tail -n 30 "$rootfs.log" >&2; echo "error: debootstrap failed (log: $rootfs.log)" >&2; exit 1; }
rm -f "$rootfs.log"

# The host's CA bundle, so that pip inside `docker build` trusts the same
# proxies the host trusts. Debian's pip reads the system bundle.
if [[ -r $ca_bundle ]]; then
  cp "$ca_bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
fi
# Let apt inside `docker build` use the same mirror the host uses.
echo "deb $mirror $suite main" >"$rootfs/etc/apt/sources.list"
ln -sf python3 "$rootfs/usr/bin/python"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" >/dev/null
echo "built $tag in $((SECONDS - start)) s"
