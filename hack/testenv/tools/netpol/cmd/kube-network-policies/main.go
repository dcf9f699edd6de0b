// Command kube-network-policies is the test cluster's NetworkPolicy
// enforcer: sigs.k8s.io/kube-network-policies' controller (pkg/networkpolicy,
// unchanged) behind a main of our own, because the release's cmd/main.go
// only takes an in-cluster config and up.sh runs it as a host process beside
// the kubelet and kube-proxy, with a kubeconfig. The rest follows that main:
// the same flags and defaults, without the alpha AdminNetworkPolicy APIs
// (their CRDs are not installed), without --disable-nri (the release declares
// it and never passes it on, and a controller with NRI off dereferences its
// missing NRI plugin, a nil pointer, for the first packet from an IP its pod
// cache does not know), and stopping on SIGTERM as well as SIGINT, so
// down.sh's SIGTERM lets the controller delete its nftables table. Where the
// runtime serves no NRI socket, the plugin fails to connect, logs it, and
// knows no pod: pod IPs then come from the API server only.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

var (
	kubeconfig          string
	failOpen            bool
	queueID             int
	metricsBindAddress  string
	hostnameOverride    string
	netfilterBug1766Fix bool
)

func init() {
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of a user that may list and watch pods, namespaces and networkpolicies (empty: the in-cluster config)")
	flag.BoolVar(&failOpen, "fail-open", false, "If set, don't drop packets if the controller is not running")
	flag.IntVar(&queueID, "nfqueue-id", 100, "Number of the nfqueue used")
	flag.StringVar(&metricsBindAddress, "metrics-bind-address", ":9080", "The IP address and port for the metrics server to serve on")
	flag.StringVar(&hostnameOverride, "hostname-override", "", "If non-empty, will be used as the name of the Node that kube-network-policies is running on. If unset, the node name is assumed to be the same as the node's hostname.")
	flag.BoolVar(&netfilterBug1766Fix, "netfilter-bug-1766-fix", true, "If set, process DNS packets on the PREROUTING hooks to avoid the race condition on the conntrack subsystem, not needed for kernels 6.12+ (see https://bugzilla.netfilter.org/show_bug.cgi?id=1766)")
}

func main() {
	os.Exit(run())
}

func run() int {
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(c, flag.CommandLine)
	flag.Parse()
	logs.InitLogs()
	if err := logsapi.ValidateAndApply(c, nil); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 1
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer cancel()
	logger := klog.FromContext(ctx)
	flag.VisitAll(func(f *flag.Flag) {
		logger.Info("flag", "name", f.Name, "value", f.Value)
	})

	if _, _, err := net.SplitHostPort(metricsBindAddress); err != nil {
		logger.Error(err, "parsing metrics bind address", "address", metricsBindAddress)
		return 1
	}
	nodeName, err := nodeutil.GetHostname(hostnameOverride)
	if err != nil {
		logger.Error(err, "can not obtain the node name, use the hostname-override flag")
		return 1
	}
	cfg := networkpolicy.Config{
		FailOpen:            failOpen,
		QueueID:             queueID,
		NodeName:            nodeName,
		NetfilterBug1766Fix: netfilterBug1766Fix,
	}

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		logger.Error(err, "loading the kubeconfig", "path", kubeconfig)
		return 1
	}
	// Protobuf, as the release's main asks for (the core types support it).
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.ContentType = "application/vnd.kubernetes.protobuf"
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		logger.Error(err, "building the client")
		return 1
	}
	informersFactory := informers.NewSharedInformerFactory(clientset, 0)

	http.Handle("/metrics", promhttp.Handler())
	go func() {
		utilruntime.HandleError(http.ListenAndServe(metricsBindAddress, nil))
	}()

	controller, err := networkpolicy.NewController(
		clientset,
		informersFactory.Networking().V1().NetworkPolicies(),
		informersFactory.Core().V1().Namespaces(),
		informersFactory.Core().V1().Pods(),
		nil, nil, nil, nil,
		cfg,
	)
	if err != nil {
		logger.Error(err, "Can not start network policy controller")
		return 1
	}
	// Unlike the release's main, a controller that stops on its own (it could
	// not open the netfilter queue, say) ends the process, so up.sh sees it
	// die instead of waiting for a queue that nobody will read.
	stopped := make(chan error, 1)
	go func() { stopped <- controller.Run(ctx) }()
	informersFactory.Start(ctx.Done())

	select {
	case err := <-stopped:
		logger.Error(err, "the network policy controller stopped")
		return 1
	case <-ctx.Done():
	}
	// The release's grace period: the controller deletes its nftables table
	// on the way out.
	time.Sleep(5 * time.Second)
	return 0
}
