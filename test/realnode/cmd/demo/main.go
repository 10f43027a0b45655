// Command demo tells make demo's story on real nodes (make demo-cluster): three kubelets
// v1.36.3 with containerd, each in its own namespaces with an ipmi_sim BMC whose power-off
// kills every process of the node; the kubefence image built from this tree and pushed to
// a local registry; the chart installed with helm as docs/getting-started.md says. A
// StatefulSet pod with a single-attach CSI volume runs on a node; the node dies (every
// process at once, its BMC still on); kubefence powers it off through ipmi_sim, and the pod
// runs on another node once Kubernetes' own attach path has moved its volume. The command
// prints the merged timeline, checks that nothing was released and no volume moved before
// the BMC cut power, and powers the node on again.
//
// With -runs N it repeats the failure N times per profile and prints p50 and p99 of the
// recovery (make bench-realnode); -report FILE writes them into FILE's real-node section.
//
// It needs root and what hack/deps.sh installs; one real-node cluster runs per machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	runs := flag.Int("runs", 1, "failures per profile, one after another on the same cluster")
	leaderRuns := flag.Int("leader-runs", 0, "failures of the leader's own node per profile, after the others")
	profiles := flag.String("profiles", profileDefault, "comma-separated profiles: default (kubelet and kubefence defaults), fast (Lease renewed every 2s, thresholds 10s), heartbeats (fast, with the node agents and heartbeats)")
	report := flag.String("report", "", "write the p50/p99 tables into this Markdown file's real-node section")
	verbose := flag.Bool("v", false, "print the cluster's progress messages")
	keep := flag.Bool("keep", false, "keep each cluster's files (logs of the kubelets, the control plane and the BMCs) and print where")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, options{runs: *runs, leaderRuns: *leaderRuns, verbose: *verbose, keep: *keep}, strings.Split(*profiles, ","), *report); err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, profiles []string, report string) error {
	runs, leaderRuns := o.runs, o.leaderRuns
	if runs < 1 {
		return fmt.Errorf("-runs %d: want at least 1", runs)
	}
	if leaderRuns < 0 || (leaderRuns > 0 && runs == 1) {
		return fmt.Errorf("-leader-runs %d: want 0, or more with -runs above 1", leaderRuns)
	}
	var results []*result
	for _, p := range profiles {
		if _, ok := settings[p]; !ok {
			return fmt.Errorf("-profiles: unknown profile %q (want default, fast or heartbeats)", p)
		}
	}
	began := time.Now()
	for _, p := range profiles {
		r, err := runProfile(ctx, p, o)
		if err != nil {
			return fmt.Errorf("profile %s: %w", p, err)
		}
		results = append(results, r)
	}
	if runs == 1 {
		return nil
	}
	doc := reportSection(results, runs, leaderRuns, profiles, time.Since(began))
	fmt.Println("\n" + doc)
	if report != "" {
		if err := writeSection(report, doc); err != nil {
			return err
		}
		say("wrote the real-node section of %s", report)
	}
	return nil
}

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}
