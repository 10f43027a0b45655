// Command fence-controller detects dead or partitioned nodes, fences them through agent
// plugins and, once the fence is verified, releases their pods and volumes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/controller"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		os.Exit(check(os.Args[2:]))
	}
	var o controller.AppOptions
	validate := flag.Bool("validate-config", false, "check the --config file and exit")
	validateAgents := flag.Bool("validate-agents", true, "with --validate-config, also ask each agent to check its parameters (needs pluginDir's binaries, and remote agents to answer)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.StringVar(&o.ConfigPath, "config", "/etc/kubefence/config.yaml", "configuration file")
	flag.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	flag.StringVar(&o.ListenAddress, "listen-address", ":8080", "address of /healthz, /readyz and /metrics")
	flag.IntVar(&o.Workers, "workers", controller.DefaultWorkers, "how many nodes are synced at once (each open incident holds one while it is driven)")
	flag.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "the node this replica runs on (default $NODE_NAME, from the downward API's spec.nodeName); it is never fenced, nor is any node whose replica renews its identity Lease")
	flag.BoolVar(&o.ReadyOnlyWhenLeader, "ready-only-when-leader", false, "report ready only while leader")
	flag.DurationVar(&o.IdentityLeaseDuration, "identity-lease-duration", time.Hour, "how long an unrenewed replica identity Lease lives before the leader collects it")
	flag.DurationVar(&o.IdentityRenewInterval, "identity-renew-interval", 10*time.Second, "how often each replica renews its identity Lease")
	flag.DurationVar(&o.TargetInterval, "target-check-interval", controller.DefaultTargetInterval, "how often the leader reads every node's first-level fence device (kubefence_target_up)")
	leaderCondition := flag.Bool("leader-pod-condition", false, "set the "+string(controller.LeaderCondition)+
		" condition on this replica's pod (POD_NAMESPACE, POD_NAME from the downward API); use it as a readiness gate")
	klog.InitFlags(nil)
	flag.Parse()
	if *showVersion {
		fmt.Println(buildinfo.String("fence-controller"))
		return
	}
	if *leaderCondition {
		o.LeaderPod = &controller.PodRef{Namespace: os.Getenv("POD_NAMESPACE"), Name: os.Getenv("POD_NAME")}
		if o.LeaderPod.Namespace == "" || o.LeaderPod.Name == "" {
			fmt.Fprintln(os.Stderr, "--leader-pod-condition needs POD_NAMESPACE and POD_NAME in the environment")
			os.Exit(1)
		}
	}

	if *validate {
		warnings, err := controller.ValidateConfig(context.Background(), o.ConfigPath, *validateAgents)
		for _, w := range warnings {
			fmt.Fprintln(os.Stderr, "warning:", w)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%s: valid\n", o.ConfigPath)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := controller.RunApp(ctx, o, func(err error) {
		// Invariant 2: a deposed replica stops at once, without draining.
		klog.ErrorS(err, "Deposed; exiting")
		klog.Flush()
		os.Exit(controller.ExitDeposed)
	})
	if err != nil {
		klog.ErrorS(err, "fence-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}

// check is "fence-controller check": every node's fence device read once, as a table.
func check(args []string) int {
	fs := flag.NewFlagSet("fence-controller check", flag.ContinueOnError)
	var o controller.AppOptions
	fs.StringVar(&o.ConfigPath, "config", "/etc/kubefence/config.yaml", "configuration file")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ok, err := controller.RunCheck(context.Background(), o, os.Stdout)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	case !ok:
		return 1
	}
	return 0
}
