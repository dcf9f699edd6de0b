// Command coredns is the test cluster's DNS server: CoreDNS with only the
// plugins a cluster's Corefile uses (hack/testenv/coredns.yaml), instead of
// CoreDNS's own main, which links every plugin and with them the cloud SDKs
// of route53, azure, clouddns and others.
package main

import (
	"github.com/coredns/coredns/coremain"

	// The plugins of the cluster's Corefile. Any other directive in a
	// Corefile fails at startup with "unknown directive".
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
