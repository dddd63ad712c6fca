# TIDE_MASTER_PORT: a free port by default (single node), --master-port when
# given, 29500 by default for multi-node jobs.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

port=$("$TIDERUN" -n 2 sh -c 'echo "$TIDE_MASTER_PORT"' | sort -u) || fail "run exited $?"
[[ $port =~ ^[0-9]+$ ]] || fail "ranks disagree on the port or it is not a number: '$port'"
[ "$port" -ge 1024 ] && [ "$port" -le 65535 ] || fail "port $port out of range"
[ "$port" != 29500 ] || fail "single-node default used the fixed port 29500"
# The chosen port can be bound on the master address.
if command -v python3 > /dev/null; then
  python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' \
    "$port" || fail "port $port is not free"
fi

out=$("$TIDERUN" --master-port 31337 sh -c 'echo "$TIDE_MASTER_PORT"')
[ "$out" = 31337 ] || fail "--master-port ignored: '$out'"
out=$("$TIDERUN" --nnodes 2 --node-rank 0 sh -c 'echo "$TIDE_MASTER_PORT"')
[ "$out" = 29500 ] || fail "multi-node default port: '$out'"
out=$("$TIDERUN" --nnodes 2 --node-rank 0 --master-port 29611 sh -c 'echo "$TIDE_MASTER_PORT"')
[ "$out" = 29611 ] || fail "multi-node --master-port: '$out'"
echo PASS
