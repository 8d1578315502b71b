#!/bin/bash
# trcomp-entrypoint: the image's ENTRYPOINT. It runs the container's command
# (`train` on SageMaker and in local mode) and then, whatever happened:
#   - if the command failed without writing /opt/ml/output/failure (killed,
#     `train` missing, toolkit crash), writes a reason there, so that the SDK
#     always has one to show;
#   - gives files the job wrote as root in the model, output and checkpoint
#     dirs back to the owner of the dir. In SageMaker local mode those dirs are
#     the user's (checkpoints) or the SDK's temp dirs, which it cannot delete
#     otherwise. On SageMaker they are root's and nothing changes. Data
#     channels and the code dir are walked only when trcomp's Docker local
#     mode asks for it (TRCOMP_GIVE_BACK_INPUTS=1): there they are the user's
#     own directories; on SageMaker a channel may be a huge shared file system.
# SIGTERM/SIGINT (docker stop, Ctrl-C in local mode) go to the command.
set -u

child=0
forward() {
  if [ "$child" -ne 0 ]; then kill -TERM "$child" 2>/dev/null; fi
}
trap forward TERM INT

# The dirs a job writes: model, output and the checkpoint dir. The data
# channels (an FSx or EFS channel is a shared data set: walking it would take
# hours) and the code dir only in trcomp's Docker local mode, where they are
# the user's own directories, bind-mounted.
job_dirs() {
  printf '%s\n' /opt/ml/model /opt/ml/output /opt/ml/checkpoints
  case "${TRCOMP_CHECKPOINT_DIR:-}" in /*) printf '%s\n' "$TRCOMP_CHECKPOINT_DIR" ;; esac
  if [ "${TRCOMP_GIVE_BACK_INPUTS:-0}" = 1 ]; then
    printf '%s\n' /opt/ml/code /opt/ml/input/data
  fi
}

give_back_ownership() {
  local dir mnt owner
  # Each job dir, and each mount point below one (field 5 of mountinfo; spaces
  # come escaped as \040), goes back to the owner of its own top.
  while read -r mnt; do
    [ -d "$mnt" ] || continue
    owner=$(stat -c '%u:%g' "$mnt") || continue
    [ "${owner%%:*}" = 0 ] && continue
    # Only what this container wrote: root-owned and newer than its start.
    find "$mnt" -xdev -user 0 -newer "$started" -exec chown -h "$owner" {} + 2>/dev/null
  done < <(
    job_dirs | while read -r dir; do
      [ -d "$dir" ] && printf '%s\n' "$dir"
      awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo
    done | sort -u
  )
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
# Files older than this marker were not written by this container.
started=$(mktemp /tmp/trcomp-started.XXXXXX)
# Back-dated: file times tick coarsely (a kernel clock tick), so a file written
# in the same tick as the marker would not count as newer.
touch -d '2 seconds ago' "$started"
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
rm -f "$started"
exit "$rc"
