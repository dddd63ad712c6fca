#!/usr/bin/env bash
# Sourced by .ci/run (needs $jobs). Builds sanitized trees with only what the chosen suites need.

# Ninja targets the tests of the given suites need (their executables, the
# programs named in their arguments, their declared dependencies); all
# suites when none is given. Saves building perf/ and trainer/ twice more.
suite_targets() {  # builddir [suite...]
  python3 - "$@" <<'PY'
import json, os, subprocess, sys
build = os.path.abspath(sys.argv[1])
want = set(sys.argv[2:])
skip = {"perf"}
intro = lambda what: json.loads(subprocess.check_output(["meson", "introspect", build, what]))
byid = {t["id"]: t for t in intro("--targets")}
built = {f for t in byid.values() for f in t.get("filename", [])}
out = set()
for t in intro("--tests"):
    suites = {s.split(":")[-1] for s in t["suite"]}
    if (want and not suites & want) or (not want and suites <= skip):
        continue
    for dep in t.get("depends", []):
        out.update(os.path.relpath(f, build) for f in byid.get(dep, {}).get("filename", []))
    for arg in t["cmd"]:
        if arg in built:  # a program of this build (not a folder such as perf/)
            out.add(os.path.relpath(arg, build))
print(" ".join(sorted(t for t in out if not t.startswith(".."))))
PY
}

# SANITIZED_MESON_ARGS: extra meson options for the tree (word-split). Unset:
# for ASan, -O1 and -g1 (line tables: enough for symbolized stacks; both
# compile faster than debugoptimized's -O2 -g); other sanitizers keep the
# meson defaults (debugoptimized) unless the caller sets it.
sanitized_build() {  # dir sanitizers [suite...]
  local dir=$1 san=$2 ucx=auto extra
  shift 2
  # libucm (UCX) hooks madvise and crashes TSan at thread exit: no UCX there.
  [ "$san" = thread ] && ucx=disabled
  extra=${SANITIZED_MESON_ARGS-}
  if [ -z "${SANITIZED_MESON_ARGS+set}" ] && [[ $san == address* ]]; then
    extra="-Doptimization=1 -Ddebug=false -Dc_args=-g1 -Dcpp_args=-g1"
  fi
  if [ -d "$dir" ]; then
    # shellcheck disable=SC2086
    meson setup --reconfigure "$dir" -Db_sanitize="$san" -Db_lundef=false -Ducx="$ucx" \
      $extra >/dev/null
  else
    # shellcheck disable=SC2086
    meson setup "$dir" -Db_sanitize="$san" -Db_lundef=false -Dbuildtype=debugoptimized \
      -Dmpi=disabled -Dcuda=disabled -Dtorch=disabled -Ducx="$ucx" $extra >/dev/null
  fi
  local t0
  t0=$(date +%s)
  # shellcheck disable=SC2046
  ninja -C "$dir" -j"$jobs" $(suite_targets "$dir" "$@")
  echo "== $dir built in $(( $(date +%s) - t0 )) s"
}

