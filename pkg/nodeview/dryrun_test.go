package nodeview

import "testing"

// TestDryRunReportsOncePerEpisode: an episode is reported once; a new episode of the
// node, or the same one after the node was forgotten, is reported anew.
func TestDryRunReportsOncePerEpisode(t *testing.T) {
	var r DryRunReports
	for i, tc := range []struct {
		forget      bool
		node, since string
		first       bool
	}{
		{false, "node-1", "06:00", true},
		{false, "node-1", "06:00", false},
		{false, "node-2", "06:00", true},
		{false, "node-1", "06:05", true},
		{true, "node-1", "06:00", true},
	} {
		if tc.forget {
			r.Forget(tc.node)
		}
		if got := r.First(tc.node, tc.since); got != tc.first {
			t.Errorf("%d: First(%s, %s) = %t, want %t", i, tc.node, tc.since, got, tc.first)
		}
	}
	r.Forget("node-1")
	r.Forget("node-2")
	if n := r.Nodes(); n != 0 {
		t.Errorf("%d nodes remembered after both were forgotten, want 0", n)
	}
}
