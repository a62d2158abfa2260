#!/usr/bin/env bash
# Quick start: install and start Docker, build the local sandbox image and
# iterion side by side, and run the hello example inside its per-run
# sandbox. Installs only what that run needs (scripts/test.sh installs the
# rest: Podman, PostgreSQL, NATS, the browser, the Claude Code CLI, the MCP
# servers). Safe to run again: every step reuses what is there.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"

"$ITERION_ROOT/scripts/setup.sh" hello
"$ITERION_ROOT/scripts/services.sh" docker

# The compile is CPU, the image build (debootstrap) network and disk: they
# overlap. The image leaves the Claude Code CLI out (the hello run and claw
# agents do not use it).
log "building iterion and the sandbox image side by side"
cargo build --locked --release -p iterion-cli &
build=$!
ITERION_SLIM_CLAUDE=0 "$ITERION_ROOT/scripts/images.sh" docker &
images=$!
wait "$images" || { kill "$build" 2>/dev/null || true; die "the image build failed"; }
wait "$build" || die "cargo build failed"
bin="$CARGO_TARGET_DIR/$ITERION_TARGET_TRIPLE/release/iterion"

export DOCKER_HOST="$ITERION_TEST_DOCKER_HOST"
export ITERION_STORE="${ITERION_STORE:-$ITERION_ROOT/.iterion}"
log "iterion run examples/hello.iter (store: $ITERION_STORE)"
"$bin" run examples/hello.iter "$@"
log "the run's events: $bin events <run id>   (ITERION_STORE=$ITERION_STORE DOCKER_HOST=$DOCKER_HOST)"
log "look at it in a browser: $bin studio   (ITERION_STORE=$ITERION_STORE; http://127.0.0.1:4891/)"
log "an agent in the sandbox, with your key:"
printf '  ANTHROPIC_API_KEY=sk-ant-... DOCKER_HOST=%s ITERION_STORE=%s %s run examples/agents.iter\n' \
  "$DOCKER_HOST" "$ITERION_STORE" "$bin" >&2
