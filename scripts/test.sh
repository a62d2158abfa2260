#!/usr/bin/env bash
# The whole test suite: installs and starts every backend the tests need
# (Docker Engine, Podman, PostgreSQL, local images), then runs every test.
# A backend that cannot be started fails the run; no test skips for lack of one.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"

"$ITERION_ROOT/scripts/setup.sh"
"$ITERION_ROOT/scripts/services.sh" docker podman postgres
"$ITERION_ROOT/scripts/images.sh" docker podman

log "cargo test (target dir $CARGO_TARGET_DIR)"
export INSTA_UPDATE=no
# Benches are compiled by clippy --all-targets in .ci/run and run by hand
# (scripts/bench.sh); `cargo test --all-targets` would run them in full.
cargo test --workspace --lib --bins --tests --locked "$@"

# The Kubernetes driver's golden manifests against the OpenAPI schemas
# (layer (a); its other layers are cargo tests above).
"$ITERION_ROOT/scripts/k8s-validate.sh"
