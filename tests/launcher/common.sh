# Shared helpers of the tiderun tests. Sourced by each test script, which is
# run as `bash <script> <path of tiderun>`.
set -u

TIDERUN=${1:?usage: bash $0 path/to/tiderun}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tiderun-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Milliseconds since the epoch.
now_ms() {
  echo $(( $(date +%s%N) / 1000000 ))
}

# True while process $1 exists and is not a zombie.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != "Z" ]
}

# Waits up to $2 tenths of a second for file $1 to exist.
wait_file() {
  local i
  for ((i = 0; i < $2; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# Asserts that file $1 contains exactly the line $2.
expect_line() {
  grep -qxF -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "missing line '$2'"; }
}
