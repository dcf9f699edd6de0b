#!/usr/bin/env bash
# Builds the deepagents runtime's image (errand.local/deepagents:test) without a registry, as
# an OCI archive, and prints its path: Debian's Python 3.11 (the machine's /usr/bin/python3.11,
# package python3.11) with its standard library and the shared libraries it and the wheels
# load, the runtime (runtimes/deepagents) at /opt/errand/deepagents, and the runtime's Python
# environment made from requirements.lock (hashes checked) beside it in `environments/`, where
# the launcher finds it, so a pod installs nothing. The environment is made on this machine at
# the same path it has in the image (a virtual environment holds absolute paths), by the
# launcher's own `--prepare`.
#
# Cached: the archive is named after the lock, the runtime's files, this script and
# oci-image.py, and is rebuilt only when one changes (about a minute cold, plus the
# environment's pip install).
#
# Usage: deepagents-image.sh  (prints the archive's path; hack/images/test-images.sh imports it)
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../testenv/lib.sh"

python=/usr/bin/python3.11
[[ -x "$python" ]] || die "$python not found: the deepagents image is made from Debian's Python (package python3.11)"
runtime="$REPO_ROOT/runtimes/deepagents"
files=("$runtime/errand-deepagents" "$runtime/errand_deepagents.py" "$runtime/errand_deepagents_server.py" "$runtime/requirements.lock")
key=$({
  sha256sum "${files[@]}" "${BASH_SOURCE[0]}" "$REPO_ROOT/hack/images/oci-image.py" | cut -d' ' -f1
  "$python" --version
} | sha256sum | cut -c1-16)
archive="$TESTENV_CACHE_DIR/images/deepagents-$key.tar"
if [[ -f "$archive" ]]; then
  echo "$archive"
  exit 0
fi

# Where the runtime lives in the image, and here while its environment is made.
home=/opt/errand/deepagents
mkdir -p "$home/environments"
install -m 0755 "$runtime/errand-deepagents" "$home/errand-deepagents"
install -m 0644 "$runtime/errand_deepagents.py" "$runtime/errand_deepagents_server.py" "$runtime/requirements.lock" "$home/"
# Run as the image runs it (`/usr/bin/python3`, Debian's link to python3.11): the environment's
# name digests the interpreter's path.
[[ "$(readlink -f /usr/bin/python3)" == "$python" ]] || die "/usr/bin/python3 is not $python"
env -u DEEPAGENTS_CACHE_DIR /usr/bin/python3 "$home/errand-deepagents" --prepare >&2
environment=$(env -u DEEPAGENTS_CACHE_DIR /usr/bin/python3 "$home/errand-deepagents" --where)
# Environments of earlier locks are not shipped.
for stale in "$home"/environments/*; do
  [[ "$stale" == "$environment" ]] || rm -rf "$stale"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs/usr/bin" "$rootfs/usr/lib" "$rootfs/etc/ssl/certs" "$rootfs/opt/errand"
cp -a "$python" "$rootfs/usr/bin/python3.11"
ln -s python3.11 "$rootfs/usr/bin/python3"
# The standard library, without its tests and the GUI and packaging tools a runtime never runs.
tar -C / --exclude='usr/lib/python3.11/test' --exclude='usr/lib/python3.11/idlelib' \
  --exclude='usr/lib/python3.11/tkinter' --exclude='usr/lib/python3.11/ensurepip' \
  --exclude='__pycache__' -cf - usr/lib/python3.11 | tar -C "$rootfs" -xf -
cp -a "$home" "$rootfs/opt/errand/"
find "$rootfs/opt/errand" -name __pycache__ -prune -exec rm -rf {} +
# The launcher makes its environment private (0700) to the user who made it; the agent runs as
# another, who reads it.
chmod -R a+rX "$rootfs/opt/errand"
# Every shared library the interpreter, its extension modules and the wheels' load, with the
# dynamic loader, at the paths they have here.
while read -r library; do
  mkdir -p "$rootfs$(dirname "$library")"
  cp -L "$library" "$rootfs$library"
done < <(
  { echo "$python"; find "$rootfs/usr/lib/python3.11/lib-dynload" "$environment" -name '*.so*' -type f; } |
    xargs -r ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' |
    grep -v "^$rootfs" | grep -v "^$home" | sort -u
)
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/" 2>/dev/null || true
printf 'root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"

mkdir -p "$TESTENV_CACHE_DIR/images"
for stale in "$TESTENV_CACHE_DIR/images/deepagents-"*.tar; do rm -f "$stale"; done
python3 "$REPO_ROOT/hack/images/oci-image.py" --name "$DEEPAGENTS_IMAGE" --rootfs "$rootfs" \
  --mkdir /tmp --entrypoint '["/usr/bin/python3", "/opt/errand/deepagents/errand-deepagents"]' \
  --user 65532:65532 -o "$archive" >&2
echo "$archive"
