# --prefix-output: every line of rank r, on stdout and on stderr, starts with
# "[r] "; lines are never mixed; partial last lines are flushed.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$TIDERUN" -n 2 --prefix-output sh -c \
  'echo "out $TIDE_RANK"; echo "err $TIDE_RANK" >&2; printf "tail $TIDE_RANK"' \
  > "$WORK/out" 2> "$WORK/err" || fail "run exited $?"
for r in 0 1; do
  expect_line "$WORK/out" "[$r] out $r"
  expect_line "$WORK/out" "[$r] tail $r"
  expect_line "$WORK/err" "[$r] err $r"
done
[ "$(wc -l < "$WORK/out")" = 4 ] || fail "stdout: $(cat "$WORK/out")"
[ "$(wc -l < "$WORK/err")" = 2 ] || fail "stderr: $(cat "$WORK/err")"

# Many lines from several ranks at once: all arrive whole and prefixed.
"$TIDERUN" -n 4 --prefix-output sh -c \
  'i=0; while [ $i -lt 500 ]; do
     echo "rank $TIDE_RANK line $i xxxxxxxxxxxxxxxxxxxxxxxx"; i=$((i+1))
   done' \
  > "$WORK/many" || fail "many-lines run exited $?"
[ "$(wc -l < "$WORK/many")" = 2000 ] || fail "expected 2000 lines, got $(wc -l < "$WORK/many")"
bad=$(grep -cvE '^\[([0-3])\] rank \1 line [0-9]+ x{24}$' "$WORK/many")
[ "$bad" = 0 ] || fail "$bad malformed lines: $(grep -v '^\[[0-3]\] r' "$WORK/many" | head -n 3)"

# Output of a failing rank is still relayed, and the exit code propagates.
rc=0
"$TIDERUN" -n 2 --prefix-output sh -c 'echo "bye $TIDE_RANK"; exit 5' \
  > "$WORK/out" 2>/dev/null || rc=$?
[ "$rc" = 5 ] || fail "exit code $rc, expected 5"
grep -q '^\[[01]\] bye [01]$' "$WORK/out" || fail "failing rank's output lost: $(cat "$WORK/out")"

# Without the flag, ranks write straight to tiderun's stdout.
out=$("$TIDERUN" -n 1 sh -c 'echo plain') || fail "plain run exited $?"
[ "$out" = plain ] || fail "unprefixed output was '$out'"
echo PASS
