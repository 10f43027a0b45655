package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/agentcall"
	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestEventsWaitForTheSave: an incident's events go out only after the save that checks
// the leader Lease (a paused leader's "Detected" and "verified fenced" events
// landed after the standby took over, because they were sent before the save).
func TestEventsWaitForTheSave(t *testing.T) {
	nf, node := remediatedIncident(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	c := testController(t, nf)
	rec := c.record.Events.(*record.FakeRecorder)
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "node %s", node.Name)
	if n := len(rec.Events); n != 0 {
		t.Fatalf("%d events sent before the save", n)
	}
	if err := c.record.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events); n != 1 {
		t.Fatalf("%d events after the save, want 1 (on the node)", n)
	}
	c.event(node, nf, corev1.EventTypeNormal, "Other", "x")
	c.record.Drop(nf.Name)
	if err := c.record.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("a dropped incident's event was sent: %d events", n)
	}
}

// TestEventOnNodeOnly: an incident's Event goes on its node, once (a copy on the
// incident as well doubled the Events per incident, and its timeline holds the same
// steps); on the incident only when the node is gone.
func TestEventOnNodeOnly(t *testing.T) {
	nf, node := remediatedIncident(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	c := testController(t, nf)
	rec := c.record.Events.(*record.FakeRecorder)
	rec.IncludeObject = true
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "with node")
	c.event(nil, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "node gone")
	if err := c.record.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 2 || strings.Contains(got[0], "NodeFence") || !strings.Contains(got[1], "kind=NodeFence,") {
		t.Errorf("events %q, want one on the Node, then one on the NodeFence", got)
	}
}

// TestEventsFold: an incident opened and fenced before its first save sends one Event
// that says both, and one verified and released sends one more: two instead of four.
// Nothing is saved between the verified fence and the release's end, so the Fenced Event
// is still waiting when the Remediated one comes, and goes out on its own when the
// release failed and what was done is saved. A held incident keeps its Detected Event.
func TestEventsFold(t *testing.T) {
	nf, node := remediatedIncident(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	c := testController(t, nf)
	save := func() []string { t.Helper(); return saveAndDrain(t, c, nf) }
	expect := func(got []string, want ...string) { t.Helper(); expectStrings(t, "events", got, want) }
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "Node %s is unhealthy", node.Name)
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, "Fencing node %s", node.Name)
	expect(save(), "Warning FenceStarted Node "+node.Name+" is unhealthy. Fencing node "+node.Name)
	nf.Status.Phase = v1alpha1.PhaseFenced
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "released")
	expect(save(), "Normal Remediated verified. released")

	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	expect(save(), "Normal Fenced verified") // the release failed: what was done is saved

	// The node booted again before anything was released: the incident is saved
	// Remediated with the release skipped, and nothing is left to join the Fenced Event.
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	nf.Status.Phase = v1alpha1.PhaseRemediated
	expect(save(), "Normal Fenced verified")
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "held")
	c.event(node, nf, corev1.EventTypeWarning, "BudgetExceeded", "held")
	expect(save(), "Warning Detected held", "Warning BudgetExceeded held")
}

type countingSink struct{ creates int }

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) { s.creates++; return e, nil }
func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error) { return e, nil }
func (s *countingSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return e, nil
}

// TestEventsFoldInAStorm: with eventStormAt nodes fencing at once, an incident's start
// is no Event of its own: it waits through the fence and opens the Event that ends it,
// Remediated or FenceFailed. Below it, the start goes out at the save before the agent
// call, as an operator watching one node needs it.
func TestEventsFoldInAStorm(t *testing.T) {
	nf, node := remediatedIncident(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	c := testController(t, nf)
	save := func(phase v1alpha1.Phase) []string {
		t.Helper()
		nf.Status.Phase = phase
		return saveAndDrain(t, c, nf)
	}
	expect := func(got []string, want ...string) { t.Helper(); expectStrings(t, "events", got, want) }
	start := func() {
		c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "unhealthy")
		c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, "fencing")
	}
	// Calm: the start is told before the agent is called.
	start()
	expect(save(v1alpha1.PhaseFencing), "Warning FenceStarted unhealthy. fencing")

	for i := range eventStormAt {
		c.decide.admission.ClaimForced(fmt.Sprintf("storm-%d", i), fmt.Sprintf("storm-node-%d", i), c.now())
	}
	start()
	expect(save(v1alpha1.PhaseFencing)) // before the agent call
	expect(save(v1alpha1.PhaseFencing)) // the call's outcome
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "released")
	expect(save(v1alpha1.PhaseRemediated), "Normal Remediated unhealthy. fencing. verified. released")

	start()
	expect(save(v1alpha1.PhaseFencing))
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceFailed, "every level failed")
	expect(save(v1alpha1.PhaseFailed), "Warning FenceFailed unhealthy. fencing. every level failed")

	// Another Event during the fence goes out at once, the held start before it.
	start()
	expect(save(v1alpha1.PhaseFencing))
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonAgentDown, "level 1 skipped")
	expect(save(v1alpha1.PhaseFencing), "Warning FenceStarted unhealthy. fencing", "Warning AgentDown level 1 skipped")
}

// TestConfirmedSinkDropsUnconfirmed: the broadcaster's queue may hold an event while the
// process is paused; on waking it goes out only if a Lease check passed within the renew

// TestCountersStartAtZero: a fresh controller exports every counter an alert reads at
// 0, so that the first failure is an increase (KubefenceFencingFailed missed
// the first failed incident).
func TestCountersStartAtZero(t *testing.T) {
	c := fixtureController(t, fixtureConfig(), nil, pendingIncident(time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC), nil))
	want := map[string]bool{
		fmt.Sprintf(`kubefence_incidents_total{phase="%s"}`, v1alpha1.PhaseFailed):                                                    false,
		fmt.Sprintf(`kubefence_holds_total{reason="%s"}`, policy.ReasonStorm):                                                         false,
		fmt.Sprintf(`kubefence_holds_total{reason="%s"}`, v1alpha1.ReasonTargetMismatch):                                              false,
		`kubefence_target_mismatch_total{agent="ipmi"}`:                                                                               false,
		fmt.Sprintf(`kubefence_agent_errors_total{agent="ipmi",kind="%s",method="%s"}`, plugin.KindAgentDied, agentcall.MethodFence):  false,
		fmt.Sprintf(`kubefence_agent_errors_total{agent="ipmi",kind="%s",method="%s"}`, plugin.KindPermanent, agentcall.MethodStatus): false,
	}
	families, err := c.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			if _, ok := want[key]; ok && m.GetCounter().GetValue() == 0 {
				want[key] = true
			}
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("%s not exported at 0", k)
		}
	}
}

// saveAndDrain saves nf and returns the Events the save sent, as the fake recorder has
// them ("Type Reason message").
func saveAndDrain(t *testing.T, c *Controller, nf *v1alpha1.NodeFence) []string {
	t.Helper()
	if err := c.record.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	rec := c.record.Events.(*record.FakeRecorder)
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	return got
}

func expectStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s %q, want %q", what, got, want)
	}
}
