package controller

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// fencedSeries are the series of kubefence_node_fenced_timestamp_seconds in the loop's
// registry, as "node action value".
func (f *fixture) fencedSeries() []string {
	f.t.Helper()
	mfs, err := f.c.metrics.Registry.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "kubefence_node_fenced_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf("%s %s %.0f", labels["node"], labels["action"], m.GetGauge().GetValue()))
		}
	}
	return out
}

// TestRefreshShowsFencedNodes: the loop's periodic refresh (refreshFenced) shows a node whose open
// incident is fenced with the time its fence was verified (KubefenceNodeLeftOff reads
// it), and drops it once the incident is recovered.
func TestRefreshShowsFencedNodes(t *testing.T) {
	nf := fencedIncident(v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified)
	f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
	f.c.refreshFenced()
	verified := nf.Status.Attempts[0].Finished.Unix()
	if got, want := f.fencedSeries(), []string{fmt.Sprintf("node-1 Off %d", verified)}; !slices.Equal(got, want) {
		t.Errorf("fenced while Remediated: %v, want %v", got, want)
	}
	nf.Status.Phase = v1alpha1.PhaseRecovered
	f.cache(nf)
	f.c.refreshFenced()
	if got := f.fencedSeries(); len(got) != 0 {
		t.Errorf("fenced once Recovered: %v, want none", got)
	}
}
