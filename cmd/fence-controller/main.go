// Command fence-controller detects dead or partitioned nodes, fences them through agent
// plugins and, once the fence is verified, releases their pods and volumes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/leader"
)

func main() {
	if len(os.Args) > 1 && slices.Contains(app.Subcommands, os.Args[1]) {
		os.Exit(app.Subcommand(context.Background(), os.Args[1], os.Args[2:], os.Stdout, os.Stderr))
	}
	var o app.AppOptions
	f := o.AddFlags(flag.CommandLine)
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logging, flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), app.Usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := logsapi.ValidateAndApply(logging, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if f.Version {
		fmt.Println(buildinfo.String("fence-controller"))
		return
	}
	if f.LeaderCondition {
		o.LeaderPod = &leader.PodRef{Namespace: o.Pod.Namespace, Name: o.Pod.Name}
		if o.LeaderPod.Namespace == "" || o.LeaderPod.Name == "" {
			fmt.Fprintln(os.Stderr, "--leader-pod-condition needs the pod's namespace and name (POD_NAMESPACE and POD_NAME, or --pod-namespace and --pod-name)")
			os.Exit(1)
		}
	}

	if f.Validate {
		warnings, err := app.ValidateConfig(context.Background(), o.ConfigPath, f.ValidateOptions)
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
	err := app.RunApp(ctx, o, func(err error) {
		// Invariant 2: a deposed replica stops at once, without draining.
		klog.ErrorS(err, "Deposed; exiting")
		klog.Flush()
		os.Exit(app.ExitDeposed)
	})
	if err != nil {
		klog.ErrorS(err, "fence-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}
