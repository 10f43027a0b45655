package sim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Validate returns every problem of the scenario, each naming its field.
func (sc *Scenario) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if sc.Nodes < 2 {
		add("nodes: %d, want at least 2", sc.Nodes)
	}
	if sc.StatefulSet.Replicas < 1 || sc.StatefulSet.Replicas >= sc.Nodes {
		add("statefulSet.replicas: %d, want 1 to nodes-1 (a moved pod needs a free node)", sc.StatefulSet.Replicas)
	}
	if sc.Profile != ProfileFast && sc.Profile != ProfileDefault {
		add("profile: %q, want fast or default", sc.Profile)
	}
	if sc.Storage != "" && sc.Storage != "iscsi" {
		add("storage: %q, want iscsi or empty", sc.Storage)
	}
	for zone, nodes := range sc.Zones {
		for _, n := range nodes {
			if err := sc.checkRef(n); err != nil || strings.HasPrefix(n, "@") {
				add("zones.%s: %q is not a node name", zone, n)
			}
		}
	}
	for i, st := range sc.Steps {
		errs = append(errs, sc.stepProblems(i, st)...)
	}
	for i, e := range sc.Expect.Incidents {
		if err := sc.checkRef(e.Node); err != nil {
			add("expect.incidents[%d]: %v", i, err)
		}
		if !validPhase(e.Phase) {
			add("expect.incidents[%d].phase: unknown %q", i, e.Phase)
		}
	}
	errs = append(errs, sc.nodeAgentsProblems()...)
	for ref := range sc.Expect.Levels {
		if err := sc.checkRef(ref); err != nil {
			add("expect.levels: %v", err)
		}
	}
	return errors.Join(errs...)
}

func condNode(c *Condition) string {
	if c == nil {
		return ""
	}
	return c.Node
}

func validPhase(p string) bool {
	switch v1alpha1.Phase(p) {
	case v1alpha1.PhasePending, v1alpha1.PhaseFencing, v1alpha1.PhaseFenced, v1alpha1.PhaseRemediated,
		v1alpha1.PhaseRecovered, v1alpha1.PhaseHeld, v1alpha1.PhaseFailed, v1alpha1.PhaseCancelled:
		return true
	}
	return false
}

// checkRef accepts "node-N" within range or "@<statefulset>-<ordinal>".
func (sc *Scenario) checkRef(ref string) error {
	if pod, ok := strings.CutPrefix(ref, "@"); ok {
		var ord int
		if _, err := fmt.Sscanf(strings.TrimPrefix(pod, sc.StatefulSet.Name+"-"), "%d", &ord); err != nil ||
			!strings.HasPrefix(pod, sc.StatefulSet.Name+"-") || ord < 0 || ord >= sc.StatefulSet.Replicas {
			return fmt.Errorf("%q names no pod of statefulset %s", ref, sc.StatefulSet.Name)
		}
		return nil
	}
	var n int
	if _, err := fmt.Sscanf(ref, "node-%d", &n); err != nil || n < 1 || n > sc.Nodes || ref != fmt.Sprintf("node-%d", n) {
		return fmt.Errorf("%q is not node-1 … node-%d", ref, sc.Nodes)
	}
	return nil
}

// stepProblems are the problems of step i, st.
func (sc *Scenario) stepProblems(i int, st Step) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !knownActions[st.Action] {
		add("steps[%d].action: unknown %q", i, st.Action)
	}
	if st.At.Duration != 0 && st.After.Duration != 0 {
		add("steps[%d]: set at or after, not both", i)
	}
	for _, ref := range append(append([]string{st.Node}, st.Nodes...), condNode(st.Until)) {
		if ref == "" {
			continue
		}
		if err := sc.checkRef(ref); err != nil {
			add("steps[%d]: %v", i, err)
		}
	}
	if nodeActions[st.Action] && st.Node == "" && len(st.Nodes) == 0 && st.Zone == "" {
		add("steps[%d]: %s needs node, nodes or zone", i, st.Action)
	}
	if st.Zone != "" && sc.Zones[st.Zone] == nil {
		add("steps[%d].zone: %q is not in zones", i, st.Zone)
	}
	if agentActions[st.Action] && sc.NodeAgents == nil {
		add("steps[%d]: %s needs nodeAgents", i, st.Action)
	}
	if st.Action == ActCutFromController && (sc.NodeAgents == nil || !sc.NodeAgents.Heartbeats) {
		add("steps[%d]: %s needs nodeAgents with heartbeats", i, st.Action)
	}
	if st.Action == ActFlap && (st.Count < 1 || st.Down.Duration <= 0 || st.Up.Duration <= 0) {
		add("steps[%d]: flap needs count, down and up", i)
	}
	return errs
}

// nodeAgentsProblems are the problems of the nodeAgents section.
func (sc *Scenario) nodeAgentsProblems() []error {
	na := sc.NodeAgents
	if na == nil {
		return nil
	}
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for i, ref := range na.Unarmed {
		if err := sc.checkRef(ref); err != nil {
			add("nodeAgents.unarmed[%d]: %v", i, err)
		}
	}
	if 3*na.ReadInterval.Duration > na.Isolation.Duration {
		add("nodeAgents.readInterval: %s, want at most a third of isolation %s", na.ReadInterval.Duration, na.Isolation.Duration)
	}
	if na.Heartbeats && !na.Peers {
		add("nodeAgents.heartbeats: needs peers: the controller sits among them")
	}
	return errs
}
