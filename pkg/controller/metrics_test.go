package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

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
		fmt.Sprintf(`kubefence_agent_errors_total{agent="ipmi",kind="%s",method="%s"}`, plugin.KindAgentDied, fencecall.MethodFence):  false,
		fmt.Sprintf(`kubefence_agent_errors_total{agent="ipmi",kind="%s",method="%s"}`, plugin.KindPermanent, fencecall.MethodStatus): false,
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
