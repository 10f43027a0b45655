package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// TestExplainAsksTheRunningLeader: fence-controller explain with --answer-socket prints
// the running replica's answer from its loop's sources while it leads; a replica that
// does not lead refuses and says so; with nothing listening, explain says it computes
// the answer itself.
func TestExplainAsksTheRunningLeader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := &v1alpha1.Config{LeaderElection: v1alpha1.LeaderElection{Namespace: "kubefence"},
		Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}}}
	cfg.Default()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	live := nodeview.Sources{Config: cfg, Detector: detector.ForConfig(cfg),
		Nodes:       func() ([]*corev1.Node, error) { return []*corev1.Node{node}, nil },
		Pods:        func(string) []*corev1.Pod { return nil },
		UrgentPDBs:  func() []*policyv1.PodDisruptionBudget { return nil },
		Attachments: func(string) int { return 0 },
		Incidents:   func() []*v1alpha1.NodeFence { return nil },
		IncidentsOf: func(string) []incidents.Facts { return nil },
		PausedBy:    func() string { return "on-call: rack 3 (the loop's own pause)" }}
	leads := true
	a := answers{explainer: oncall.Explainer{Config: cfg, Kube: kubefake.NewClientset(node), Now: time.Now, Live: func() nodeview.Sources { return live }},
		leading: func() bool { return leads }, identity: "pod-1_42_abc"}
	sock := filepath.Join(t.TempDir(), "answers.sock")
	errc := make(chan error, 1)
	if err := serveAnswers(ctx, sock, a, errc); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RunExplain(ctx, AppOptions{AnswerSocket: sock}, "node-1", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"answered:  by the leader pod-1_42_abc", "node node-1, policy default", "paused:    on-call: rack 3 (the loop's own pause)", "rule now:  "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the leader's answer has no %q:\n%s", want, out.String())
		}
	}
	leads = false
	if err := askRunning(ctx, sock, "node-1", &out); err == nil || !strings.Contains(err.Error(), "does not lead") {
		t.Errorf("a replica that does not lead answered: %v", err)
	}
	if err := askRunning(ctx, filepath.Join(t.TempDir(), "none.sock"), "node-1", &out); !errors.Is(err, errNoAnswerer) {
		t.Errorf("with nothing listening: %v, want errNoAnswerer", err)
	}
	select {
	case err := <-errc:
		t.Fatalf("the answer server stopped: %v", err)
	default:
	}
}

// lastReads are a device monitor's last reads: node-1's device on and its own,
// node-2's another machine's, node-3's never reached.
type lastReads struct{ round time.Time }

func (l lastReads) LastReads() ([]fencecall.TargetCheck, time.Time) {
	return []fencecall.TargetCheck{
		{Node: "node-1", Agent: "ipmi", Target: "10.0.0.1", State: plugin.StateOn, At: l.round, Latency: 42 * time.Millisecond,
			Identity: "uuid-1", Expect: "uuid-1"},
		{Node: "node-2", Agent: "ipmi", Target: "10.0.0.9", At: l.round, Identity: "uuid-9", Expect: "uuid-2",
			Err: plugin.Errorf(plugin.KindTargetMismatch, "device uuid-9 is not node uuid-2")},
		{Node: "node-3", Agent: "ipmi", Err: errors.New("node node-3 has no target for agent ipmi:\nno annotation")},
	}, l.round
}

// TestDevicesAsksTheRunningLeader: fence-controller devices prints the leading replica's
// last reads, with which leader answered and when its round ended, each device's identity
// against its node's, and the errors on one line; -o json is the answer itself. A replica
// that does not lead refuses, and without a running replica there is no answer.
func TestDevicesAsksTheRunningLeader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leads := true
	a := answers{devices: lastReads{round: time.Now().Add(-3 * time.Minute)}, leading: func() bool { return leads }, identity: "pod-1_42_abc"}
	sock := filepath.Join(t.TempDir(), "answers.sock")
	if err := serveAnswers(ctx, sock, a, make(chan error, 1)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RunDevices(ctx, AppOptions{AnswerSocket: sock}, "table", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"answered:  by the leader pod-1_42_abc; its last round of reads ended 3m ago",
		"NODE    AGENT  TARGET    STATE  IDENTITY", "READ", "LATENCY", "ERROR",
		"node-1  ipmi   10.0.0.1  on     uuid-1 (matches the node's)", "3m ago", "42ms",
		"node-2  ipmi   10.0.0.9  error  MISMATCH: device uuid-9, node uuid-2",
		"not reached", "node node-3 has no target for agent ipmi: no annotation"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("devices printed no %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := RunDevices(ctx, AppOptions{AnswerSocket: sock}, "json", &out); err != nil {
		t.Fatal(err)
	}
	var d oncall.Devices
	if err := json.Unmarshal(out.Bytes(), &d); err != nil || d.Leader != "pod-1_42_abc" || d.LastRound == nil || len(d.Reads) != 3 ||
		d.Reads[0].State != "on" || d.Reads[1].DeviceIdentity != "uuid-9" || d.Reads[2].At != nil {
		t.Errorf("devices -o json: %v: %s", err, out.String())
	}
	leads = false
	if err := RunDevices(ctx, AppOptions{AnswerSocket: sock}, "table", &out); err == nil || !strings.Contains(err.Error(), "does not lead") {
		t.Errorf("a replica that does not lead answered: %v", err)
	}
	if err := RunDevices(ctx, AppOptions{AnswerSocket: filepath.Join(t.TempDir(), "none.sock")}, "table", &out); !errors.Is(err, errNoAnswerer) {
		t.Errorf("with nothing listening: %v, want errNoAnswerer", err)
	}
	if err := RunDevices(ctx, AppOptions{}, "table", &out); err == nil || !strings.Contains(err.Error(), "--answer-socket") {
		t.Errorf("without --answer-socket: %v", err)
	}
}
