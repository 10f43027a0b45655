package kubectlfence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// Status is `kubectl fence status`: who leads, what pauses fencing, the open incidents,
// and the leader's last reads of the fence devices.
type Status struct {
	Release Release `json:"release"`
	// Leader is nil when the Lease has no holder.
	Leader *Leader `json:"leader,omitempty"`
	// LeaderError says why the leader could not be read.
	LeaderError string `json:"leaderError,omitempty"`
	// Pause are the pause requests: entries of the pause ConfigMap.
	Pause []PauseEntry `json:"pause"`
	// Incidents are the NodeFences not Recovered, Failed or Cancelled, oldest first.
	Incidents []Incident `json:"incidents"`
	// Devices are the leader's last read of every node's fence device (ReadDevices); nil
	// when it was not asked or did not answer.
	Devices *oncall.Devices `json:"devices,omitempty"`
	// DevicesError says why Devices is nil: the caller may not exec in the leader's pod,
	// or the leader did not answer.
	DevicesError string `json:"devicesError,omitempty"`
}

// PauseEntry is one pause request: its key names the reason, its value says who and why.
type PauseEntry struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Incident is one NodeFence as the plugin shows it.
type Incident struct {
	Name        string    `json:"name"`
	Node        string    `json:"node"`
	Phase       string    `json:"phase"`
	Created     time.Time `json:"created"`
	RequestedBy string    `json:"requestedBy,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Message     string    `json:"message,omitempty"`
	// Holds are the rules that hold it: its Held condition while true.
	Holds []Hold `json:"holds,omitempty"`
}

// Hold is a rule that holds an incident: the Held condition's reason and message.
type Hold struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// ReadStatus reads s's release: its leader, its pause requests and its open incidents.
func (c Clients) ReadStatus(ctx context.Context, r Release, now time.Time) (Status, error) {
	s := Status{Release: r, Pause: []PauseEntry{}, Incidents: []Incident{}}
	l, err := FindLeader(ctx, c.Kube, r, now)
	switch {
	case err == nil:
		s.Leader = l
	case errors.Is(err, ErrNoLeader) || apierrors.IsNotFound(err):
		s.LeaderError = err.Error()
	default:
		return s, err
	}
	if s.Pause, err = c.PauseEntries(ctx, r); err != nil {
		return s, err
	}
	list, err := c.Fencing.FencingV1alpha1().NodeFences().List(ctx, metav1.ListOptions{
		FieldSelector: v1alpha1.PhaseNotIn(v1alpha1.EndedPhases...)})
	if err != nil {
		return s, fmt.Errorf("list open incidents: %w", err)
	}
	for i := range list.Items {
		if nf := &list.Items[i]; nf.Status.Phase.Open() {
			s.Incidents = append(s.Incidents, incident(nf))
		}
	}
	sort.SliceStable(s.Incidents, func(i, j int) bool { return s.Incidents[i].Created.Before(s.Incidents[j].Created) })
	return s, nil
}

// PauseEntries are the pause requests of r, by name; none when its ConfigMap is missing.
func (c Clients) PauseEntries(ctx context.Context, r Release) ([]PauseEntry, error) {
	cm, err := c.Kube.CoreV1().ConfigMaps(r.Namespace).Get(ctx, r.PauseConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []PauseEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pause ConfigMap %s/%s: %w", r.Namespace, r.PauseConfigMap, err)
	}
	out := []PauseEntry{}
	for k, v := range cm.Data {
		out = append(out, PauseEntry{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b PauseEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// History is the node's incidents, newest first.
func (c Clients) History(ctx context.Context, node string) ([]Incident, error) {
	nfs, err := c.nodeFences(ctx, node)
	if err != nil {
		return nil, err
	}
	out := make([]Incident, 0, len(nfs))
	for i := range nfs {
		out = append(out, incident(&nfs[i]))
	}
	return out, nil
}

// nodeFences are node's NodeFences, newest first. spec.nodeName is a selectable field of
// the CRD; the filter here keeps a reader that ignores field selectors right too.
func (c Clients) nodeFences(ctx context.Context, node string) ([]v1alpha1.NodeFence, error) {
	list, err := c.Fencing.FencingV1alpha1().NodeFences().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("list the incidents of %s: %w", node, err)
	}
	var out []v1alpha1.NodeFence
	for _, nf := range list.Items {
		if nf.Spec.NodeName == node {
			out = append(out, nf)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].CreationTimestamp, out[j].CreationTimestamp
		if a.Equal(&b) {
			return out[i].Name > out[j].Name
		}
		return b.Before(&a)
	})
	return out, nil
}

// Timeline is the steps of incident name, oldest first, as the leader recorded them.
func (c Clients) Timeline(ctx context.Context, name string) ([]v1alpha1.Step, error) {
	nf, err := c.Fencing.FencingV1alpha1().NodeFences().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read incident %s: %w", name, err)
	}
	if nf.Status.Timeline == nil {
		return []v1alpha1.Step{}, nil
	}
	return nf.Status.Timeline, nil
}

// incident is nf as the plugin shows it.
func incident(nf *v1alpha1.NodeFence) Incident {
	in := Incident{Name: nf.Name, Node: nf.Spec.NodeName, Phase: string(nf.Status.Phase), Created: nf.CreationTimestamp.Time,
		RequestedBy: nf.Spec.RequestedBy, Reason: nf.Spec.Reason, Message: nf.Status.Message}
	if in.Phase == "" {
		in.Phase = "New"
	}
	if h := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionHeld); h != nil && h.Status == metav1.ConditionTrue {
		in.Holds = append(in.Holds, Hold{Reason: h.Reason, Message: h.Message})
	}
	return in
}
