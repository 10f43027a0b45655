package life

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestAlive: every sign of life counts while it is within its stated bound, and for
// nothing past it; a contradicted watchdog fence on the record counts for good.
func TestAlive(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	contradicted := []v1alpha1.Attempt{{Level: 1, Agent: v1alpha1.WatchdogAgent, State: v1alpha1.AttemptFailed, PowerState: "on",
		Error: "contradicted: sign of life at 12:00:01"}}
	ineligible := []v1alpha1.Attempt{{Level: 1, Agent: v1alpha1.WatchdogAgent, State: v1alpha1.AttemptFailed, PowerState: "unknown",
		Error: "watchdog level: no report"}}
	for name, tc := range map[string]struct {
		signs    Signs
		attempts []v1alpha1.Attempt
		says     string
	}{
		"nothing":                       {Signs{At: now}, nil, ""},
		"kubelet renewed":               {Signs{At: now, Kubelet: "its Lease was renewed at 11:59:50"}, nil, "its Lease was renewed"},
		"replica on the node":           {Signs{At: now, Replica: "replica r1 was last seen renewing its identity Lease"}, nil, "a controller replica runs on it: replica r1"},
		"agent reported 3s ago":         {Signs{At: now, Agent: Seen{At: now.Add(-3 * time.Second), For: 30 * time.Second}}, nil, "its node agent reported 3s ago (a report counts for 30s)"},
		"agent's report past its bound": {Signs{At: now, Agent: Seen{At: now.Add(-30 * time.Second), For: 30 * time.Second}}, nil, ""},
		"kubelet answered a probe":      {Signs{At: now, Probe: Seen{At: now.Add(-time.Minute), For: 2 * time.Minute}}, nil, "its kubelet answered a probe 1m0s ago"},
		"probe answer past its bound":   {Signs{At: now, Probe: Seen{At: now.Add(-3 * time.Minute), For: 2 * time.Minute}}, nil, ""},
		"contradicted watchdog fence":   {Signs{At: now}, contradicted, "its watchdog fence (level 1) was contradicted: contradicted: sign of life"},
		"ineligible watchdog level":     {Signs{At: now}, ineligible, ""},
	} {
		t.Run(name, func(t *testing.T) {
			nf := &v1alpha1.NodeFence{Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed, Attempts: tc.attempts}}
			if got := tc.signs.Alive(nf); (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
				t.Fatalf("sign %q, want %q", got, tc.says)
			}
		})
	}
}

// TestReportSeen: a report counts for the duration its Lease states, or for
// watchdog.reportMaxAge on a Lease that states none.
func TestReportSeen(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	stated := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15)}}
	if got := ReportSeen(stated, at, time.Minute); got != (Seen{At: at, For: 15 * time.Second}) {
		t.Errorf("stated: %+v", got)
	}
	if got := ReportSeen(&coordinationv1.Lease{}, at, time.Minute); got != (Seen{At: at, For: time.Minute}) {
		t.Errorf("none stated: %+v", got)
	}
}
