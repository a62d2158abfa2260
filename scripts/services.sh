#!/usr/bin/env bash
# Start the engines and databases the tests and examples use, each on its
# own socket, and wait until they answer. Idempotent: a service already
# answering is left alone.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

sock_path() { echo "${1#unix://}"; }

ping_sock() { curl -fsS --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }

wait_for() { # name, tries, command...
  local name=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.5; done
  die "$name did not become ready"
}

# The test dockerd gets a bridge of its own, so another dockerd on this
# machine (a test's private one, an operator's) cannot take it away by
# deleting docker0 when it stops.
BRIDGE=iterion-br0
ensure_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add 172.29.0.1/16 dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
}

start_dockerd() {
  local sock; sock=$(sock_path "$ITERION_TEST_DOCKER_HOST")
  if ping_sock "$sock" && ip link show "$BRIDGE" >/dev/null 2>&1; then return 0; fi
  if ping_sock "$sock" && [[ -s /run/iterion-test-docker.pid ]]; then
    # Answering but its bridge is gone: restart the one we started.
    log "restarting dockerd (its bridge is gone)"
    kill "$(cat /run/iterion-test-docker.pid)" 2>/dev/null || true
    for _ in $(seq 60); do ping_sock "$sock" || break; sleep 0.5; done
  fi
  ensure_bridge
  # dockerd keeps its default network in its data root; one recorded on
  # another bridge would override --bridge, so forget it.
  local kv=/var/lib/iterion-test-docker/network/files/local-kv.db
  if [[ -f $kv ]] && ! grep -aq "$BRIDGE" "$kv"; then rm -f "$kv"; fi
  log "starting dockerd on $sock"
  rm -f "$sock"
  # From /, like the podman service: a daemon's cwd is where its helpers
  # drop stray files (conmon writes an `oom` file there after an OOM kill).
  (cd / && exec setsid /usr/sbin/dockerd --host "unix://$sock" --bridge "$BRIDGE" \
    --data-root /var/lib/iterion-test-docker --exec-root /run/iterion-test-docker \
    --pidfile /run/iterion-test-docker.pid) \
    >/tmp/iterion-dockerd.log 2>&1 < /dev/null &
  wait_for dockerd 120 ping_sock "$sock" || { tail -20 /tmp/iterion-dockerd.log; exit 1; }
}

start_podman() {
  local sock; sock=$(sock_path "$ITERION_TEST_PODMAN_HOST")
  ping_sock "$sock" && return 0
  log "starting podman service on $sock"
  rm -f "$sock"
  # Started from /: conmon writes an `oom` file into the service's cwd when
  # a container is OOM-killed (bounds_e2e does that on purpose), which left
  # one in the checkout that ran this script.
  (cd / && exec setsid podman system service --time=0 "unix://$sock") \
    >/tmp/iterion-podman.log 2>&1 < /dev/null &
  echo $! > /run/iterion-test-podman.pid
  wait_for podman 120 ping_sock "$sock" || { tail -20 /tmp/iterion-podman.log; exit 1; }
}

start_postgres() {
  if ! pg_lsclusters -h 2>/dev/null | grep -q '^15 *main .* online'; then
    log "starting PostgreSQL 15"
    pg_ctlcluster 15 main start
  fi
  wait_for postgres 60 su postgres -c "psql -qAtc 'select 1'" >/dev/null
  su postgres -c "psql -qAt" >/dev/null <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'iterion') THEN
    CREATE ROLE iterion LOGIN SUPERUSER PASSWORD 'iterion-test';
  END IF;
END $$;
SQL
  su postgres -c "psql -qAtc \"select 1 from pg_database where datname='iterion_test'\"" | grep -q 1 \
    || su postgres -c "createdb -O iterion iterion_test"
}

want=("${@:-docker podman postgres}")
for svc in ${want[*]}; do
  case "$svc" in
    docker) start_dockerd ;;
    podman) start_podman ;;
    postgres) start_postgres ;;
    *) die "unknown service $svc" ;;
  esac
done
