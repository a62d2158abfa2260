#!/usr/bin/env bash
# Install what iterion's examples and tests need on a fresh Debian 12 machine:
# Docker Engine, Podman, PostgreSQL, NATS with JetStream (cloud mode's queue;
# its tests start their own nats-server), nftables (the per-run egress rules),
# the tools to build local images, and Chromium with its WebDriver (the
# studio's browser tests: /usr/bin/chromium, /usr/bin/chromedriver).
#
# `setup.sh hello` (the quick start) installs only what a sandboxed run on
# Docker needs: Docker Engine, nftables, and busybox-static and debootstrap
# to build the local images; `scripts/test.sh` (plain `setup.sh`) installs
# the rest later.
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

profile=${1:-all}
case $profile in
  hello) packages=(docker.io runc iptables nftables busybox-static debootstrap curl ca-certificates) ;;
  all) packages=(docker.io podman runc catatonit iptables nftables busybox-static debootstrap postgresql nats-server uidmap iproute2 curl ca-certificates python3 python3-venv chromium chromium-driver) ;;
  *) die "setup.sh: unknown profile $profile (hello, all)" ;;
esac

need=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The hello run needs nothing more: Podman's configuration, the Claude Code
# CLI, the MCP servers and the manifest validator are the tests'.
[[ $profile == hello ]] && exit 0

# Podman on this VM needs runc + cgroupfs and ulimits below the VM's hard
# limits (crun refuses the cgroup v1/v2 hybrid; the VM lacks CAP_SYS_RESOURCE).
mkdir -p /etc/containers
if ! grep -q 'iterion' /etc/containers/containers.conf 2>/dev/null; then
  cat >/etc/containers/containers.conf <<'CONF'
# written by iterion scripts/setup.sh
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
fi

# The Claude Code CLI (agent tests run it for real): the npm package ships
# the native Linux binary in its platform package; the wrapper's postinstall
# is not needed. Installed once into a cache dir and reused.
if [[ ! -x $ITERION_CLAUDE_CLI ]]; then
  # Debian's npm, unless a node distribution already brings its own.
  if ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
  log "installing @anthropic-ai/claude-code@$ITERION_CLAUDE_CODE_VERSION into $ITERION_CLAUDE_CODE_DIR"
  mkdir -p "$ITERION_CLAUDE_CODE_DIR"
  npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
    --prefix "$ITERION_CLAUDE_CODE_DIR" "@anthropic-ai/claude-code@$ITERION_CLAUDE_CODE_VERSION" >/dev/null
  [[ -x $ITERION_CLAUDE_CLI ]] || die "the claude CLI is not at $ITERION_CLAUDE_CLI after npm install"
fi

# Real MCP servers for the MCP tests (@modelcontextprotocol's filesystem and
# everything servers, which bring the MCP SDK the tests' own small servers
# use), pinned, into a cache dir; the marker names the pinned versions.
mcp_marker="$ITERION_MCP_SERVERS_DIR/.iterion-$ITERION_MCP_SERVER_FILESYSTEM_VERSION-$ITERION_MCP_SERVER_EVERYTHING_VERSION"
if [[ ! -f $mcp_marker ]]; then
  if ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
  log "installing MCP servers into $ITERION_MCP_SERVERS_DIR"
  mkdir -p "$ITERION_MCP_SERVERS_DIR"
  npm install --no-audit --no-fund --ignore-scripts --loglevel=error --prefix "$ITERION_MCP_SERVERS_DIR" \
    "@modelcontextprotocol/server-filesystem@$ITERION_MCP_SERVER_FILESYSTEM_VERSION" \
    "@modelcontextprotocol/server-everything@$ITERION_MCP_SERVER_EVERYTHING_VERSION" >/dev/null
  [[ -d $ITERION_MCP_SERVERS_DIR/node_modules/@modelcontextprotocol/sdk ]] || die "the MCP SDK is missing after npm install"
  touch "$mcp_marker"
fi

# kubernetes-validate (PyPI) checks the Kubernetes driver's golden manifests
# against the official OpenAPI schemas it ships (offline once installed); in
# its own venv, since Debian's Python is externally managed.
if ! "$ITERION_K8S_VALIDATE" --version 2>/dev/null | grep -qx "$ITERION_K8S_VALIDATE_VERSION"; then
  venv="${ITERION_K8S_VALIDATE%/bin/*}"
  log "installing kubernetes-validate $ITERION_K8S_VALIDATE_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --retries 5 "kubernetes-validate==$ITERION_K8S_VALIDATE_VERSION"
fi
