#!/usr/bin/env bash
# Build the local images (no registry is reachable here) into both test
# engines, reusing them when already present:
#   iterion-test/busybox:local  - tiny, sub-second to build, for fast tests
#   iterion-sandbox-slim:local  - Debian with bash, curl, git, CA certificates;
#                                 the default image of `sandbox: auto`
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DOCKER=(docker -H "$ITERION_TEST_DOCKER_HOST")
PODMAN=(podman --url "$ITERION_TEST_PODMAN_HOST")
work=/var/cache/iterion-images
mkdir -p "$work"

has_image() { "$@" image inspect "$IMG" >/dev/null 2>&1; }

busybox_tar() {
  local tarball=$work/busybox.tar
  if [[ ! -s $tarball ]]; then
    local root; root=$(mktemp -d)
    mkdir -p "$root"/{bin,tmp,etc,root,home} && chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/"
    for a in $("$root/bin/busybox" --list); do
      [[ $a == busybox ]] || ln -sf busybox "$root/bin/$a"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/sh\n' > "$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  echo "$tarball"
}

slim_tar() {
  local tarball=$work/slim.tar
  if [[ ! -s $tarball ]]; then
    local root=$work/slim-rootfs mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    rm -rf "$root"
    log "debootstrap of the slim image (about a minute)"
    debootstrap --variant=minbase --include=bash,curl,ca-certificates,git,procps,jq \
      bookworm "$root" "$mirror" >/tmp/iterion-debootstrap.log 2>&1 \
      || { tail -20 /tmp/iterion-debootstrap.log; die "debootstrap failed"; }
    chroot "$root" /bin/sh -c 'groupadd -g 1000 iterion && useradd -m -u 1000 -g 1000 -s /bin/bash iterion' || true
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  echo "$tarball"
}

import_into() { # image, tarball-fn, engine...
  IMG=$1; local fn=$2; shift 2
  has_image "$@" && return 0
  local tarball; tarball=$($fn)
  log "importing $IMG into ${1}"
  "$@" import --change 'CMD ["/bin/sh"]' "$tarball" "$IMG" >/dev/null
}

engines=("${@:-docker podman}")
for e in ${engines[*]}; do
  case "$e" in
    docker) eng=("${DOCKER[@]}") ;;
    podman) eng=("${PODMAN[@]}") ;;
    *) die "unknown engine $e" ;;
  esac
  import_into "$ITERION_TEST_BUSYBOX_IMAGE" busybox_tar "${eng[@]}"
  import_into "$ITERION_TEST_SLIM_IMAGE" slim_tar "${eng[@]}"
done
