package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/realnode"
	"github.com/kubefence/kubefence/test/sim"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

const (
	profileDefault    = "default"
	profileFast       = "fast"
	profileHeartbeats = "heartbeats"
)

// nodeCount is how many nodes a run of runs failures needs: with three, the two that do
// not host the leader would each fail three times in five runs, and the detector rightly
// reports a node whose health came back three times within flapWindow (10m) as Flapping,
// which keeps it fenced until the window has passed.
func nodeCount(runs int) int {
	if runs > 1 {
		return 4
	}
	return 3
}

// profile is how the kubelets and the chart are set up.
type profile struct {
	leaseDuration, statusUpdate time.Duration // the kubelets'; zero: their defaults
	values                      string        // chart values beyond its defaults
	describe                    string
	peerKey                     bool // the node agents' shared key Secret is made before the install
}

var settings = map[string]profile{
	profileDefault: {describe: "kubelets at their defaults (Lease renewed every 10s, status every 10s), the chart at its defaults (leaseStaleAfter 30s, notReadyAfter 30s, leader election 15s/10s/2s)"},
	profileFast: {leaseDuration: 8 * time.Second, statusUpdate: 2 * time.Second,
		values:   "config:\n  detection: {leaseStaleAfter: 10s, notReadyAfter: 10s}\ncontroller:\n  identityRenewInterval: 2s\n",
		describe: "kubelets renew their Lease every 2s (nodeLeaseDurationSeconds 8) and report status every 2s; the chart with leaseStaleAfter 10s, notReadyAfter 10s and identityRenewInterval 2s (a node counts as alive while a controller replica on it renewed its identity Lease within three intervals), its defaults otherwise"},
	profileHeartbeats: {leaseDuration: 8 * time.Second, statusUpdate: 2 * time.Second, peerKey: true,
		values: "config:\n  detection: {leaseStaleAfter: 10s, notReadyAfter: 10s}\ncontroller:\n  identityRenewInterval: 500ms\n" +
			"nodeAgent:\n  enabled: true\n  bootIDFile: /proc/sys/kernel/random/boot_id\n  peers:\n    enabled: true\n    keySecret: " + peerKeySecret + "\n    probeInterval: 200ms\n" +
			"heartbeats:\n  enabled: true\n  kubeletTimeout: 500ms\n  kubeletCheckInterval: 10s\n",
		describe: "the fast profile's kubelets and detection, with the node agents (nodeAgent.enabled, no watchdog) answering each other (nodeAgent.peers, probeInterval 200ms) and heartbeats (heartbeats.enabled, kubeletTimeout 500ms, kubeletCheckInterval 10s): a node whose agent its peers declare gone, whose kubelet does not answer and whose Lease has been silent for one and a half renewal periods (3s) is unhealthy without waiting for leaseStaleAfter. identityRenewInterval 500ms: a node whose controller replica renewed its identity Lease within three intervals is held as alive, and that hold (1.5s) ends before heartbeats judge the node"},
}

// peerKeySecret holds the node agents' shared key in the heartbeats profile.
const peerKeySecret = "kubefence-peer-key"

// renewal is how often the kubelets renew their Lease: a quarter of its duration.
func (p profile) renewal() time.Duration {
	return cmp.Or(p.leaseDuration, realnode.KubeletLeaseDuration) / 4
}

// statusPeriod is how often the kubelets update their node status.
func (p profile) statusPeriod() time.Duration {
	return cmp.Or(p.statusUpdate, realnode.KubeletStatusUpdate)
}

// repeatValues lets one node be fenced again within minutes: the default cooldown (10m)
// rightly holds a second fence for a person, and the default flapWindow (10m) rightly
// reports a node that came back three times in it as Flapping. Neither changes any timing
// of a fence.
const repeatValues = "policies:\n- name: default\n  budget: {cooldown: 30s}\n  levels:\n  - agents: [ipmi]\nconfig:\n  detection: {flapWindow: 2m}\n"

// run is one failure's measurements.
type outcome struct {
	offset   time.Duration // from the renewal the harness saw to the failure
	recovery sim.Recovery
	failure  *realnode.Failure
	released time.Duration     // from the failure to the node Ready again, untainted, after power-on
	kubelet  realnode.PodStart // what the kubelet that got the pod logged of its start
}

type result struct {
	profile string
	startup time.Duration
	runs    []outcome
	// leaderRuns fail the node of the replica that leads: the standby takes over and
	// fences the node its predecessor ran on.
	leaderRuns []outcome
}

// options are the command's flags that shape a profile's runs.
type options struct {
	runs, leaderRuns int
	verbose          bool // print the cluster's progress messages
	keep             bool // keep the cluster's files (the kubelets' and control plane's logs)
}

// runProfile starts a cluster set up for profile, installs kubefence and fails nodes one
// after another. The cluster's files are removed unless something failed or o.keep.
func runProfile(ctx context.Context, name string, o options) (*result, error) {
	runs, leaderRuns := o.runs, o.leaderRuns
	p := settings[name]
	dir, err := os.MkdirTemp("", "kfrn") // short: socket paths under it stay within 108 bytes
	if err != nil {
		return nil, err
	}
	logf := func(string, ...any) {}
	if o.verbose {
		logf = func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
	}
	say("profile %s: %s", name, p.describe)
	say("starting %d real nodes: kubelet %s with containerd in namespaces of their own, one ipmi_sim BMC each; etcd, kube-apiserver, kube-controller-manager (attach-detach included), kube-scheduler; the CSI external-attacher", nodeCount(runs), sim.KubeVersion)
	began := time.Now()
	c, err := realnode.Start(ctx, realnode.Options{Dir: dir, Nodes: nodeCount(runs), Logf: logf, LeaseDuration: p.leaseDuration, StatusUpdate: p.statusUpdate})
	if err != nil {
		return nil, fmt.Errorf("%w (files kept in %s)", err, dir)
	}
	res, err := story(ctx, c, name, p, runs, leaderRuns, dir, began)
	if serr := c.Stop(); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		// 0700, as MkdirTemp makes it: the files hold the BMC passwords and the cluster's keys.
		return nil, fmt.Errorf("%w (files kept in %s)", err, dir)
	}
	say("stopped the cluster; every node process, BMC and control plane process gone")
	slow := slowRuns(p, res)
	for _, s := range slow {
		say("%s", s)
	}
	if o.keep || len(slow) > 0 {
		say("the cluster's files are kept in %s", dir)
		return res, nil
	}
	return res, os.RemoveAll(dir)
}

// slowRuns names the runs whose reschedule took longer than the new kubelet's status
// period (it waits for its next status update to see the attached volume) and 5 s for the
// rest of the pod's start: their cause is in the kubelets' and the control plane's logs,
// so the cluster's files are kept for them, as with -keep.
func slowRuns(p profile, res *result) []string {
	bound := p.statusPeriod() + 5*time.Second
	var slow []string
	check := func(kind string, runs []outcome) {
		for i, r := range runs {
			if d := r.recovery.Phases["reschedule"]; d > bound {
				why := "whose kubelet logged why"
				if k := r.kubelet; !k.Refused.IsZero() {
					why = fmt.Sprintf("whose kubelet the API server's node authorizer refused the pod's claim at %s; it verified the volume at %s",
						k.Refused.UTC().Format("15:04:05.000"), k.Verified.UTC().Format("15:04:05.000"))
				}
				slow = append(slow, fmt.Sprintf("%s %d: reschedule took %s, more than %s: web-0 went to %s, %s (the failure at %s)",
					kind, i+1, d.Round(100*time.Millisecond), bound, r.failure.MovedTo, why, r.failure.Began.UTC().Format("15:04:05.000")))
			}
		}
	}
	check("run", res.runs)
	check("leader's node run", res.leaderRuns)
	return slow
}

func story(ctx context.Context, c *realnode.Cluster, name string, p profile, runs, leaderRuns int, dir string, began time.Time) (*result, error) {
	docs := []string{p.values}
	if runs > 1 {
		docs = append(docs, repeatValues)
	}
	var values []string
	for _, v := range docs {
		if v == "" {
			continue
		}
		f := filepath.Join(dir, fmt.Sprintf("values-%d.yaml", len(values)))
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			return nil, err
		}
		values = append(values, f)
	}
	if p.peerKey {
		if err := c.CreatePeerKey(ctx, peerKeySecret); err != nil {
			return nil, err
		}
	}
	say("building the kubefence image, pushing it to the local registry, helm install with the chart's defaults and %d values file(s)", len(values))
	if _, err := c.Install(ctx, values...); err != nil {
		return nil, err
	}
	startup := time.Since(began)
	leader, err := c.LeaderNode(ctx)
	if err != nil {
		return nil, err
	}
	say("kubefence installed: 2 replicas, the leader on %s", leader)
	var others []string
	for _, n := range c.Nodes() {
		if n.Name != leader {
			others = append(others, n.Name)
		}
	}
	say("deploying StatefulSet web (1 replica, a single-attach CSI volume) on %s", others[0])
	if err := c.CreateVolume(ctx, "web-data", "default", "data-web-0"); err != nil {
		return nil, err
	}
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, realnode.StatefulSet("web", others[0]), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	rec, err := sim.NewRecorder(ctx, c.Cluster)
	if err != nil {
		return nil, err
	}
	res := &result{profile: name, startup: startup}
	rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(runs))) // the same draws every time
	for i := range runs {
		// A node dies at any point of its renewal cycle: the runs draw that point, so that
		// detection is measured over the cycle, not at one end of it.
		offset := time.Duration(rng.Int64N(int64(p.renewal())))
		r, err := failOnce(ctx, c, rec, others[i%len(others)], offset, runs == 1)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i+1, err)
		}
		say("run %d/%d: web-0 running on %s %.1fs after %s died (BMC off at %s); %s released %s after", i+1, runs,
			r.failure.MovedTo, r.recovery.Total.Seconds(), r.failure.Node, r.failure.Off.Sub(r.failure.Began).Round(100*time.Millisecond),
			r.failure.Node, r.released.Round(100*time.Millisecond))
		res.runs = append(res.runs, *r)
	}
	for i := range leaderRuns {
		leader, err := c.LeaderNode(ctx)
		if err != nil {
			return nil, err
		}
		r, err := failOnce(ctx, c, rec, leader, time.Duration(rng.Int64N(int64(p.renewal()))), false)
		if err != nil {
			return nil, fmt.Errorf("leader's node run %d: %w", i+1, err)
		}
		say("leader's node run %d/%d: web-0 running on %s %.1fs after %s, the leader's node, died (BMC off at %s); released %s after", i+1, leaderRuns,
			r.failure.MovedTo, r.recovery.Total.Seconds(), leader, r.failure.Off.Sub(r.failure.Began).Round(100*time.Millisecond), r.released.Round(100*time.Millisecond))
		res.leaderRuns = append(res.leaderRuns, *r)
	}
	return res, nil
}

// failOnce kills node with web-0 on it and follows the fence, the move and the recovery.
func failOnce(ctx context.Context, c *realnode.Cluster, rec *sim.Recorder, node string, offset time.Duration, print bool) (*outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := c.MovePod(ctx, "web", node); err != nil {
		return nil, err
	}
	if err := sim.WaitLeaseRenewals(ctx, c.Client, node); err != nil {
		return nil, err
	}
	// Paces the failure within the renewal cycle; it waits for no condition.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(offset):
	}
	if print {
		say("killing %s: every process of it at once (kubelet, containerd, web-0); its BMC stays on", node)
	}
	oldBoot := c.Node(node).BootID()
	f, err := c.Fail(ctx, node, "web", "web-data", false)
	if err != nil {
		return nil, err
	}
	r := &outcome{offset: offset, failure: f, recovery: sim.MeasureRecovery(ctx, c.Cluster, rec, node, "web-0", f.Began)}
	if r.recovery.Missing != "" {
		return nil, fmt.Errorf("%s: %s", node, r.recovery.Missing)
	}
	if err := checkSafety(c, rec, node, f.Began); err != nil {
		return nil, err
	}
	if r.kubelet, err = c.PodStart(f.MovedTo, "default/web-0", "web-data", f.Began); err != nil {
		return nil, err
	}
	if print {
		if err := printTimeline(ctx, c, rec, f); err != nil {
			return nil, err
		}
		say("safety check passed: nothing of %s was released, and its volume did not move, before its BMC logged power off; the other nodes were untouched", node)
		say("powering %s on through its BMC, as its owner would", node)
	}
	if err := c.PowerOn(ctx, node, oldBoot); err != nil {
		return nil, err
	}
	r.released = time.Since(f.Began)
	err = realnode.WaitFor(ctx, node+"'s NodeFence Recovered", func() (bool, error) {
		incs, err := sim.Incidents(ctx, c.Cluster, node)
		return err == nil && len(incs) > 0 && incs[len(incs)-1].Status.Phase == v1alpha1.PhaseRecovered, err
	})
	if print && err == nil {
		say("%s is back with a new boot ID, untainted, its NodeFence Recovered", node)
	}
	return r, err
}

// checkSafety checks what the independent watcher saw since began against the BMCs' own
// logs: nothing of node released before its power-off, nothing done to any other node.
func checkSafety(c *realnode.Cluster, rec *sim.Recorder, node string, began time.Time) error {
	seen := seenSince(rec, began)
	var violations []string
	for _, n := range c.Nodes() {
		power, err := c.BMC(n.Name).Events()
		if err != nil {
			return err
		}
		power = since(power, began)
		if n.Name == node {
			violations = append(violations, sim.CheckReleasedAfterFence(seen, node, power)...)
		} else {
			violations = append(violations, sim.CheckUntouched(seen, n.Name, power)...)
		}
	}
	if len(violations) > 0 {
		return fmt.Errorf("safety check failed:\n  %s", strings.Join(violations, "\n  "))
	}
	return nil
}

func seenSince(rec *sim.Recorder, t time.Time) []sim.Seen {
	var out []sim.Seen
	for _, s := range rec.All() {
		if !s.At.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

func since(events []bmc.PowerEvent, t time.Time) []bmc.PowerEvent {
	var out []bmc.PowerEvent
	for _, e := range events {
		if !e.Time.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// printTimeline merges four records of the failure: the NodeFence's timeline, the BMC's
// log, the CSI driver's attach log and what the watcher saw on the API server.
func printTimeline(ctx context.Context, c *realnode.Cluster, rec *sim.Recorder, f *realnode.Failure) error {
	incs, err := sim.Incidents(ctx, c.Cluster, f.Node)
	if err != nil {
		return err
	}
	var mine []v1alpha1.NodeFence
	for _, nf := range incs {
		if !nf.CreationTimestamp.Time.Before(f.Began.Add(-time.Second)) {
			mine = append(mine, nf)
		}
	}
	power, err := c.BMC(f.Node).Events()
	if err != nil {
		return err
	}
	entries := sim.Timeline(f.Node, f.Began, mine, since(power, f.Began), seenSince(rec, f.Began))
	for i, e := range entries {
		if e.Source == "sim" && e.At.Equal(f.Began) {
			// The simulation's words for a failure; here every process died.
			entries[i].Source, entries[i].What = "realnode", f.Node+": every process killed at once (BMC still on)"
		}
	}
	attach, err := c.Attachments()
	if err != nil {
		return err
	}
	for _, a := range attach {
		if !a.Time.Before(f.Began) {
			entries = append(entries, sim.Entry{At: a.Time, Source: "csi driver", What: fmt.Sprintf("%s %s on %s", a.Action, a.Volume, a.Node)})
		}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].At.Before(entries[j].At) })
	fmt.Printf("\nTimeline (seconds after %s died):\n", f.Node)
	sim.PrintTimeline(os.Stdout, f.Began, entries)
	fmt.Println()
	return nil
}
