package nodeagent

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestReportLeaseOfALongNodeName: a node name may be longer than a label value (63
// characters). The report Lease of such a node carries a valid label and names its node
// whole through its holder; a Lease whose label is not its holder's names no node.
func TestReportLeaseOfALongNodeName(t *testing.T) {
	for _, node := range []string{"node-1", "node-1." + strings.Repeat("a", 60) + ".rack-7.example.internal"} {
		var l coordinationv1.Lease
		if err := (Report{}).Encode(&l, node); err != nil {
			t.Fatal(err)
		}
		if errs := validation.IsValidLabelValue(l.Labels[NodeLabel]); len(errs) > 0 {
			t.Errorf("%s: label %q: %v", node, l.Labels[NodeLabel], errs)
		}
		if got := NodeOf(&l); got != node {
			t.Errorf("NodeOf(the report Lease of %s) = %q", node, got)
		}
		other := "node-2"
		l.Spec.HolderIdentity = &other
		if got := NodeOf(&l); got != "" {
			t.Errorf("NodeOf(a Lease labelled for %s, held by %s) = %q, want none", node, other, got)
		}
	}
}

// TestEqualReportsByGist: a report whose reason for not feeding changed only in its
// details (a count of answers) is not written again before the report interval; one
// whose reason changed, or whose watchdog was armed, is.
func TestEqualReportsByGist(t *testing.T) {
	base := Report{BootID: "b", Isolation: "10s", Watchdog: WatchdogReport{Kind: "device", Stopped: "not armed yet: node a is cut off: answers from 3 of 100 members"}}
	same := base
	same.Watchdog.Stopped = "not armed yet: node a is cut off: answers from 4 of 100 members"
	other := base
	other.Watchdog.Stopped = "not armed: watchdog /dev/watchdog: open: permission denied"
	armed := base
	armed.Watchdog = WatchdogReport{Kind: "device", Armed: true, Timeout: "5s"}
	if !equalReports(base, same) || equalReports(base, other) || equalReports(base, armed) {
		t.Errorf("equal: same gist %t, another reason %t, armed %t; want true, false, false",
			equalReports(base, same), equalReports(base, other), equalReports(base, armed))
	}
}
