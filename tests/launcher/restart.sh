# --max-restarts N: a job whose rank died is stopped and started again (up to
# N times) with TIDE_RESTART_COUNT=<k> and a fresh rendezvous; successes,
# signals to tiderun and timeouts are never restarted.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# $1: file, $2: expected content (lines joined by spaces).
expect_content() {
  local got
  got=$(tr '\n' ' ' < "$1" 2>/dev/null)
  [ "$got" = "$2 " ] || fail "$1: expected '$2', got '$got'"
}

"$TIDERUN" --help | grep -q -- '--max-restarts N' || fail "--help does not list --max-restarts"
grep -q 'TIDE_RESTART_COUNT' <("$TIDERUN" --help) || fail "--help does not name TIDE_RESTART_COUNT"

# Usage errors: bad counts, and restarts of a multi-node job.
for args in "--max-restarts -1" "--max-restarts x" "--max-restarts" \
  "--max-restarts 1 --nnodes 2 --node-rank 0"; do
  rc=0
  # shellcheck disable=SC2086 # word splitting wanted
  "$TIDERUN" $args true 2> "$WORK/err" || rc=$?
  [ "$rc" = 2 ] || fail "tiderun $args true: exit $rc, expected 2"
  grep -q '^tiderun: .*max-restarts' "$WORK/err" || fail "tiderun $args: '$(cat "$WORK/err")'"
done
"$TIDERUN" --max-restarts 0 --nnodes 2 --node-rank 1 true || fail "--max-restarts 0 multi-node"

# (a) Rank 1 kills itself with SIGKILL on the first attempt only (after its
# peers are up); the restarted job succeeds. Each rank logs its restart count
# and rendezvous; in the second attempt rank 0 checks that the first
# attempt's peers are gone.
cat > "$WORK/rank_a.sh" << 'EOF'
d=$1
echo "$TIDE_RESTART_COUNT" >> "$d/seen$TIDE_RANK"
echo "$TIDE_RESTART_COUNT $TIDE_MASTER_PORT $TIDE_JOB_ID ${TIDE_SECRET-unset}" >> "$d/rdzv$TIDE_RANK"
if [ "$TIDE_RESTART_COUNT" = 0 ]; then
  if [ "$TIDE_RANK" = 1 ]; then
    while [ ! -e "$d/up0" ] || [ ! -e "$d/up2" ]; do sleep 0.02; done
    kill -KILL $$
  fi
  echo $$ > "$d/pid$TIDE_RANK"
  : > "$d/up$TIDE_RANK"
  exec sleep 30
fi
if [ "$TIDE_RANK" = 0 ]; then
  for r in 0 2; do
    if kill -0 "$(cat "$d/pid$r")" 2> /dev/null; then echo "rank $r" >> "$d/stale"; fi
  done
fi
exit 0
EOF
mkdir "$WORK/a"
start=$(now_ms)
rc=0
env -u TIDE_SECRET "$TIDERUN" -n 3 --max-restarts 1 bash "$WORK/rank_a.sh" "$WORK/a" \
  2> "$WORK/a/err" || rc=$?
echo "(a) SIGKILL on the first attempt: exit $rc after $(( $(now_ms) - start )) ms"
[ "$rc" = 0 ] || fail "(a) exit $rc, expected 0: $(cat "$WORK/a/err")"
[ "$(grep -c 'restarting the job' "$WORK/a/err")" = 1 ] || fail "(a) restart lines: $(cat "$WORK/a/err")"
expect_line "$WORK/a/err" \
  "tiderun: restarting the job (restart 1 of 1): rank 1 was killed by signal 9 (SIGKILL)"
for r in 0 1 2; do expect_content "$WORK/a/seen$r" "0 1"; done
[ ! -e "$WORK/a/stale" ] || fail "(a) first attempt's ranks ran on: $(cat "$WORK/a/stale")"

# (d) Within an attempt the ranks agree on the rendezvous; between attempts
# port, job id and secret all differ.
for n in 1 2; do
  [ "$(sed -n "${n}p" "$WORK"/a/rdzv[012] | sort -u | wc -l)" = 1 ] ||
    fail "(d) ranks disagree in attempt $n: $(sed -n "${n}p" "$WORK"/a/rdzv[012])"
done
read -r k0 port0 job0 secret0 < <(sed -n 1p "$WORK/a/rdzv0")
read -r k1 port1 job1 secret1 < <(sed -n 2p "$WORK/a/rdzv0")
[ "$k0 $k1" = "0 1" ] || fail "(d) restart counts '$k0 $k1'"
[[ $port1 =~ ^[0-9]+$ ]] && [ "$port1" != "$port0" ] || fail "(d) port '$port0' then '$port1'"
[[ $job1 =~ ^[0-9a-f]{16}$ ]] && [ "$job1" != "$job0" ] || fail "(d) job id '$job0' then '$job1'"
[[ $secret1 =~ ^[0-9a-f]{32}$ ]] && [ "$secret1" != "$secret0" ] ||
  fail "(d) secret '$secret0' then '$secret1'"
echo "(d) port $port0 -> $port1, job id $job0 -> $job1"

# (b) A rank that always exits 3: two restarts, then the normal failure exit.
mkdir "$WORK/b"
rc=0
"$TIDERUN" -n 2 --max-restarts 2 sh -c '
  echo "$TIDE_RESTART_COUNT" >> '"$WORK"'/b/seen$TIDE_RANK
  [ "$TIDE_RANK" = 1 ] && exit 3
  exec sleep 30' 2> "$WORK/b/err" || rc=$?
echo "(b) always failing: exit $rc"
[ "$rc" = 3 ] || fail "(b) exit $rc, expected 3: $(cat "$WORK/b/err")"
[ "$(grep -c 'restarting the job' "$WORK/b/err")" = 2 ] || fail "(b) restart lines: $(cat "$WORK/b/err")"
expect_line "$WORK/b/err" "tiderun: restarting the job (restart 1 of 2): rank 1 exited with status 3"
expect_line "$WORK/b/err" "tiderun: restarting the job (restart 2 of 2): rank 1 exited with status 3"
grep -q '^tiderun: not restarting' "$WORK/b/err" || fail "(b) no final line: $(cat "$WORK/b/err")"
expect_content "$WORK/b/seen1" "0 1 2"

# (c) Without --max-restarts (and with 0) a failure is not restarted, and
# TIDE_RESTART_COUNT is still set.
for flags in "" "--max-restarts=0"; do
  rm -f "$WORK/c_seen"
  rc=0
  # shellcheck disable=SC2086 # word splitting wanted
  "$TIDERUN" -n 2 $flags sh -c '
    [ "$TIDE_RANK" = 1 ] || exec sleep 30
    echo "${TIDE_RESTART_COUNT-unset}" >> '"$WORK"'/c_seen; exit 4' 2> "$WORK/c_err" || rc=$?
  [ "$rc" = 4 ] || fail "(c) '$flags': exit $rc, expected 4"
  ! grep -q 'restart' "$WORK/c_err" || fail "(c) '$flags' restarted: $(cat "$WORK/c_err")"
  expect_content "$WORK/c_seen" "0"
done

# A job that succeeds is run once, also with restarts left (the = form).
out=$("$TIDERUN" -n 2 --max-restarts=2 sh -c 'echo "$TIDE_RESTART_COUNT"') || fail "success: $?"
[ "$out" = "0
0" ] || fail "successful job: '$out'"

# A signal to tiderun stops the job without a restart (128 + signal).
mkdir "$WORK/s"
"$TIDERUN" -n 2 --max-restarts 3 sh -c '
  echo "$TIDE_RESTART_COUNT" >> '"$WORK"'/s/seen$TIDE_RANK
  : > '"$WORK"'/s/up$TIDE_RANK; exec sleep 30' 2> "$WORK/s/err" &
tpid=$!
if ! wait_file "$WORK/s/up0" 100 || ! wait_file "$WORK/s/up1" 100; then
  kill -KILL "$tpid"
  fail "signal: ranks did not start"
fi
kill -TERM "$tpid"
rc=0
wait "$tpid" || rc=$?
[ "$rc" = 143 ] || fail "signal: exit $rc, expected 143: $(cat "$WORK/s/err")"
! grep -q 'restarting the job' "$WORK/s/err" || fail "signal restarted the job: $(cat "$WORK/s/err")"
for r in 0 1; do expect_content "$WORK/s/seen$r" "0"; done

# ... also when it comes while tiderun stops the ranks after a failure (the
# peers ignore SIGTERM, so that takes the 1 s grace): no restart, the
# failure's exit code, and no waiting for the rest of the grace period.
mkdir "$WORK/f"
"$TIDERUN" -n 2 --max-restarts 3 sh -c '
  echo "$TIDE_RESTART_COUNT" >> '"$WORK"'/f/seen$TIDE_RANK
  if [ "$TIDE_RANK" = 1 ]; then
    while [ ! -e '"$WORK"'/f/up0 ]; do sleep 0.02; done
    exit 5
  fi
  trap "" TERM; : > '"$WORK"'/f/up0; sleep 30' 2> "$WORK/f/err" &
tpid=$!
for ((i = 0; i < 100; i++)); do
  grep -q 'stopping all ranks' "$WORK/f/err" && break
  sleep 0.05
done
kill -INT "$tpid"
rc=0
wait "$tpid" || rc=$?
[ "$rc" = 5 ] || fail "signal while stopping: exit $rc, expected 5: $(cat "$WORK/f/err")"
! grep -q 'restarting the job' "$WORK/f/err" || fail "signal while stopping restarted the job"
expect_content "$WORK/f/seen1" "0"

# A timeout (per attempt) is not restarted either.
rc=0
"$TIDERUN" -n 2 --max-restarts 2 --timeout 0.3 sleep 30 2> "$WORK/t_err" || rc=$?
[ "$rc" = 124 ] || fail "timeout: exit $rc, expected 124"
! grep -q 'restarting the job' "$WORK/t_err" || fail "timeout restarted the job: $(cat "$WORK/t_err")"
echo PASS
