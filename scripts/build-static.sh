#!/usr/bin/env bash
# Build the statically linked `iterion` the claw runner execs inside any
# sandbox image (busybox included): `-C target-feature=+crt-static` with an
# explicit `--target`, so the flag applies to the target crates only (build
# scripts and proc-macros stay dynamic host code) and the artifact lands in
# target/<triple>/ — the workspace's ordinary dev build is untouched.
# Prints the binary's path. Extra arguments go to cargo (e.g. --release).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"
profile=debug
for a in "$@"; do [[ $a == --release ]] && profile=release; done
log "static iterion ($ITERION_STATIC_TARGET, $profile)"
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --locked -p iterion-cli --bin iterion --target "$ITERION_STATIC_TARGET" "$@" >&2
bin="$CARGO_TARGET_DIR/$ITERION_STATIC_TARGET/$profile/iterion"
[[ -x $bin ]] || die "$bin was not produced"
echo "$bin"
