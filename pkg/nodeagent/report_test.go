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

// TestReportFormatSkew: a controller reads reports of its own format and of the first
// release's agents (no format field), and refuses, naming the field and what to do, a
// report of a newer format: its watchdog is not counted on rather than misread.
func TestReportFormatSkew(t *testing.T) {
	lease := func(raw string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		l.Namespace, l.Name = "kubefence-system", LeaseName("node-1")
		l.Annotations = map[string]string{ReportAnnotation: raw}
		return l
	}
	// As v0.1.0's agents wrote it: no format, no version.
	first := `{"bootID":"b","watchdog":{"kind":"device","armed":true,"timeout":"5s"},"members":{"count":0,"sha256":""},"isolation":"10s","reportInterval":"5s"}`
	if r, err := Decode(lease(first)); err != nil || !r.Watchdog.Armed || r.Format != 0 {
		t.Errorf("a report without a format (v0.1.0's): %+v, %v; want it read, armed", r, err)
	}
	var l coordinationv1.Lease
	if err := (Report{Format: ReportFormat, Version: "v0.2.0", Isolation: "10s"}).Encode(&l, "node-1"); err != nil {
		t.Fatal(err)
	}
	if r, err := Decode(&l); err != nil || r.Version != "v0.2.0" {
		t.Errorf("a report of this format: %+v, %v", r, err)
	}
	newer := strings.Replace(first, `{"bootID"`, `{"format":2,"version":"v9.0.0","bootID"`, 1)
	_, err := Decode(lease(newer))
	if err == nil {
		t.Fatal("a report of format 2 was read by a controller that reads format 1")
	}
	for _, want := range []string{"report Lease kubefence-system/kubefence-node-node-1", "format 2", "node agent v9.0.0", "at most 1", "upgrade the controller"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := Decode(lease(strings.Replace(first, `{"bootID"`, `{"format":-1,"bootID"`, 1))); err == nil || !strings.Contains(err.Error(), "format -1") {
		t.Errorf("format -1: %v", err)
	}
}

// TestCurrentReportCarriesFormatAndVersion: what an agent writes says its format and
// release.
func TestCurrentReportCarriesFormatAndVersion(t *testing.T) {
	a := New(Config{BootID: "b"})
	r := a.Current()
	if r.Format != ReportFormat || r.Version == "" {
		t.Errorf("Current() = format %d, version %q; want %d and the build's version", r.Format, r.Version, ReportFormat)
	}
}
