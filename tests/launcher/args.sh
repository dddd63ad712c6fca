# tiderun argument handling: help, version, usage errors, missing program,
# argument pass-through and option spellings.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$TIDERUN" --help > "$WORK/help" || fail "--help exited $?"
grep -q -- '--nproc-per-node' "$WORK/help" || fail "--help does not list --nproc-per-node"
"$TIDERUN" -h > /dev/null || fail "-h exited $?"
"$TIDERUN" --version > "$WORK/version" || fail "--version exited $?"
grep -q '^tiderun ' "$WORK/version" || fail "--version printed '$(cat "$WORK/version")'"

# Usage errors: exit 2 with a message on stderr.
usage_error() {
  local rc=0
  "$TIDERUN" "$@" > /dev/null 2> "$WORK/err" || rc=$?
  [ "$rc" = 2 ] || fail "tiderun $* exited $rc, expected 2"
  grep -q '^tiderun: ' "$WORK/err" || fail "tiderun $* printed no error"
}
usage_error
usage_error -n 2
usage_error -n 0 true
usage_error -n x true
usage_error -n
usage_error --bogus true
usage_error --nnodes 2 --node-rank 2 true
usage_error --master-port 70000 true
usage_error --timeout -1 true
usage_error --prefix-output=1 true

# A program that does not exist: a clear message and exit 127, nothing started.
rc=0
"$TIDERUN" -n 2 /nonexistent/tide-no-such-program 2> "$WORK/err" || rc=$?
[ "$rc" = 127 ] || fail "missing program: exit $rc, expected 127"
grep -q "cannot run '/nonexistent/tide-no-such-program'" "$WORK/err" ||
  fail "missing program: message was '$(cat "$WORK/err")'"
rc=0
"$TIDERUN" tide-no-such-program-in-path 2> /dev/null || rc=$?
[ "$rc" = 127 ] || fail "missing program in PATH: exit $rc, expected 127"

: > "$WORK/not-executable"
rc=0
"$TIDERUN" "$WORK/not-executable" 2> /dev/null || rc=$?
[ "$rc" = 126 ] || fail "non-executable program: exit $rc, expected 126"

# The program's arguments pass through untouched, options after it included.
"$TIDERUN" -n 1 printf '<%s>' -n "a b" --x '' -- > "$WORK/out" || fail "printf exited $?"
[ "$(cat "$WORK/out")" = '<-n><a b><--x><><-->' ] || fail "argv was '$(cat "$WORK/out")'"
"$TIDERUN" -n 1 -- printf '<%s>' --help > "$WORK/out" || fail "-- printf exited $?"
[ "$(cat "$WORK/out")" = '<--help>' ] || fail "after --: argv was '$(cat "$WORK/out")'"

# Spellings of the rank count and of long options.
count_ranks() {
  "$TIDERUN" "$@" sh -c 'echo "$TIDE_WORLD_SIZE"' | wc -l
}
[ "$(count_ranks -n 3)" = 3 ] || fail "-n 3"
[ "$(count_ranks -n2)" = 2 ] || fail "-n2"
[ "$(count_ranks --np 2)" = 2 ] || fail "--np 2"
[ "$(count_ranks --nproc-per-node=4)" = 4 ] || fail "--nproc-per-node=4"
[ "$(count_ranks --nproc_per_node 3)" = 3 ] || fail "--nproc_per_node 3"
[ "$(count_ranks)" = 1 ] || fail "default rank count is not 1"
out=$("$TIDERUN" --master_addr=localhost --master_port 4242 sh -c \
  'echo "$TIDE_MASTER_ADDR:$TIDE_MASTER_PORT"') || fail "--master_addr run exited $?"
[ "$out" = "localhost:4242" ] || fail "master address was '$out'"
out=$("$TIDERUN" --tag-output sh -c 'echo hi') || fail "--tag-output run exited $?"
[ "$out" = "[0] hi" ] || fail "--tag-output printed '$out'"

# All ranks succeeding: exit 0.
"$TIDERUN" -n 4 true || fail "4 x true exited $?"
echo PASS
