# --nnodes 2: two tiderun processes on 127.0.0.1 (node ranks 0 and 1, two
# ranks each) together start global ranks 0..3.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

show='echo "$TIDE_RANK $TIDE_WORLD_SIZE $TIDE_LOCAL_RANK $TIDE_LOCAL_WORLD_SIZE'
show+=' $TIDE_NODE_RANK $TIDE_NNODES $TIDE_MASTER_ADDR:$TIDE_MASTER_PORT"'
common=(--nnodes 2 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29555)
"$TIDERUN" "${common[@]}" --node-rank 0 sh -c "$show" > "$WORK/node0" &
pid0=$!
"$TIDERUN" "${common[@]}" --node_rank=1 sh -c "$show" > "$WORK/node1" &
pid1=$!
wait "$pid0" || fail "node 0 exited $?"
wait "$pid1" || fail "node 1 exited $?"

expect_line "$WORK/node0" "0 4 0 2 0 2 127.0.0.1:29555"
expect_line "$WORK/node0" "1 4 1 2 0 2 127.0.0.1:29555"
expect_line "$WORK/node1" "2 4 0 2 1 2 127.0.0.1:29555"
expect_line "$WORK/node1" "3 4 1 2 1 2 127.0.0.1:29555"
ranks=$(cat "$WORK/node0" "$WORK/node1" | cut -d' ' -f1 | sort -n | tr '\n' ' ')
[ "$ranks" = "0 1 2 3 " ] || fail "ranks were: $ranks"
echo PASS
