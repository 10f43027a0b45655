// Command simcluster runs kubefence's simulated cluster until SIGINT or SIGTERM, for poking
// at it with kubectl: go run ./test/sim/cmd/simcluster -nodes 3
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kubefence/kubefence/test/sim"
)

// alwaysOn is the power of a node without a BMC.
type alwaysOn struct{}

func (alwaysOn) PoweredOn() (bool, error) { return true, nil }

func main() {
	nodes := flag.Int("nodes", 3, "number of simulated nodes")
	dir := flag.String("dir", "", "work directory (default: a new temporary directory, removed on exit)")
	interval := flag.Duration("heartbeat", 10*time.Second, "lease renew and status update interval")
	kcmArgs := flag.String("kcm-args", "", "extra kube-controller-manager flags, space separated")
	flag.Parse()
	if err := run(*nodes, *dir, *interval, strings.Fields(*kcmArgs)); err != nil {
		log.Fatal(err)
	}
}

func run(nodes int, dir string, interval time.Duration, kcmArgs []string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "simcluster-")
		if err != nil {
			return fmt.Errorf("create work dir: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	opts := sim.Options{Dir: dir, LeaseRenewInterval: interval, StatusUpdateInterval: interval,
		ControllerManagerArgs: kcmArgs, Logf: log.Printf}
	for i := range nodes {
		opts.Nodes = append(opts.Nodes, sim.NodeSpec{Name: fmt.Sprintf("node-%d", i), Power: alwaysOn{}})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := sim.Start(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("KUBECONFIG=%s\n", c.Kubeconfig)
	<-ctx.Done()
	log.Print("simcluster: stopping")
	return c.Stop()
}
