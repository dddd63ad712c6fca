#!/usr/bin/env bash
# tide-train's command line: --config JSON equals the same flags, flags
# override it, a flag given twice takes its last value, --sample is the same
# text at one rank and at TP2. Usage: cli.sh TIDE_TRAIN TIDERUN
set -uo pipefail
tt=$1 run=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() { if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: '$2' vs '$3'"; fail=1; fi; }
losses() { python3 -c "import json,sys; print(' '.join('%.9f' % json.loads(l)['loss'] for l in open(sys.argv[1]) if 'loss' in l))" "$1"; }
printf 'the quick brown fox jumps over the lazy dog. %.0s' {1..300} > "$work/text.txt"
tiny=(--layers 2 --heads 4 --embd 64 --ctx 32 --batch 4 --eval-every 0 --log-every 0 --data "$work/text.txt")

cat > "$work/c.json" <<JSON
{"layers": 2, "heads": 4, "embd": 64, "ctx": 32, "batch": 4, "eval_every": 0, "log-every": 0,
 "steps": 3, "data": "$work/text.txt", "optimizer": "lamb"}
JSON
"$tt" "${tiny[@]}" --steps 3 --optimizer lamb --metrics "$work/a.jsonl" >/dev/null
"$tt" --config "$work/c.json" --metrics "$work/b.jsonl" >/dev/null
check "config file = flags" "$(losses "$work/a.jsonl")" "$(losses "$work/b.jsonl")"
"$tt" --config "$work/c.json" --steps 2 --metrics "$work/c.jsonl" >/dev/null
check "flags override the config" "$(wc -l < "$work/c.jsonl")" "2"
"$tt" "${tiny[@]}" --steps 5 --steps 2 --metrics "$work/d.jsonl" >/dev/null
check "a flag twice: the last value" "$(wc -l < "$work/d.jsonl")" "2"
echo '{"no_such_key": 1}' > "$work/bad.json"
out=$("$tt" --config "$work/bad.json" 2>&1)
check "unknown config key is an error" "$?$(grep -c 'unknown key' <<<"$out")" "11"

"$tt" "${tiny[@]}" --steps 30 --export "$work/w.safetensors" >/dev/null
s1=$("$tt" "${tiny[@]}" --steps 0 --init-from "$work/w.safetensors" --prompt "the " --sample 40 --top-k 1 | tail -c 41)
s2=$("$run" -n 2 "$tt" "${tiny[@]}" --tp 2 --steps 0 --init-from "$work/w.safetensors" --prompt "the " --sample 40 --top-k 1 | tail -c 41)
s3=$("$tt" "${tiny[@]}" --steps 0 --init-from "$work/w.safetensors" --prompt "the " --sample 40 --temperature 0.8 | tail -c 41)
check "--sample: 40 bytes" "${#s1}" "40"
check "--sample at TP2 = 1 rank" "$s1" "$s2"
[ "${#s3}" -ge 30 ] && echo "ok   --sample with temperature: '$s3'" || { echo "FAIL temperature sample '$s3'"; fail=1; }
exit $fail
