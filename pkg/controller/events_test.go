package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/buildinfo"
)

// TestEventsWaitForTheSave: an incident's events go out only after the save that checks
// the leader Lease (issue 19: a paused leader's "Detected" and "verified fenced" events
// landed after the standby took over, because they were sent before the save).
func TestEventsWaitForTheSave(t *testing.T) {
	nf, node := remediatedIncident(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	c := testController(t, nf)
	rec := c.recorder.(*record.FakeRecorder)
	c.event(node, nf, corev1.EventTypeNormal, "Fenced", "node %s", node.Name)
	if n := len(rec.Events); n != 0 {
		t.Fatalf("%d events sent before the save", n)
	}
	if err := c.save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events); n != 2 {
		t.Fatalf("%d events after the save, want 2 (node and incident)", n)
	}
	c.event(node, nf, corev1.EventTypeNormal, "Other", "x")
	c.dropEvents(nf.Name)
	if err := c.save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events); n != 2 {
		t.Errorf("a dropped incident's event was sent: %d events", n)
	}
}

type countingSink struct{ creates int }

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) { s.creates++; return e, nil }
func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error) { return e, nil }
func (s *countingSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return e, nil
}

// TestConfirmedSinkDropsUnconfirmed: the broadcaster's queue may hold an event while the
// process is paused; on waking it goes out only if a Lease check passed within the renew
// deadline, and the refusal is one the broadcaster does not retry.
func TestConfirmedSinkDropsUnconfirmed(t *testing.T) {
	inner := &countingSink{}
	ok := false
	s := confirmedSink{EventSink: inner, confirmed: func() bool { return ok }}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}}
	_, err := s.Create(ev)
	var status *apierrors.StatusError
	if err == nil || inner.creates != 0 {
		t.Fatalf("unconfirmed: err %v, %d sent", err, inner.creates)
	}
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("refusal %T %v is not a StatusError the broadcaster gives up on (%T)", err, err, status)
	}
	ok = true
	if _, err := s.Create(ev); err != nil || inner.creates != 1 {
		t.Errorf("confirmed: err %v, %d sent", err, inner.creates)
	}
}

// TestBuildInfoMetric: every registry carries kubefence_build_info with the build's
// version, revision and Go version.
func TestBuildInfoMetric(t *testing.T) {
	m := newMetrics()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kubefence_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != buildinfo.Version() || labels["goversion"] != buildinfo.GoVersion() || labels["revision"] == "" {
			t.Errorf("kubefence_build_info labels %v", labels)
		}
		return
	}
	t.Errorf("no kubefence_build_info")
}

// TestCountersStartAtZero: a fresh controller exports every counter an alert reads at
// 0, so that the first failure is an increase (issue 23: KubefenceFencingFailed missed
// the first failed incident).
func TestCountersStartAtZero(t *testing.T) {
	c := testController(t, pendingIncident(time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC), nil))
	c.metrics.initCounters([]string{"ipmi"})
	want := map[string]bool{
		`kubefence_incidents_total{phase="Failed"}`:                                   false,
		`kubefence_holds_total{reason="UnhealthyBudgetExceeded"}`:                     false,
		`kubefence_agent_errors_total{agent="ipmi",kind="AgentDied",method="Fence"}`:  false,
		`kubefence_agent_errors_total{agent="ipmi",kind="Permanent",method="Status"}`: false,
	}
	families, err := c.metrics.registry.Gather()
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
