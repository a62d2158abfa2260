#!/usr/bin/env bash
# Validate every golden manifest of the Kubernetes driver (the objects it
# renders, pinned by crates/iterion-driver-k8s/tests/integration/golden.rs)
# against the official OpenAPI schemas of two Kubernetes versions, strictly
# (unknown fields are errors). Offline. A missing validator fails the run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"

# The API version the driver is built for (k8s-openapi feature v1_33) and
# an older minor still widely run.
VERSIONS=(1.33.0 1.30.0)

[[ -x $ITERION_K8S_VALIDATE ]] || die "kubernetes-validate is missing at $ITERION_K8S_VALIDATE: run scripts/setup.sh"
mapfile -t files < <(find crates/iterion-driver-k8s/tests/golden -name '*.json' | sort)
((${#files[@]})) || die "no golden manifests found"
for v in "${VERSIONS[@]}"; do
  log "kubernetes-validate --strict -k $v (${#files[@]} objects)"
  "$ITERION_K8S_VALIDATE" --strict --quiet -k "$v" "${files[@]}"
done
