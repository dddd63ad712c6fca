# --timeout SEC stops the job and exits 124.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

start=$(now_ms)
rc=0
"$TIDERUN" --timeout 1 -n 2 sh -c 'echo $$ > '"$WORK"'/pid$TIDE_RANK; exec sleep 60' \
  2> "$WORK/err" || rc=$?
ms=$(( $(now_ms) - start ))
echo "timeout: exit $rc after $ms ms"
[ "$rc" = 124 ] || fail "exit code $rc, expected 124"
[ "$ms" -ge 900 ] && [ "$ms" -lt 3000 ] || fail "took $ms ms for a 1 s timeout"
for r in 0 1; do
  ! alive "$(cat "$WORK/pid$r")" || fail "rank $r still runs"
done
grep -q timeout "$WORK/err" || fail "no timeout message: $(cat "$WORK/err")"
# A job that finishes in time is not affected; 0 means no limit.
"$TIDERUN" --timeout 30 -n 2 true || fail "short job with --timeout exited $?"
"$TIDERUN" --timeout 0 -n 1 sleep 0.2 || fail "--timeout 0 job exited $?"
echo PASS
