// The gVisor containerd shim under the name containerd looks for
// (containerd-shim-runsc-v1 for runtime_type io.containerd.runsc.v1): the
// same main as gvisor.dev/gvisor/shim, whose binary go would name "shim".
package main

import "gvisor.dev/gvisor/shim/v1/cli"

func main() { cli.Main() }
