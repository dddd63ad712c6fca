# Signals to tiderun stop every rank (and the ranks' children), exit with
# 128 + signal, and leave no /dev/shm/tide-<job id>* behind.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# $1: signal for tiderun, $2: expected exit code, $3: shell code run by each
# rank before it waits. Each rank creates /dev/shm/tide-$TIDE_JOB_ID-r<rank>
# and starts a child; both must be gone afterwards.
run_case() {
  cases=$((cases + 1))
  local dir="$WORK/case$cases" rc=0
  mkdir -p "$dir"
  "$TIDERUN" -n 2 sh -c '
    d='"$dir"'
    '"$3"'
    : > /dev/shm/tide-$TIDE_JOB_ID-r$TIDE_RANK
    echo "$TIDE_JOB_ID" > $d/job
    sleep 60 &
    echo $! > $d/child$TIDE_RANK
    echo $$ > $d/pid$TIDE_RANK.tmp && mv $d/pid$TIDE_RANK.tmp $d/pid$TIDE_RANK
    wait' 2> "$dir/err" &
  local tpid=$!
  if ! wait_file "$dir/pid0" 100 || ! wait_file "$dir/pid1" 100; then
    kill -KILL "$tpid"
    fail "$1: ranks did not start"
  fi
  local job
  job=$(cat "$dir/job")
  [ -e "/dev/shm/tide-$job-r0" ] || fail "$1: the rank could not create its shm file"
  local start
  start=$(now_ms)
  kill "-$1" "$tpid"
  wait "$tpid" || rc=$?
  local ms=$(( $(now_ms) - start ))
  echo "$1: exit $rc after $ms ms"
  [ "$rc" = "$2" ] || fail "$1: exit code $rc, expected $2; stderr: $(cat "$dir/err")"
  [ "$ms" -lt 2500 ] || fail "$1: took $ms ms"
  for f in pid0 pid1 child0 child1; do
    ! alive "$(cat "$dir/$f")" || fail "$1: $f (pid $(cat "$dir/$f")) still runs"
  done
  ! ls /dev/shm/tide-"$job"* > /dev/null 2>&1 || fail "$1: leftovers: $(ls /dev/shm/tide-"$job"*)"
}

cases=0
# SIGINT is forwarded as SIGINT (the ranks record it).
run_case INT 130 'trap "echo got > $d/int$TIDE_RANK; exit 1" INT'
[ -e "$WORK/case1/int0" ] && [ -e "$WORK/case1/int1" ] || fail "ranks did not receive SIGINT"
run_case TERM 143 ':'
run_case HUP 129 ':'
# Ranks that ignore the forwarded signal are killed 1 s later.
run_case INT 130 'trap "" INT TERM'

# tiderun killed outright: its ranks die with it (parent-death signal).
"$TIDERUN" -n 2 sh -c 'echo $$ > '"$WORK"'/orphan$TIDE_RANK; exec sleep 60' &
tpid=$!
wait_file "$WORK/orphan0" 100 && wait_file "$WORK/orphan1" 100 || fail "KILL: ranks did not start"
kill -KILL "$tpid"
wait "$tpid" 2>/dev/null
for r in 0 1; do
  for ((i = 0; i < 20; i++)); do alive "$(cat "$WORK/orphan$r")" || break; sleep 0.1; done
  ! alive "$(cat "$WORK/orphan$r")" || fail "KILL: rank $r outlived tiderun"
done

# Leftover shm files are removed on a successful run too.
"$TIDERUN" -n 2 sh -c ': > /dev/shm/tide-$TIDE_JOB_ID-ok$TIDE_RANK; echo $TIDE_JOB_ID' \
  > "$WORK/okjob" 2>/dev/null || fail "success run exited $?"
job=$(head -n1 "$WORK/okjob")
! ls /dev/shm/tide-"$job"* > /dev/null 2>&1 || fail "leftovers after success"
echo PASS
