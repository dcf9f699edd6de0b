# shellcheck shell=bash
# The gVisor build (runsc and containerd-shim-runsc-v1), sourced by build.sh,
# which calls build_gvisor. It lives here rather than in build.sh so that it
# counts in the gvisor module's digest only (lib.sh): changing it rebuilds
# gVisor, never Kubernetes.
#
# patches/*.patch are applied at build time: each names the module it applies
# to on a "Module:" line and holds a unified diff relative to that module's
# root. The module is copied out of the module cache (read-only, checked
# against go.sum) to a scratch directory and patched there (exactly: no fuzz,
# and a patch that does not apply fails the build), and go builds with the
# copy in its place: a replace directive in a scratch copy of go.mod, given to
# go build with -modfile, so tools/gvisor itself is never written. (go build
# -overlay would avoid the copy, but refuses to replace files in the module
# cache.)

build_gvisor() {
  is_built "$GVISOR_BIN_DIR" && { log "gvisor: cached in $GVISOR_BIN_DIR"; return; }
  local module_dir="$TESTENV_TOOLS_DIR/gvisor" patched patch module dir
  # A fixed path per build (not mktemp): the copies' path goes into the
  # binaries' build IDs, so a random one would make every build differ.
  patched="$TESTENV_CACHE_DIR/.patch-$(basename "$(dirname "$GVISOR_BIN_DIR")")"
  rm -rf "$patched"
  mkdir -p "$patched"
  cp "$module_dir/go.mod" "$module_dir/go.sum" "$patched/"
  for patch in "$module_dir"/patches/*.patch; do
    module=$(awk '$1 == "Module:" { print $2; exit }' "$patch")
    [[ -n "$module" ]] || die "gvisor: $patch names no module (a \"Module: PATH\" line)"
    if [[ ! -d "$patched/$module" ]]; then
      dir=$(cd "$module_dir" && go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
      [[ -d "$dir" ]] || die "gvisor: $module (patched by $patch) is not a dependency of tools/gvisor"
      mkdir -p "$(dirname "$patched/$module")"
      cp -R "$dir" "$patched/$module"
      chmod -R u+w "$patched/$module"
      echo "replace $module => $patched/$module" >>"$patched/go.mod"
    fi
    patch --batch --forward --fuzz=0 --no-backup-if-mismatch -p1 -d "$patched/$module" <"$patch" >"$patched/patch.log" ||
      { cat "$patched/patch.log" >&2; die "gvisor: $(basename "$patch") does not apply to $module"; }
    log "gvisor: applied $(basename "$patch") to $module"
  done
  # The version runsc --version reports (runsc/version, set by gVisor's own
  # release builds the same way).
  GOFLAGS="$GOFLAGS -modfile=$patched/go.mod" go_build gvisor gvisor "$GVISOR_BIN_DIR" \
    "-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" "" \
    "gvisor.dev/gvisor/runsc ./cmd/containerd-shim-runsc-v1"
  rm -rf "$patched"
}
