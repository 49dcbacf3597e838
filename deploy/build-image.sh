#!/usr/bin/env bash
# deploy/build-image.sh TAG: builds the gateway's container image (the
# Dockerfile at the repository's root) and tags it TAG, e.g.
#
#   deploy/build-image.sh mcpp-gateway:dev
#   VERSION=v1.4.0 deploy/build-image.sh registry.example.com/mcpp-gateway:v1.4.0
#
# It stages the image's context in a temporary directory, then builds it
# with podman (which needs no daemon) or, when podman is missing, with a
# docker whose daemon answers; CONTAINER_ENGINE=docker (or podman) chooses.
# The image is FROM scratch: nothing is pulled, so no registry is needed.
#
# Environment:
#   VERSION           what --version prints and the image's version label
#                     (default: what Go records of the checkout)
#   GOARCH            the image's architecture (default: this machine's)
#   SSL_CERT_FILE     the CA bundle copied into the image (default:
#                     /etc/ssl/certs/ca-certificates.crt, Debian's
#                     ca-certificates)
#   CONTAINER_ENGINE  podman or docker
set -euo pipefail

tag=${1:-}
if [ -z "$tag" ] || [ $# -ne 1 ]; then
  echo "usage: deploy/build-image.sh TAG   (e.g. mcpp-gateway:dev)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v podman >/dev/null 2>&1; then
    engine=podman
  elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  else
    echo "build-image.sh: neither podman nor a docker with a running daemon is here; install podman (Debian: apt-get install podman)" >&2
    exit 1
  fi
fi

cabundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$cabundle" ]; then
  echo "build-image.sh: no CA bundle at $cabundle: install ca-certificates, or name one with SSL_CERT_FILE" >&2
  exit 1
fi

# The user the gateway runs as: a number, so that Kubernetes' runAsNonRoot
# can check it without reading the image's /etc/passwd (65532, as
# distroless's nonroot).
uid=65532

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/owned/data"

arch=$(cd "$root" && go env GOARCH)
ldflags="-s -w"
if [ -n "${VERSION:-}" ]; then
  ldflags="$ldflags -X github.com/mcpp/gateway/gateway.version=$VERSION"
fi
for cmd in mcpp-gateway mcpp; do
  (cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" \
    -o "$ctx/rootfs/usr/local/bin/$cmd" "./cmd/$cmd")
done

cp "$cabundle" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
cat >"$ctx/rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
mcpp:x:$uid:$uid:mcpp-gateway:/data:/sbin/nologin
EOF
cat >"$ctx/rootfs/etc/group" <<EOF
root:x:0:
mcpp:x:$uid:
EOF
chmod 0644 "$ctx/rootfs/etc/passwd" "$ctx/rootfs/etc/group"
# The modes the image's directories get: COPY keeps them.
chmod 1777 "$ctx/rootfs/tmp"
chmod 0700 "$ctx/owned/data"
chmod 0755 "$ctx/owned"
chmod 0755 "$ctx/rootfs" "$ctx/rootfs/usr" "$ctx/rootfs/usr/local" "$ctx/rootfs/usr/local/bin" \
  "$ctx/rootfs/etc" "$ctx/rootfs/etc/ssl" "$ctx/rootfs/etc/ssl/certs"

# No intermediate images: every build stages new binaries, so podman's
# layer cache would only leave untagged images behind.
layers=()
if [ "$(basename "$engine")" = podman ]; then
  layers=(--layers=false)
fi
"$engine" build ${layers[@]+"${layers[@]}"} --platform "linux/$arch" --build-arg "VERSION=${VERSION:-devel}" \
  -f "$root/Dockerfile" -t "$tag" "$ctx"
echo "built $tag with $engine"
