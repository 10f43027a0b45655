package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// expect waits for the expectations, holds them for Hold, and records what is unmet.
func (r *runner) expect(ctx context.Context) {
	e := r.sc.Expect
	var unmet []string
	err := pollUntil(ctx, 250*time.Millisecond, e.Within.Duration, func(ctx context.Context) (bool, error) {
		unmet = r.unmet(ctx)
		return len(unmet) == 0, nil
	})
	if err != nil {
		for _, u := range unmet {
			r.fail("%s (after %s)", u, e.Within.Duration)
		}
		return
	}
	r.logf("expectations met")
	if e.Hold.Duration > 0 {
		if err := sleepUntil(ctx, time.Now().Add(e.Hold.Duration)); err != nil {
			r.fail("hold: %v", err)
			return
		}
		for _, ie := range e.Incidents {
			if ie.Phase != string(v1alpha1.PhaseHeld) {
				continue
			}
			node := r.node(ie.Node)
			incs, err := Incidents(ctx, r.h.Cluster, node)
			if err != nil || len(incs) == 0 || incs[len(incs)-1].Status.Phase != v1alpha1.PhaseHeld {
				r.fail("incident of %s not Held any more after %s", node, e.Hold.Duration)
			}
		}
		r.logf("held for %s", e.Hold.Duration)
	}
	if e.NothingFenced {
		for _, f := range r.anythingFenced() {
			r.fail("nothing may be fenced, but %s", f)
		}
	}
	if e.NoResets && r.agents != nil {
		for node, at := range r.agents.Resets() {
			r.fail("no watchdog may reset a node, but node %s's reset it at %s", node, at[0].Format(time.RFC3339Nano))
		}
	}
}

// unmet lists the expectations not met yet.
func (r *runner) unmet(ctx context.Context) []string {
	e := r.sc.Expect
	var out []string
	for _, ie := range e.Incidents {
		node := r.node(ie.Node)
		if r.seenPhase(node, ie.Phase) == 0 {
			out = append(out, fmt.Sprintf("incident of %s never seen %s", node, ie.Phase))
			continue
		}
		if ie.Message == "" && ie.Reason == "" {
			continue
		}
		incs, err := Incidents(ctx, r.h.Cluster, node)
		var last *v1alpha1.NodeFence
		if err == nil && len(incs) > 0 {
			last = &incs[len(incs)-1]
		}
		for _, want := range []struct{ what, text, got string }{
			{"says", ie.Message, fieldOf(last, func(nf *v1alpha1.NodeFence) string { return nf.Status.Message })},
			{"was opened for", ie.Reason, fieldOf(last, func(nf *v1alpha1.NodeFence) string { return nf.Spec.Reason })},
		} {
			if want.text != "" && !strings.Contains(want.got, want.text) {
				out = append(out, fmt.Sprintf("incident of %s %s %q, want %q in it", node, want.what, want.got, want.text))
			}
		}
	}
	for _, pod := range e.Moved {
		p, err := r.h.Cluster.Client.CoreV1().Pods(Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil || p.Spec.NodeName == r.podNode[pod] ||
			p.Status.Phase != corev1.PodRunning || podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			out = append(out, fmt.Sprintf("pod %s not running on another node than %s", pod, r.podNode[pod]))
		}
	}
	for ref, level := range e.Levels {
		node := r.node(ref)
		incs, err := Incidents(ctx, r.h.Cluster, node)
		if err != nil || len(incs) == 0 || int(incs[len(incs)-1].Status.VerifiedLevel) != level {
			out = append(out, fmt.Sprintf("incident of %s not verified at level %d", node, level))
		}
	}
	if e.PausedExit != nil {
		switch p := r.paused; {
		case p == nil:
			out = append(out, "no replica was paused")
		case p.alive():
			out = append(out, fmt.Sprintf("paused replica %s still running", p.name))
		case p.r.ExitCode() != *e.PausedExit:
			out = append(out, fmt.Sprintf("paused replica %s exited with %d, want %d", p.name, p.r.ExitCode(), *e.PausedExit))
		}
	}
	return out
}

// anythingFenced lists every power action, storage cut and release on any node.
func (r *runner) anythingFenced() []string {
	var out []string
	for name, b := range r.h.BMCs {
		ev, _ := b.Events()
		for _, e := range ev {
			if e.Source != "sim" && (e.Action == bmc.ActionOff || e.Action == bmc.ActionOffRequested || e.Action == bmc.ActionReset) {
				out = append(out, fmt.Sprintf("BMC of %s logged %s", name, e.Action))
			}
		}
	}
	for _, s := range r.rec.All() {
		if releaseKinds[s.Kind] {
			out = append(out, fmt.Sprintf("%s %s of %s", s.Kind, s.Object, s.Node))
		}
	}
	if r.storage != nil {
		for node := range r.storage.Initiators {
			if r.mon.CutAt(node, time.Now()) {
				out = append(out, "storage of "+node+" cut")
			}
		}
	}
	return out
}

// fieldOf is get(nf), or "(none)" without an incident.
func fieldOf(nf *v1alpha1.NodeFence, get func(*v1alpha1.NodeFence) string) string {
	if nf == nil {
		return "(none)"
	}
	return get(nf)
}
