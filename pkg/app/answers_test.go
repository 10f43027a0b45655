package app

import (
	"bytes"
	"context"
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
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
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
