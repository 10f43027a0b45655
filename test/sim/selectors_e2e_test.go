package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// TestPhaseSelectorsServed: the field selectors on status.phase that the controller's
// open-incident read and the node agents' reads send are served by a real API server
// with kubefence's CRD, and select what their Go counterparts (Phase.Open, PastBudget)
// would. Both readers fall back to listing everything when the API server refuses the
// selector, so only this test tells a selector that works from one that is refused.
func TestPhaseSelectorsServed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if err := InstallCRD(ctx, c); err != nil {
		t.Fatal(err)
	}
	phases := []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseFenced,
		v1alpha1.PhaseRemediated, v1alpha1.PhaseRecovered, v1alpha1.PhaseFailed, v1alpha1.PhaseCancelled}
	var open, past []string
	for _, p := range phases {
		name := "nf-" + strings.ToLower(string(p))
		if p == "" {
			name = "nf-new"
		}
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: "controller"}, Status: v1alpha1.NodeFenceStatus{Phase: p}}
		createIncident(t, ctx, c, nf)
		if p.Open() {
			open = append(open, name)
		}
		if nodeagent.PastBudget(nf) {
			past = append(past, name)
		}
	}
	fencing := versioned.NewForConfigOrDie(c.Config)
	for what, tc := range map[string]struct {
		selector string
		want     []string
	}{
		"the controller's open incidents": {incidents.OpenIncidentsSelector, open},
		"the node agents' holds":          {nodeagent.PastBudgetSelector, past},
	} {
		list, err := fencing.FencingV1alpha1().NodeFences().List(ctx, metav1.ListOptions{FieldSelector: tc.selector})
		if err != nil {
			t.Errorf("%s: list with %q: %v", what, tc.selector, err)
			continue
		}
		var got []string
		for _, nf := range list.Items {
			got = append(got, nf.Name)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q selects %v, want %v", what, tc.selector, got, tc.want)
		}
	}
}
