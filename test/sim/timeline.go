package sim

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// Entry is one line of an incident's timeline, from one source.
type Entry struct {
	At     time.Time
	Source string
	What   string
}

// Incidents returns the NodeFences of a node (of every node for ""), oldest first.
func Incidents(ctx context.Context, c *Cluster, node string) ([]v1alpha1.NodeFence, error) {
	dyn, err := dynamicClient(c)
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(v1alpha1.NodeFenceResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list incidents: %w", err)
	}
	var out []v1alpha1.NodeFence
	for i := range list.Items {
		nf, err := decodeIncident(&list.Items[i])
		if err != nil {
			return nil, err
		}
		if node == "" || nf.Spec.NodeName == node {
			out = append(out, nf)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out, nil
}

// decodeIncident is the NodeFence u holds.
func decodeIncident(u *unstructured.Unstructured) (v1alpha1.NodeFence, error) {
	var nf v1alpha1.NodeFence
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nf); err != nil {
		return nf, fmt.Errorf("decode incident %s: %w", u.GetName(), err)
	}
	return nf, nil
}

// Timeline merges three independent records of one node's incident: the controller's
// own (NodeFence status), the BMC's log, and what a watcher saw on the API server.
func Timeline(node string, crashAt time.Time, incidents []v1alpha1.NodeFence, power []bmc.PowerEvent, seen []Seen) []Entry {
	entries := []Entry{{At: crashAt, Source: "sim", What: fmt.Sprintf("%s: kubelet stopped, heartbeats stop (BMC still on)", node)}}
	for _, nf := range incidents {
		for _, s := range nf.Status.Timeline {
			entries = append(entries, Entry{At: s.Time.Time, Source: "controller", What: s.Type + ": " + s.Message})
		}
	}
	for _, e := range power {
		entries = append(entries, Entry{At: e.Time, Source: "bmc " + node, What: "power " + e.Action + " (requested by " + e.Source + ")"})
	}
	for _, s := range seen {
		if s.Node != node && s.Kind != SeenPodRunning {
			continue
		}
		what := s.Kind + " " + s.Object
		switch s.Kind {
		case SeenPodRunning:
			if s.Node == node || s.At.Before(crashAt) {
				continue
			}
			what = fmt.Sprintf("pod %s Running on %s", s.Object, s.Node)
		case SeenIncidentPhase:
			what = fmt.Sprintf("incident %s phase %s", s.Object, s.Detail)
		}
		entries = append(entries, Entry{At: s.At, Source: "apiserver", What: what})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].At.Before(entries[j].At) })
	return entries
}

// PrintTimeline writes entries with times relative to t0.
func PrintTimeline(w io.Writer, t0 time.Time, entries []Entry) {
	for _, e := range entries {
		fmt.Fprintf(w, "%+9.3fs  %-12s %s\n", e.At.Sub(t0).Seconds(), e.Source, e.What)
	}
}
