#!/usr/bin/env bash
# Every benchmark, each printing its figures side by side with a baseline
# measured in the same process (machines are noisy: read the ratios).
# Needs the same backends as the tests.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"
"$ITERION_ROOT/scripts/setup.sh"
"$ITERION_ROOT/scripts/services.sh" docker podman postgres
"$ITERION_ROOT/scripts/images.sh" docker podman

benches=(
  "iterion-dsl parse"                 # parse+compile MB/s vs serde_json and a line scan
  "iterion-e2e store_events"          # events/s, sqlite and postgres vs JSONL+fsync
  "iterion-driver-docker engine"      # start / exec / archive vs the docker CLI
  "iterion-netproxy proxy"            # added latency, CONNECT throughput, RSS per tunnel
  "iterion-netproxy inspect"          # TLS inspection p50/p99 and 100 MB throughput vs tunnel and direct
  "iterion-e2e readback_drain"        # drain 500 MB / 1,000 files vs tar -x and docker cp
  "iterion-runtime redact"            # secret masking MB/s vs a line split and exact replace
  "iterion-e2e agent_runner"          # in-box claw tool call and turn vs the same loop on the host
  "iterion-cli queue"                 # cloud mode: runs/min and submit→claimed p50/p95, 1/2/4 runners vs iterion run
)
for b in "${benches[@]}"; do
  read -r crate bench _ <<<"$b"
  if [[ $# -gt 0 && " $* " != *" $crate "* ]]; then continue; fi
  log "bench $crate/$bench"
  cargo bench --locked -p "$crate" --bench "$bench"
done
