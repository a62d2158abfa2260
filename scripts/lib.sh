# shellcheck shell=bash
# Shared settings of the project's scripts: where the test engines live and
# how tests find them. Sourced, never executed.

ITERION_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ITERION_ROOT

# Dedicated sockets so tests never touch an operator's own engines.
export ITERION_TEST_DOCKER_HOST="${ITERION_TEST_DOCKER_HOST:-unix:///run/iterion-test-docker.sock}"
export ITERION_TEST_PODMAN_HOST="${ITERION_TEST_PODMAN_HOST:-unix:///run/iterion-test-podman.sock}"
export ITERION_TEST_POSTGRES_URL="${ITERION_TEST_POSTGRES_URL:-postgres://iterion:iterion-test@127.0.0.1:5432/iterion_test}"

# Images every test and example uses; built locally (no registry here).
export ITERION_TEST_BUSYBOX_IMAGE="${ITERION_TEST_BUSYBOX_IMAGE:-iterion-test/busybox:local}"
export ITERION_TEST_SLIM_IMAGE="${ITERION_TEST_SLIM_IMAGE:-iterion-sandbox-slim:local}"

# The manifest validator of the Kubernetes driver's golden files (setup.sh
# installs it; scripts/k8s-validate.sh runs it).
export ITERION_K8S_VALIDATE="${ITERION_K8S_VALIDATE:-/var/cache/iterion-tools/k8s-validate/bin/kubernetes-validate}"
export ITERION_K8S_VALIDATE_VERSION="${ITERION_K8S_VALIDATE_VERSION:-1.33.1}"

# The Claude Code CLI, installed by setup.sh (pinned: the stream-json
# protocol the claude_code backend parses is the CLI's).
export ITERION_CLAUDE_CODE_VERSION="${ITERION_CLAUDE_CODE_VERSION:-2.1.332}"
export ITERION_CLAUDE_CODE_DIR="${ITERION_CLAUDE_CODE_DIR:-/var/cache/iterion-claude-code}"
export ITERION_CLAUDE_CLI="${ITERION_CLAUDE_CLI:-$ITERION_CLAUDE_CODE_DIR/node_modules/@anthropic-ai/claude-code-linux-x64/claude}"
# Real MCP servers from the npm registry (issue 20 tests), pinned, in a cache
# dir; ITERION_MCP_SERVERS_DIR/node_modules holds them and their SDK.
export ITERION_MCP_SERVER_FILESYSTEM_VERSION="${ITERION_MCP_SERVER_FILESYSTEM_VERSION:-2026.8.31}"
export ITERION_MCP_SERVER_EVERYTHING_VERSION="${ITERION_MCP_SERVER_EVERYTHING_VERSION:-2026.8.31}"
export ITERION_MCP_SERVERS_DIR="${ITERION_MCP_SERVERS_DIR:-/var/cache/iterion-mcp-servers}"

# A shared target dir keeps CI incremental on one machine; absent, cargo builds from scratch.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/iterion-target}"

# The ordinary build is static (.cargo/config.toml: build.target plus
# +crt-static), so artifacts land under target/<triple>/. The config names
# x86_64; an aarch64 machine builds its own triple.
if [[ $(uname -m) == aarch64 ]]; then
  export CARGO_BUILD_TARGET="${CARGO_BUILD_TARGET:-aarch64-unknown-linux-gnu}"
fi
ITERION_TARGET_TRIPLE="${CARGO_BUILD_TARGET:-x86_64-unknown-linux-gnu}"
export ITERION_TARGET_TRIPLE

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
