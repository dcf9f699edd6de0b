#!/usr/bin/env bash
# Installs Kueue into the running test cluster (hack/testenv/up.sh) and waits
# until it admits work: the manager built by build.sh (sigs.k8s.io/kueue, the
# version tools/cluster pins) as an image of its one binary, and Kueue's own
# install manifests (config/default of the pinned module: CRDs, RBAC, the
# Deployment, its webhooks with Kueue's internal certificate management, the
# visibility API), rendered by kubectl's kustomize with an overlay that swaps
# in the local image, trims the job integrations to batch/Job and sizes the
# requests for a 2-core node. The apiserver reaches its webhooks and its
# aggregated API through their Services (kube-proxy).
#
# Not part of up.sh: Kueue's webhook sees every Job of the cluster, and a
# cluster that needs no Kueue (a benchmark) should not pay for it. hack/test.sh
# runs it before the tests, because its fail-closed webhooks refuse other
# tests' pods and Jobs while it installs; tests that need it also call it
# (tests/support/cluster.rs: cluster::ensure_kueue); it is idempotent,
# serialized with a lock, and returns at once when Kueue already serves.
# Installing took 27 s here, 10 s of them building the image (cached for the
# next cluster).
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S="$TESTENV_STATE_DIR"
[[ $EUID -eq 0 ]] || die "kueue.sh must run as root (it imports an image into the node's containerd)"
[[ -f "$ADMIN_KUBECONFIG" ]] || die "the test cluster is not up: bash hack/testenv/up.sh"
[[ -x "$TOOLS_BIN_DIR/kueue" ]] || die "$TOOLS_BIN_DIR/kueue is missing: run bash hack/testenv/build.sh first"

mkdir -p "$S/kueue"
exec 9>"$S/kueue/lock"
flock 9

# A server-side dry run of a Kueue object passes through Kueue's validating
# webhook: it succeeds only once the apiserver reaches the webhook through
# its Service and trusts its certificate.
webhook_serves() {
  kubectl_admin create --dry-run=server -f - >/dev/null 2>&1 <<EOF
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: kueue-sh-probe
EOF
}
ready() {
  [[ "$(kubectl_admin -n kueue-system get deployment kueue-controller-manager -o 'jsonpath={.status.availableReplicas}' 2>/dev/null)" == 1 ]] &&
    kubectl_admin get apiservice v1beta1.visibility.kueue.x-k8s.io \
      -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null | grep -qx True &&
    webhook_serves
}
if ready; then
  log "Kueue $KUEUE_VERSION already serves"
  exit 0
fi

start=$(date +%s)
archive=$(binary_image "$KUEUE_IMAGE" "$TOOLS_BIN_DIR/kueue" --user 65532:65532)
ctr --address "$CONTAINERD_SOCKET" --namespace k8s.io images import "$archive" >/dev/null

# Kueue's manifests come with the module (the module proxy's zip holds config/).
module_dir=$(cd "$TESTENV_TOOLS_DIR/cluster" && GOTOOLCHAIN=local go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" |
  sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[[ -d "$module_dir/config/default" ]] || die "no config/default in the sigs.k8s.io/kueue module ($module_dir)"
overlay="$S/kueue/overlay"
rm -rf "$overlay"
mkdir -p "$overlay"
cat >"$overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath -m --relative-to="$overlay" "$module_dir/config/default")
images:
  - name: us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue
    newName: ${KUEUE_IMAGE%:*}
    newTag: ${KUEUE_IMAGE##*:}
patches:
  - target: {kind: Deployment, name: kueue-controller-manager}
    patch: |
      - op: replace
        path: /spec/template/spec/containers/0/command
        value: [/kueue]
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: replace
        path: /spec/template/spec/containers/0/resources/requests
        value: {cpu: 50m, memory: 128Mi}
  - target: {kind: ConfigMap, name: kueue-manager-config}
    patch: |
      - op: replace
        path: /data/controller_manager_config.yaml
        value: |
          apiVersion: config.kueue.x-k8s.io/v1beta2
          kind: Configuration
          health:
            healthProbeBindAddress: :8081
          metrics:
            bindAddress: :8443
          webhook:
            port: 9443
          leaderElection:
            leaderElect: true
            resourceName: c1f6bfd2.kueue.x-k8s.io
          clientConnection:
            qps: 50
            burst: 100
          integrations:
            frameworks:
              - batch/job
EOF
log "installing Kueue $KUEUE_VERSION (image $KUEUE_IMAGE)"
# kustomize takes only relative paths to other roots, and only with this restrictor.
"$TOOLS_BIN_DIR/kubectl" kustomize --load-restrictor=LoadRestrictionsNone "$overlay" >"$S/kueue/manifests.yaml"
# Server-side: some of Kueue's CRDs are too large for the annotation of a
# client-side apply.
kubectl_admin apply --server-side --force-conflicts -f "$S/kueue/manifests.yaml" >"$S/kueue/apply.log" 2>&1 ||
  { tail -n 20 "$S/kueue/apply.log" >&2; die "applying Kueue's manifests failed (log: $S/kueue/apply.log)"; }

deadline=$(($(date +%s) + 180))
until ready; do
  if (($(date +%s) > deadline)); then
    kubectl_admin -n kueue-system get pods -o wide >&2 || true
    kubectl_admin -n kueue-system logs deployment/kueue-controller-manager --tail=30 >&2 || true
    die "Kueue did not become ready within 180 s"
  fi
  sleep 1
done
log "Kueue $KUEUE_VERSION serves (installed in $(($(date +%s) - start))s)"
