// Command kubectl-fence is the kubectl plugin `kubectl fence`: a kubefence release's
// leader, pause requests and incidents, and a person's words to it, in the kubeconfig's
// name (pkg/kubectlfence).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubefence/kubefence/pkg/kubectlfence"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlfence.CLI{Stdout: os.Stdout, Stderr: os.Stderr, Now: time.Now}.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
