#!/usr/bin/env bash
# Stops the test cluster that up.sh started and removes its state, so up.sh
# can run again from scratch: kills the containers and the processes it
# started (by pid), unmounts the kubelet's and containerd's mounts and the
# pods' network namespaces, deletes the pod bridge, CNI state, kube-proxy's
# and up.sh's iptables rules and kube-network-policies' nftables table,
# removes the kubelet's cgroups and restores the
# kernel tunables up.sh and the kubelet changed. Logs
# stay in $ERRAND_TESTENV_DIR/logs for post-mortems. Safe to run at any time,
# also when nothing is running. The binary cache is left alone.
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S="$TESTENV_STATE_DIR"
RUN="$S/run"

[[ $EUID -eq 0 ]] || die "down.sh must run as root"
if [[ ! -d "$S" ]]; then
  log "nothing to stop ($S does not exist)"
  exit 0
fi
down_start=$(date +%s)

# The pid recorded for NAME, if that process is still alive and still runs
# that program (a stale pid file must not make us signal a stranger).
live_pid() {
  local pid
  [[ -f "$RUN/$1.pid" ]] || return 1
  pid=$(cat "$RUN/$1.pid")
  pid_alive "$pid" || return 1
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *"$1"* ]] || return 1
  echo "$pid"
}

# Sends SIGTERM to every PID, waits up to 15s for all to exit, then SIGKILLs
# the rest.
stop_pids() {
  local pid alive
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 75); do
    alive=()
    for pid in "$@"; do if pid_alive "$pid"; then alive+=("$pid"); fi; done
    ((${#alive[@]})) || return 0
    sleep 0.2
  done
  log "still running 15s after SIGTERM, killing: ${alive[*]}"
  kill -KILL "${alive[@]}" 2>/dev/null || true
}

# Stops the named components (started by up.sh) together.
stop() {
  local name pid pids=()
  for name in "$@"; do
    if pid=$(live_pid "$name"); then
      log "stopping $name (pid $pid)"
      pids+=("$pid")
    fi
    rm -f "$RUN/$name.pid"
  done
  if ((${#pids[@]})); then stop_pids "${pids[@]}"; fi
}

# The kubelet first, so it does not restart what is killed next. On SIGTERM
# kube-network-policies deletes its nftables table (within its 5 s grace).
stop kubelet fake-gpu-plugin kube-proxy kube-network-policies

# Kill every container while containerd can still be asked to.
if live_pid containerd >/dev/null && [[ -S "$CONTAINERD_SOCKET" ]]; then
  ctr_k8s() { ctr --address "$CONTAINERD_SOCKET" --namespace k8s.io "$@"; }
  mapfile -t tasks < <(ctr_k8s tasks ls -q 2>/dev/null || true)
  if ((${#tasks[@]})); then
    log "killing ${#tasks[@]} containers"
    for t in "${tasks[@]}"; do ctr_k8s tasks kill --all --signal SIGKILL "$t" >/dev/null 2>&1 || true; done
    for t in "${tasks[@]}"; do ctr_k8s tasks delete --force "$t" >/dev/null 2>&1 || true; done
  fi
  mapfile -t containers < <(ctr_k8s containers ls -q 2>/dev/null || true)
  for c in "${containers[@]}"; do ctr_k8s containers delete "$c" >/dev/null 2>&1 || true; done
fi

stop containerd witness-node kube-scheduler kube-controller-manager kube-apiserver
stop etcd

# Anything of ours still running: containers left in the kubelet's pod
# cgroups (killed outright: their pod is gone), containerd shims (their
# command lines name our containerd socket) and gVisor's runsc processes
# (their command lines name the runsc state under $S: a sandbox or gofer is
# in its pod's cgroups and goes with it, but none may outlive the cluster).
pod_processes=()
for procs in /sys/fs/cgroup/pids/kubepods/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/cgroup.procs \
  /sys/fs/cgroup/pids/kubepods/*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/*/*/cgroup.procs; do
  if [[ -f "$procs" ]]; then mapfile -t -O "${#pod_processes[@]}" pod_processes <"$procs"; fi
done
if ((${#pod_processes[@]})); then
  log "killing leftover pod processes: ${pod_processes[*]}"
  kill -KILL "${pod_processes[@]}" 2>/dev/null || true
fi
shims=()
for proc in /proc/[0-9]*; do
  pid=${proc#/proc/}
  cmdline=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
  if pid_alive "$pid" && [[ "$cmdline" == *"-address $CONTAINERD_SOCKET"* || "$cmdline" == *"--root=$S/containerd/runsc/"* ]]; then
    shims+=("$pid")
  fi
done
if ((${#shims[@]})); then
  log "stopping leftover containerd shims and gVisor processes: ${shims[*]}"
  stop_pids "${shims[@]}"
fi

# Unmount the deepest mounts first: pod volumes, container root filesystems,
# /dev/shm mounts and network namespace mounts all live under $S.
mapfile -t mounts < <(awk -v p="$S/" 'index($5, p) == 1 { print length($5) " " $5 }' /proc/self/mountinfo | sort -rn | cut -d' ' -f2-)
if ((${#mounts[@]})); then
  log "unmounting ${#mounts[@]} mounts under $S"
  for m in "${mounts[@]}"; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
fi

# Pod veths vanish with their network namespaces; the bridge is ours, and
# with it go its route to the Service range and its forwarding switch.
if ip link show "$POD_BRIDGE" >/dev/null 2>&1; then
  ip link delete "$POD_BRIDGE"
fi
# kube-proxy's Service rules (its own cleanup mode), then up.sh's firewall.
if [[ -x "$TOOLS_BIN_DIR/kube-proxy" ]] && iptables -w -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
  "$TOOLS_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || log "kube-proxy --cleanup failed"
fi
for hook in INPUT FORWARD; do
  while iptables -w -D "$hook" -j "ERRAND-TESTENV-$hook" 2>/dev/null; do :; done
  if iptables -w -F "ERRAND-TESTENV-$hook" 2>/dev/null; then iptables -w -X "ERRAND-TESTENV-$hook"; fi
done
# The diversion to kube-network-policies' queue (a kernel without nftables'
# queue statement, see up.sh), and its table if it was killed before deleting it.
while iptables -w -t mangle -D POSTROUTING -j ERRAND-TESTENV-NETPOL 2>/dev/null; do :; done
if iptables -w -t mangle -F ERRAND-TESTENV-NETPOL 2>/dev/null; then iptables -w -t mangle -X ERRAND-TESTENV-NETPOL; fi
if command -v nft >/dev/null && nft list table inet kube-network-policies >/dev/null 2>&1; then
  nft delete table inet kube-network-policies || log "could not delete nftables table inet kube-network-policies"
fi

if [[ -f "$RUN/sysctl.orig" ]]; then
  while read -r key value; do
    echo "$value" >"/proc/sys/$key" || log "could not restore $key"
  done <"$RUN/sysctl.orig"
fi

# The kubelet's cgroups (cgroupfs driver): empty once every container is gone.
for hierarchy in /sys/fs/cgroup/*/; do
  if [[ -d "$hierarchy/kubepods" ]]; then
    find "$hierarchy/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || log "could not remove cgroup $hierarchy/kubepods"
  fi
done

find "$S" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
log "down in $(($(date +%s) - down_start))s (logs kept in $S/logs)"
