// Command witness-node keeps a second Node in the test cluster that is always
// Ready and runs nothing: it renews the node's Lease every 2 s and reports it
// Ready, like a kubelet whose machine has no room (no allocatable resources)
// and a NoSchedule taint nobody tolerates.
//
// Why: the node lifecycle controller treats "every node NotReady at once" as
// a control-plane outage ("master disruption mode") and then evicts nothing.
// On a one-node cluster that is any node loss, so a test that stops the real
// node's kubelet would never see its pods evicted. With the witness Ready, the
// loss of the real node is what it is on any cluster: the node is tainted
// unreachable and its pods are evicted once their tolerations run out.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const leaseSeconds = 8

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may write Nodes and Leases")
	name := flag.String("name", "witness", "the Node's name")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("loading %s: %v", *kubeconfig, err)
	}
	client := kubernetes.NewForConfigOrDie(config)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	ticks := 0
	for {
		// The Ready condition every 10 s (and whenever the node is new or
		// was marked otherwise), the Lease, the heartbeat, every 2 s.
		if ticks%5 == 0 {
			if err := reportReady(ctx, client, *name); err != nil {
				log.Printf("reporting node %s Ready: %v", *name, err)
			}
		}
		if err := renewLease(ctx, client, *name); err != nil {
			log.Printf("renewing the lease of node %s: %v", *name, err)
		}
		ticks++
		select {
		case <-ctx.Done():
			os.Exit(0)
		case <-time.After(leaseSeconds * time.Second / 4):
		}
	}
}

func reportReady(ctx context.Context, client kubernetes.Interface, name string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{"kubernetes.io/hostname": name, "errand.dev/witness-node": "true"},
			},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{
				Key: "errand.dev/witness-node", Effect: corev1.TaintEffectNoSchedule,
			}}},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "WitnessReady",
		Message:           "a stand-in node that runs nothing (hack/testenv/tools/cluster/cmd/witness-node)",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	node.Status.Capacity = corev1.ResourceList{}
	node.Status.Allocatable = corev1.ResourceList{}
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func renewLease(ctx context.Context, client kubernetes.Interface, name string) error {
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](leaseSeconds), RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
