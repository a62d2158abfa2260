#!/usr/bin/env bash
# The Kubernetes driver's live suite against a real cluster: the shared
# driver conformance checks (lifecycle and labels, exec, stdin, streaming,
# kill, zombies, archives, a pod deleted from outside) on pods the driver
# creates in the namespace of the current context.
#
# Needs a reachable cluster: KUBECONFIG (or ~/.kube/config, or the
# in-cluster service account) with rights to create and delete pods,
# secrets and network policies, and pods/exec, in the namespace
# (ITERION_SANDBOX_K8S_NAMESPACE or the context's). The image is
# ITERION_K8S_LIVE_IMAGE (default busybox:1.36), pulled by the cluster.
# CI does not run this script: no API server can be installed there.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ITERION_ROOT"

if [ -z "${KUBECONFIG:-}" ] && [ ! -f "$HOME/.kube/config" ] && [ -z "${KUBERNETES_SERVICE_HOST:-}" ]; then
    die "no cluster: set KUBECONFIG (or provide ~/.kube/config, or run in a pod)"
fi
log "live Kubernetes suite (target dir $CARGO_TARGET_DIR)"
cargo test -p iterion-driver-k8s --test live --locked -- --test-threads=2 "$@"
