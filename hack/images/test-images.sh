#!/usr/bin/env bash
# Builds the test environment's images without a registry and imports them
# into containerd's k8s.io namespace: the pod sandbox image (a static pause
# built from pause.c), a busybox image from Debian's busybox-static, the test
# harness runtime (that busybox with test-harness.sh as /usr/local/bin/test-harness), the test
# agent server of AgentDeployments (that busybox with agent-server.sh), the deepagents
# runtime's image (deepagents-image.sh, cached), and the
# cluster add-ons' images (CoreDNS, local-path-provisioner) and the telemetry
# tests' OpenTelemetry Collector, each the one
# binary hack/testenv/build.sh made (cached: see binary_image in lib.sh). Run
# by hack/testenv/up.sh once containerd is up; safe to rerun (imports retag).
#
# Usage: test-images.sh CONTAINERD_SOCKET OUT_DIR
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../testenv/lib.sh"

address=$1
out=$2
images_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
oci_image="$images_dir/oci-image.py"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gcc -static -Os -Wall -Wextra -Werror -o "$work/pause" "$images_dir/pause.c"
strip "$work/pause"
# 65535 is the user the upstream pause image runs as.
python3 "$oci_image" --name "$TESTENV_PAUSE_IMAGE" --add "$work/pause:/pause:0755" \
  --entrypoint /pause --user 65535:65535 -o "$out/pause.tar"

busybox=$(command -v busybox) || die "busybox not found (Debian package busybox-static)"
if [[ "$(readelf -l "$busybox")" == *INTERP* ]]; then die "$busybox is not static (install busybox-static)"; fi
rootfs="$work/busybox"
mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/root"
cp "$busybox" "$rootfs/bin/busybox"
while read -r applet; do
  [[ "$applet" == bin/busybox ]] && continue
  mkdir -p "$rootfs/$(dirname "$applet")"
  ln -sf /bin/busybox "$rootfs/$applet"
done < <("$busybox" --list-full)
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
python3 "$oci_image" --name "$TESTENV_BUSYBOX_IMAGE" --rootfs "$rootfs" --mkdir /tmp \
  --cmd sh -o "$out/busybox.tar"

mkdir -p "$rootfs/usr/local/bin"
cp "$images_dir/test-harness.sh" "$rootfs/usr/local/bin/test-harness"
chmod 0755 "$rootfs/usr/local/bin/test-harness"
python3 "$oci_image" --name "$TESTENV_HARNESS_IMAGE" --rootfs "$rootfs" --mkdir /tmp \
  --entrypoint /usr/local/bin/test-harness --user 65532:65532 -o "$out/test-harness.tar"

rm "$rootfs/usr/local/bin/test-harness"
cp "$images_dir/agent-server.sh" "$rootfs/usr/local/bin/agent-server"
chmod 0755 "$rootfs/usr/local/bin/agent-server"
python3 "$oci_image" --name "$TESTENV_AGENT_SERVER_IMAGE" --rootfs "$rootfs" --mkdir /tmp \
  --entrypoint /usr/local/bin/agent-server --user 65532:65532 -o "$out/agent-server.tar"

archives=("$out/pause.tar" "$out/busybox.tar" "$out/test-harness.tar" "$out/agent-server.tar")
archives+=("$(bash "$images_dir/deepagents-image.sh")")
archives+=("$(binary_image "$COREDNS_IMAGE" "$TOOLS_BIN_DIR/coredns")")
archives+=("$(binary_image "$LOCAL_PATH_IMAGE" "$TOOLS_BIN_DIR/local-path-provisioner")")
archives+=("$(binary_image "$OTELCOL_IMAGE" "$ETCD_BIN_DIR/otelcol" --user 65532:65532)")
for archive in "${archives[@]}"; do
  ctr --address "$address" --namespace k8s.io images import "$archive" >/dev/null
done
ctr --address "$address" --namespace k8s.io images ls -q | grep '^errand.local/' >&2
