# A failing rank stops the whole job: peers are gone within 2 s (SIGTERM,
# SIGKILL after 1 s) and tiderun exits with the failing rank's code.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# $1: extra shell code for the sleeping peers (e.g. ignore SIGTERM).
# Rank 1 exits 3 once the peers run; prints "<exit code> <ms from the failure
# to tiderun's exit>" and checks that no peer survived.
run_case() {
  local dir="$WORK/case$2" rc=0
  mkdir -p "$dir"
  "$TIDERUN" -n 3 sh -c '
    d='"$dir"'
    if [ "$TIDE_RANK" = 1 ]; then
      while [ ! -e $d/pid0 ] || [ ! -e $d/pid2 ]; do sleep 0.05; done
      echo $(( $(date +%s%N) / 1000000 )) > $d/failed_at
      exit 3
    fi
    '"$1"'
    echo $$ > $d/pid$TIDE_RANK.tmp && mv $d/pid$TIDE_RANK.tmp $d/pid$TIDE_RANK
    exec sleep 60' 2> "$dir/err" || rc=$?
  local end
  end=$(now_ms)
  [ -e "$dir/failed_at" ] || fail "rank 1 never failed: $(cat "$dir/err")"
  local elapsed=$(( end - $(cat "$dir/failed_at") ))
  for r in 0 2; do
    ! alive "$(cat "$dir/pid$r")" || fail "rank $r (pid $(cat "$dir/pid$r")) still runs"
  done
  grep -q 'rank 1 .*exited with code 3' "$dir/err" || fail "no failure message: $(cat "$dir/err")"
  echo "$rc $elapsed"
}

read -r rc ms < <(run_case ':' 1)
echo "peers honouring SIGTERM: exit $rc, stopped after ${ms} ms"
[ "$rc" = 3 ] || fail "exit code $rc, expected 3"
[ "$ms" -lt 2000 ] || fail "took $ms ms to stop the job"

read -r rc ms < <(run_case 'trap "" TERM' 2)
echo "peers ignoring SIGTERM: exit $rc, stopped after ${ms} ms"
[ "$rc" = 3 ] || fail "exit code $rc, expected 3"
[ "$ms" -ge 900 ] || fail "SIGKILL came after only $ms ms (grace is 1 s)"
[ "$ms" -lt 2000 ] || fail "took $ms ms to stop the job"

# A rank killed by a signal: 128 + signal.
rc=0
"$TIDERUN" -n 2 sh -c '[ "$TIDE_RANK" = 0 ] && kill -KILL $$; exec sleep 60' 2>/dev/null || rc=$?
[ "$rc" = 137 ] || fail "rank killed by SIGKILL: exit $rc, expected 137"

# The first failure's code wins, and a zero exit of one rank does not stop others.
rc=0
"$TIDERUN" -n 2 sh -c 'if [ "$TIDE_RANK" = 0 ]; then exit 0; fi; sleep 0.3; exit 7' \
  2>/dev/null || rc=$?
[ "$rc" = 7 ] || fail "exit $rc, expected 7"
echo PASS
