#!/usr/bin/env bash
# Build the local images (no registry is reachable here) into both test
# engines, reusing them when already present:
#   iterion-test/busybox:local  - tiny, sub-second to build, for fast tests
#   iterion-sandbox-slim:local  - Debian with bash, curl, git, ripgrep, CA
#                                 certificates and the Claude Code CLI
#                                 (/usr/local/bin/claude); the default image
#                                 of `sandbox: auto`
# An image is re-imported when its content key (label org.iterion.content)
# differs from what this script would build, e.g. after a CLI upgrade.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DOCKER=(docker -H "$ITERION_TEST_DOCKER_HOST")
PODMAN=(podman --url "$ITERION_TEST_PODMAN_HOST")
work=/var/cache/iterion-images
mkdir -p "$work"

SLIM_PACKAGES=bash,curl,ca-certificates,git,procps,jq,ripgrep
# What the slim image holds: its packages and the CLI version it carries.
# ITERION_SLIM_CLAUDE=0 (the quick start) leaves the Claude Code CLI out:
# the hello run and claw agents do not use it, and the tests' images.sh
# re-imports the image with it (the content key differs).
SLIM_FULL_KEY="$SLIM_PACKAGES+claude-$ITERION_CLAUDE_CODE_VERSION"
if [[ ${ITERION_SLIM_CLAUDE:-1} == 0 ]]; then
  SLIM_KEY="$SLIM_PACKAGES"
else
  SLIM_KEY="$SLIM_FULL_KEY"
fi

has_image() { # key, engine...
  local key=$1; shift
  [[ $("$@" image inspect --format '{{index .Config.Labels "org.iterion.content"}}' "$IMG" 2>/dev/null) == "$key" ]]
}

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

# The Debian base, cached per package set (debootstrap takes a minute).
slim_base_tar() {
  local tarball=$work/slim-base-$(echo "$SLIM_PACKAGES" | sha256sum | cut -c1-12).tar
  if [[ ! -s $tarball ]]; then
    local root=$work/slim-rootfs mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    rm -rf "$root"
    log "debootstrap of the slim image (about a minute)"
    debootstrap --variant=minbase --include="$SLIM_PACKAGES" \
      bookworm "$root" "$mirror" >/tmp/iterion-debootstrap.log 2>&1 \
      || { tail -20 /tmp/iterion-debootstrap.log; die "debootstrap failed"; }
    chroot "$root" /bin/sh -c 'groupadd -g 1000 iterion && useradd -m -u 1000 -g 1000 -s /bin/bash iterion' || true
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  echo "$tarball"
}

# The base plus the Claude Code CLI (the native binary setup.sh installed
# from npm), appended as usr/local/bin/claude.
slim_tar() {
  [[ $SLIM_KEY == "$SLIM_PACKAGES" ]] && { slim_base_tar; return; }
  local tarball=$work/slim-$(echo "$SLIM_KEY" | sha256sum | cut -c1-12).tar
  if [[ ! -s $tarball ]]; then
    [[ -x $ITERION_CLAUDE_CLI ]] || die "the claude CLI is not at $ITERION_CLAUDE_CLI: run scripts/setup.sh"
    local base stage; base=$(slim_base_tar); stage=$(mktemp -d)
    mkdir -p "$stage/usr/local/bin" && cp "$ITERION_CLAUDE_CLI" "$stage/usr/local/bin/claude"
    cp "$base" "$tarball.tmp"
    tar -C "$stage" --owner=0 --group=0 -rf "$tarball.tmp" ./usr/local/bin/claude
    mv "$tarball.tmp" "$tarball"
    rm -rf "$stage"
  fi
  echo "$tarball"
}

import_into() { # image, tarball-fn, key, engine...
  IMG=$1; local fn=$2 key=$3; shift 3
  has_image "$key" "$@" && return 0
  # An image with the CLI serves a run that does not need it.
  [[ $key == "$SLIM_PACKAGES" ]] && has_image "$SLIM_FULL_KEY" "$@" && return 0
  local tarball; tarball=$($fn)
  log "importing $IMG into ${1}"
  "$@" import --change 'CMD ["/bin/sh"]' --change "LABEL org.iterion.content=$key" \
    "$tarball" "$IMG" >/dev/null
}

engines=("${@:-docker podman}")
for e in ${engines[*]}; do
  case "$e" in
    docker) eng=("${DOCKER[@]}") ;;
    podman) eng=("${PODMAN[@]}") ;;
    *) die "unknown engine $e" ;;
  esac
  import_into "$ITERION_TEST_BUSYBOX_IMAGE" busybox_tar busybox "${eng[@]}"
  import_into "$ITERION_TEST_SLIM_IMAGE" slim_tar "$SLIM_KEY" "${eng[@]}"
done
