#!/usr/bin/env bash
# Make sure a Docker engine and docker compose are usable (`make docker-engine`).
#
# - Installs Debian's docker.io, docker-compose and debootstrap with apt when
#   `docker`, a compose CLI or debootstrap is missing (needs root).
# - Starts dockerd when `docker info` fails, with --bridge=none
#   --iptables=false: no default bridge and no NAT rules, which works on
#   machines (CI, containers) where the kernel forbids iptables changes.
#   Local mode still gets its own compose network; builds use --network host.
# - Waits up to DOCKERD_WAIT_S (default 60) seconds for `docker info`.
# Idempotent: does nothing when everything is already there and running.
set -euo pipefail

wait_s="${DOCKERD_WAIT_S:-60}"
log="${DOCKERD_LOG:-/var/log/trcomp-dockerd.log}"

have_compose() {
  docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null
}

if ! command -v docker >/dev/null || ! command -v dockerd >/dev/null || ! have_compose \
   || ! command -v debootstrap >/dev/null; then
  [[ $(id -u) == 0 ]] || { echo "error: installing Docker needs root (sudo make docker-engine)" >&2; exit 1; }
  command -v apt-get >/dev/null || {
    echo "error: no apt-get: install Docker Engine, docker compose and debootstrap yourself" >&2; exit 1; }
  echo "installing docker.io docker-compose debootstrap with apt"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    docker.io docker-compose debootstrap >/dev/null
fi

if docker info >/dev/null 2>&1; then
  echo "docker engine is running ($(docker info --format '{{.ServerVersion}}'))"
  exit 0
fi
if [[ -n ${DOCKER_HOST:-} ]]; then
  echo "error: DOCKER_HOST=$DOCKER_HOST does not answer; unset it to use a local dockerd" >&2
  exit 1
fi
[[ $(id -u) == 0 ]] || { echo "error: starting dockerd needs root (sudo make docker-engine)" >&2; exit 1; }

# A systemd host starts it the normal way; elsewhere (containers, CI) run it directly.
if [[ -d /run/systemd/system ]] && systemctl start docker 2>/dev/null; then
  echo "started docker with systemd"
else
  echo "starting dockerd --bridge=none --iptables=false (log: $log)"
  nohup dockerd --bridge=none --iptables=false >>"$log" 2>&1 &
fi
for ((i = 0; i < wait_s; i++)); do
  if docker info >/dev/null 2>&1; then
    echo "docker engine is running ($(docker info --format '{{.ServerVersion}}'))"
    exit 0
  fi
  sleep 1
done
echo "error: dockerd did not answer within ${wait_s} s; see $log" >&2
tail -n 20 "$log" >&2 || true
exit 1
