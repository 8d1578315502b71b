#!/bin/bash
# trcomp-entrypoint: the image's ENTRYPOINT. It runs the container's command
# (`train` on SageMaker and in local mode) and then, whatever happened:
#   - if the command failed without writing /opt/ml/output/failure (killed,
#     `train` missing, toolkit crash), writes a reason there, so that the SDK
#     always has one to show;
#   - gives files the job wrote as root in bind-mounted /opt/ml dirs back to
#     the owner of the mount point. In SageMaker local mode those dirs are the
#     user's (source dir, checkpoints, file:// channels) or the SDK's temp dirs,
#     which it cannot delete otherwise. On SageMaker the mounts are root's and
#     nothing changes.
# SIGTERM/SIGINT (docker stop, Ctrl-C in local mode) go to the command.
set -u

child=0
forward() {
  if [ "$child" -ne 0 ]; then kill -TERM "$child" 2>/dev/null; fi
}
trap forward TERM INT

give_back_ownership() {
  local mnt owner
  # Field 5 of mountinfo is the mount point (spaces come escaped as \040).
  while read -r mnt; do
    [ -d "$mnt" ] || continue
    owner=$(stat -c '%u:%g' "$mnt") || continue
    [ "${owner%%:*}" = 0 ] && continue
    find "$mnt" -xdev -user 0 -exec chown -h "$owner" {} + 2>/dev/null
  done < <(awk '$5 ~ /^\/opt\/ml\// {print $5}' /proc/self/mountinfo | sort -u)
}

write_failure_if_missing() {
  local rc=$1 failure=/opt/ml/output/failure reason
  [ -d /opt/ml/output ] || return 0
  [ -s "$failure" ] && return 0
  case $rc in
    137) reason="the container's command '$*' was killed (exit 137): most likely out of memory; use a larger instance or a smaller batch" ;;
    127) reason="the container's command '$*' was not found (exit 127): the image is not a trcomp training image; rebuild it with 'make image'" ;;
    *)   reason="the container's command '$*' exited with code $rc without writing a failure reason; see the job's log above" ;;
  esac
  printf '%s\n' "$reason" > "$failure"
}

if [ $# -eq 0 ]; then set -- train; fi
"$@" &
child=$!
wait "$child"
rc=$?
# `wait` returns early when a trapped signal arrives: wait for the real status.
while kill -0 "$child" 2>/dev/null; do
  wait "$child"
  rc=$?
done

[ "$rc" -ne 0 ] && write_failure_if_missing "$rc" "$@"
give_back_ownership
exit "$rc"
