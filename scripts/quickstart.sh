#!/usr/bin/env bash
# Quick start: install and start a container engine, build the local
# sandbox image, build iterion, and run the hello example inside its
# per-run sandbox. Safe to run again: every step reuses what is there.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"

"$ITERION_ROOT/scripts/setup.sh"
"$ITERION_ROOT/scripts/services.sh" docker
"$ITERION_ROOT/scripts/images.sh" docker

log "building iterion"
cargo build --locked --release -p iterion-cli
bin="$CARGO_TARGET_DIR/$ITERION_TARGET_TRIPLE/release/iterion"

export DOCKER_HOST="$ITERION_TEST_DOCKER_HOST"
export ITERION_STORE="${ITERION_STORE:-$ITERION_ROOT/.iterion}"
log "iterion run examples/hello.iter (store: $ITERION_STORE)"
"$bin" run examples/hello.iter "$@"
log "the run's events: $bin events <run id>   (ITERION_STORE=$ITERION_STORE DOCKER_HOST=$DOCKER_HOST)"
log "look at it in a browser: $bin studio   (ITERION_STORE=$ITERION_STORE; http://127.0.0.1:4891/)"
