package nodeview

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Agents pass the node agents' verdict on a node to the detector (nodeagentwatch.Watch, from
// its seat among the agents' peers): whether its agent is gone, and a probe of its
// kubelet when the detector asks for one. ProbeKubelet reports whether it probed.
type Agents interface {
	ObserveAgent(node string)
	ProbeKubelet(ctx context.Context, node *corev1.Node, now time.Time) bool
}

// Replicas say whether a live controller replica runs on a node, and until when that
// evidence holds (leader.Replicas).
type Replicas interface {
	On(node string, now time.Time) (evidence string, until time.Time)
}

// Maintenance finds the objects that say a node is under maintenance (maintenance.Reader).
type Maintenance interface {
	Objects(node string) maintenance.Objects
}

// Sources are what a view and a decision are computed from. The loop fills them from its
// shared caches and its peers; explain from what it read of the API server. Agents,
// Replicas and Maintenance may be nil: none.
type Sources struct {
	Config *v1alpha1.Config
	// Detector judges the nodes' health from what its caller fed it.
	Detector *detector.Detector
	// Nodes are every node.
	Nodes func() ([]*corev1.Node, error)
	// Pods are the pods bound to a node.
	Pods func(node string) []*corev1.Pod
	// UrgentPDBs are the PodDisruptionBudgets that allow no disruption now.
	UrgentPDBs func() []*policyv1.PodDisruptionBudget
	// Attachments counts the VolumeAttachments of a node.
	Attachments func(node string) int
	// Incidents are every incident of the record; IncidentsOf the facts of a node's.
	Incidents   func() []*v1alpha1.NodeFence
	IncidentsOf func(node string) []incidents.Facts
	// PausedBy says who paused fencing and why (oncall.Pauses.Why): "" when no pause
	// request stands; the configuration's own switch is Config.Paused.
	PausedBy    func() string
	Agents      Agents
	Replicas    Replicas
	Maintenance Maintenance
}

// Observe is the view a sync of node takes: the node agents' verdict passed to the
// detector first, and the view taken again after a probe of the kubelet when the detector
// asks for one.
func (s Sources) Observe(ctx context.Context, pol *v1alpha1.Policy, n *corev1.Node, now time.Time) (policy.Node, detector.Observation) {
	if s.Agents != nil {
		s.Agents.ObserveAgent(n.Name)
	}
	pn, obs := s.View(pol, n, now)
	if obs.ProbeKubelet && s.Agents != nil && s.Agents.ProbeKubelet(ctx, n, now) {
		pn, obs = s.View(pol, n, now)
	}
	return pn, obs
}

// View is what policy and detector say of one node under policy pol at now: the node's
// own thresholds shrink with its pods' forgiveness and PDB urgency (never below the
// policy's minWait), so the observation is taken with them.
func (s Sources) View(pol *v1alpha1.Policy, n *corev1.Node, now time.Time) (policy.Node, detector.Observation) {
	pods := s.Pods(n.Name)
	pn, obs := s.Health(pol, n, pods, s.UrgentPDBs(), now, false)
	pn.Workload.NothingToRelease = policy.NothingToRelease(pods, s.Attachments(n.Name))
	pn.Holds.ControllerHere, pn.Holds.ControllerHereUntil = s.replicaOn(n.Name, now)
	pn.Holds.TargetReadsOff = n.Annotations[v1alpha1.TargetReadsOffAnnotation]
	var planned maintenance.Objects
	if s.Maintenance != nil {
		planned = s.Maintenance.Objects(n.Name)
	}
	pn.Holds.Maintenance = maintenance.Signal(n, pol.Maintenance.Cordoned, pn.Workload.NothingToRelease, planned)
	pn.Health.SilentSince = obs.Since
	for _, f := range s.IncidentsOf(n.Name) {
		if f.Phase == v1alpha1.PhaseFencing {
			pn.Fencing = true
		}
		if f.Phase.Open() {
			pn.Incident = true
			// The silence an open incident recorded outlasts this replica's clocks.
			pn.Health.SilentSince = maintenance.Earlier(pn.Health.SilentSince, f.EvidenceStart)
		}
		// The cooldown follows a fence that held; a failed one is the Failed rule's
		// (failedUnrecovered), not a fence.
		if f.Verified && f.FenceStart.After(pn.LastFencedAt) {
			pn.LastFencedAt = f.FenceStart
		}
	}
	return pn, obs
}

// Health is the part of a node's view that a decision about another node surveys: its
// labels and its health with its own thresholds. pdbs are the urgent ones. A survey
// (detector.SurveyWith) leaves the observation's evidence in words out.
func (s Sources) Health(pol *v1alpha1.Policy, n *corev1.Node, pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget, now time.Time, survey bool) (policy.Node, detector.Observation) {
	pn := policy.ForNode(pol, n, pods, pdbs)
	det := s.Config.Detection
	assess := s.Detector.AssessWith
	if survey {
		assess = s.Detector.SurveyWith
	}
	obs := assess(n, now,
		policy.Threshold(pol, pn, det.LeaseStaleAfter.Duration), policy.Threshold(pol, pn, det.NotReadyAfter.Duration))
	pn.Health.Unhealthy = obs.Health == detector.Unhealthy
	pn.Health.Suspect = obs.Health == detector.Suspect || obs.Health == detector.Flapping
	pn.Health.UnhealthyAt = obs.UnhealthyAt
	return pn, obs
}

func (s Sources) replicaOn(node string, now time.Time) (string, time.Time) {
	if s.Replicas == nil {
		return "", time.Time{}
	}
	return s.Replicas.On(node, now)
}

// Unhealthy counts, over every node a policy selects as it stands at now, those the
// detector finds unhealthy or with an open incident (as the budget counts them), and
// among those with no open incident the ones failedUnrecovered names a reason for (their
// last incident failed, and they get no new one until they recover or a person acts).
// A node no policy selects, or whose selector is bad, is counted by none.
func (s Sources) Unhealthy(now time.Time, failedUnrecovered func(node string, obs detector.Observation) string) (unhealthy, failed int, err error) {
	nodes, err := s.Nodes()
	if err != nil {
		return 0, 0, err
	}
	for _, n := range nodes {
		pol, err := policy.Select(s.Config.Policies, n.Labels)
		if err != nil || pol == nil {
			continue
		}
		pn, obs := s.View(pol, n, now)
		if pn.Health.Unhealthy || pn.Incident {
			unhealthy++
		}
		if !pn.Incident && failedUnrecovered(n.Name, obs) != "" {
			failed++
		}
	}
	return unhealthy, failed, nil
}
