#!/usr/bin/env bash
# Bad input to tide-train: a clear message on every rank, a non-zero exit, and
# no checkpoint overwritten. Usage: bad_input.sh TIDE_TRAIN TIDERUN
set -uo pipefail
tt=$1 run=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tiny=(--layers 2 --heads 4 --embd 64 --ctx 32 --batch 4 --eval-every 0 --log-every 0)
fail=0

# expect NAME RANKS PATTERN -- command...: exit non-zero, PATTERN in the
# errors, one "tide-train: error" line per rank.
expect() {
  local name=$1 ranks=$2 pattern=$3
  shift 4
  local out rc n
  out=$("$@" 2>&1)
  rc=$?
  n=$(grep -c "tide-train: error" <<<"$out")
  if [ "$rc" -eq 0 ] || ! grep -q -- "$pattern" <<<"$out" || { [ "$ranks" -gt 0 ] && [ "$n" -ne "$ranks" ]; }; then
    echo "FAIL $name: exit $rc, $n error lines (want $ranks), pattern '$pattern'"
    echo "$out" | head -20
    fail=1
  else
    echo "ok   $name: exit $rc: $(grep -m1 -- "$pattern" <<<"$out")"
  fi
}

printf 'hello world, some text to learn from. %.0s' {1..400} > "$work/text.txt"
: > "$work/empty.txt"
expect world_size 3 "is not --dp 2" -- "$run" -n 3 "$tt" "${tiny[@]}" --dp 2 --data "$work/text.txt"
expect heads_tp 2 "not divisible by --tp 2" -- "$run" -n 2 "$tt" "${tiny[@]}" --tp 2 --heads 3 --embd 96 --data "$work/text.txt"
expect batch_dp 2 "not divisible by --dp 2" -- "$run" -n 2 "$tt" "${tiny[@]}" --batch 5 --data "$work/text.txt"
expect no_data 2 "/nonexistent" -- "$run" -n 2 "$tt" "${tiny[@]}" --data /nonexistent/text
expect empty_data 1 "empty" -- "$tt" "${tiny[@]}" --data "$work/empty.txt"
expect unknown_flag 0 "--no-such-flag" -- "$tt" --no-such-flag 3
expect bad_codec 1 "--compress" -- "$tt" "${tiny[@]}" --compress zip --data "$work/text.txt"

# Weights: a truncated and a corrupt safetensors file, another shape.
"$tt" "${tiny[@]}" --steps 0 --export "$work/w.safetensors" >/dev/null || { echo "FAIL export"; fail=1; }
head -c 1000 "$work/w.safetensors" > "$work/trunc.safetensors"
expect truncated 2 "trunc.safetensors" -- "$run" -n 2 "$tt" "${tiny[@]}" --steps 1 --init-from "$work/trunc.safetensors" --data "$work/text.txt"
cp "$work/w.safetensors" "$work/junk.safetensors"
printf '\xff\xff\xff\xff' | dd of="$work/junk.safetensors" bs=1 seek=0 conv=notrunc 2>/dev/null
expect corrupt 1 "junk.safetensors" -- "$tt" "${tiny[@]}" --steps 1 --init-from "$work/junk.safetensors" --data "$work/text.txt"
expect shape 1 "n_layer" -- "$tt" "${tiny[@]}" --layers 3 --steps 1 --init-from "$work/w.safetensors" --data "$work/text.txt"

# Checkpoints: another model shape, then a corrupt one; neither is overwritten.
ck="$work/ckpt"
"$run" -n 2 "$tt" "${tiny[@]}" --steps 4 --checkpoint-every 2 --checkpoint-dir "$ck" --data "$work/text.txt" >/dev/null 2>&1 || { echo "FAIL: making checkpoints"; fail=1; }
sum_before=$(find "$ck" -type f -print0 | sort -z | xargs -0 md5sum | md5sum)
expect ckpt_shape 2 "another model shape" -- "$run" -n 2 "$tt" "${tiny[@]}" --embd 128 --steps 8 --checkpoint-every 2 --resume --checkpoint-dir "$ck" --data "$work/text.txt"
newest=$(ls -d "$ck"/step_* | sort | tail -1)
printf 'garbage' | dd of="$newest/model.safetensors" bs=1 seek=20 conv=notrunc 2>/dev/null
sum_before=$(find "$ck" -type f -print0 | sort -z | xargs -0 md5sum | md5sum)
expect ckpt_corrupt 2 "model.safetensors" -- "$run" -n 2 "$tt" "${tiny[@]}" --steps 8 --checkpoint-every 2 --resume --checkpoint-dir "$ck" --data "$work/text.txt"
sum_after=$(find "$ck" -type f -print0 | sort -z | xargs -0 md5sum | md5sum)
if [ "$sum_before" != "$sum_after" ]; then echo "FAIL: a checkpoint was overwritten"; fail=1; else echo "ok   checkpoints untouched"; fi
exit $fail
