# The environment tiderun gives each rank.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

show='echo "$TIDE_RANK $TIDE_WORLD_SIZE $TIDE_LOCAL_RANK $TIDE_LOCAL_WORLD_SIZE'
show+=' $TIDE_NODE_RANK $TIDE_NNODES $TIDE_MASTER_ADDR $TIDE_JOB_ID ${TIDE_SECRET-unset}"'

env -u TIDE_SECRET "$TIDERUN" -n 3 sh -c "$show" > "$WORK/out" || fail "run exited $?"
[ "$(wc -l < "$WORK/out")" = 3 ] || fail "expected 3 lines, got: $(cat "$WORK/out")"
for r in 0 1 2; do
  grep -q "^$r 3 $r 3 0 1 127.0.0.1 " "$WORK/out" || fail "rank $r: $(cat "$WORK/out")"
done
# One job id (16 hex) and one secret (32 hex) shared by all ranks.
[ "$(cut -d' ' -f8 "$WORK/out" | sort -u | wc -l)" = 1 ] || fail "job ids differ"
[ "$(cut -d' ' -f9 "$WORK/out" | sort -u | wc -l)" = 1 ] || fail "secrets differ"
job=$(head -n1 "$WORK/out" | cut -d' ' -f8)
secret=$(head -n1 "$WORK/out" | cut -d' ' -f9)
[[ $job =~ ^[0-9a-f]{16}$ ]] || fail "job id '$job' is not 16 hex characters"
[[ $secret =~ ^[0-9a-f]{32}$ ]] || fail "secret '$secret' is not 32 hex characters"

# Fresh values per job.
env -u TIDE_SECRET "$TIDERUN" sh -c "$show" > "$WORK/out2" || fail "second run exited $?"
[ "$(cut -d' ' -f8 "$WORK/out2")" != "$job" ] || fail "job id repeated"
[ "$(cut -d' ' -f9 "$WORK/out2")" != "$secret" ] || fail "secret repeated"

# A secret set by the user wins; launcher variables set by the user are replaced.
out=$(TIDE_SECRET=user-secret TIDE_RANK=99 "$TIDERUN" sh -c 'echo "$TIDE_RANK $TIDE_SECRET"')
[ "$out" = "0 user-secret" ] || fail "user secret / rank override: '$out'"

# Multi-node: no generated secret; passed through only when set.
out=$(env -u TIDE_SECRET "$TIDERUN" --nnodes 2 --node-rank 1 sh -c 'echo "${TIDE_SECRET-unset}"')
[ "$out" = unset ] || fail "multi-node job got a secret: '$out'"
out=$(TIDE_SECRET=s3 "$TIDERUN" --nnodes 2 --node-rank 1 sh -c 'echo "${TIDE_SECRET-unset}"')
[ "$out" = s3 ] || fail "multi-node job lost the user's secret: '$out'"

# torchrun's variables, for PyTorch scripts: MASTER_PORT is the store's port,
# a free one other than TIDE_MASTER_PORT; on several nodes the one after it;
# an exported MASTER_PORT is kept.
tshow='echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $ROLE_RANK'
tshow+=' $ROLE_WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $MASTER_ADDR $MASTER_PORT $TIDE_MASTER_PORT"'
env -u MASTER_PORT "$TIDERUN" -n 3 sh -c "$tshow" > "$WORK/tout" || fail "torch vars run exited $?"
for r in 0 1 2; do
  grep -q "^$r 3 $r 3 0 $r 3 0 127.0.0.1 [0-9]" "$WORK/tout" || fail "rank $r: $(cat "$WORK/tout")"
done
[ "$(cut -d' ' -f10 "$WORK/tout" | sort -u | wc -l)" = 1 ] || fail "MASTER_PORT differs"
read -r -a f < "$WORK/tout"
[ "${f[9]}" != "${f[10]}" ] || fail "MASTER_PORT = TIDE_MASTER_PORT = ${f[9]}"
out=$(env -u MASTER_PORT "$TIDERUN" -n 2 --nnodes 2 --node-rank 1 --master-port 31000 sh -c "$tshow")
grep -q "^2 4 0 2 1 2 4 0 127.0.0.1 31001 31000" <<< "$out" || fail "two nodes: '$out'"
out=$(MASTER_PORT=29877 "$TIDERUN" sh -c 'echo "$MASTER_PORT"')
[ "$out" = 29877 ] || fail "exported MASTER_PORT not kept: '$out'"

# Other variables pass through.
out=$(TIDE_TEST_OTHER=kept "$TIDERUN" sh -c 'echo "$TIDE_TEST_OTHER"')
[ "$out" = kept ] || fail "environment not passed through: '$out'"
echo PASS
