package sim

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/test/sim/bmc"
)

// steps runs every step at its time.
func (r *runner) steps(ctx context.Context) error {
	prevEnd := r.t0
	for i, st := range r.sc.Steps {
		start := prevEnd.Add(st.After.Duration)
		if st.At.Duration != 0 {
			start = r.t0.Add(st.At.Duration)
		}
		if err := sleepUntil(ctx, start); err != nil {
			return err
		}
		if st.Until != nil {
			if err := r.waitCondition(ctx, *st.Until); err != nil {
				return fmt.Errorf("step %d (%s): %w", i, st.Action, err)
			}
		}
		if err := r.act(ctx, st); err != nil {
			return fmt.Errorf("step %d (%s): %w", i, st.Action, err)
		}
		prevEnd = time.Now()
	}
	return nil
}

// sleepUntil is a scripted delay between steps, not a wait for a condition.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func (r *runner) waitCondition(ctx context.Context, c Condition) error {
	node := r.node(c.Node)
	timeout := c.Timeout.Duration
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	err := pollUntil(ctx, 20*time.Millisecond, timeout, func(context.Context) (bool, error) {
		if c.Phase != "" && r.seenPhase(node, c.Phase) < max(c.Count, 1) {
			return false, nil
		}
		if c.BMC != "" {
			ev, err := r.h.BMCs[node].Events()
			if err != nil {
				return false, err
			}
			for _, e := range ev {
				if e.Action == c.BMC {
					return true, nil
				}
			}
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s (phase %q, bmc %q): %w", node, c.Phase, c.BMC, err)
	}
	r.logf("condition met: %s phase %q bmc %q", node, c.Phase, c.BMC)
	return nil
}

// seenPhase counts the node's incidents seen in phase.
func (r *runner) seenPhase(node, phase string) int {
	incidents := map[string]bool{}
	for _, s := range r.rec.All() {
		if s.Kind == SeenIncidentPhase && s.Node == node && s.Detail == phase {
			incidents[s.Object] = true
		}
	}
	return len(incidents)
}

// resumePaused continues the replica a pauseLeader step stopped, or the one that stopped
// itself at the scenario's pauseAt. A self-pausing replica that never got there (it
// was deposed or restarted first) leaves nothing to resume.
func (r *runner) resumePaused() error {
	r.mu.Lock()
	p := r.paused
	if p == nil {
		for _, s := range r.replicas {
			if strings.Contains(s.r.Log(), `"Pausing at test point"`) && s.alive() {
				p = s
			}
		}
	}
	r.mu.Unlock()
	if p == nil {
		r.logf("no replica paused; nothing to resume")
		return nil
	}
	r.logf("resuming replica %s (%s)", p.name, p.id)
	return p.r.Signal(syscall.SIGCONT)
}

// failSave waits for a replica stopped at its test point (pauseAt), then takes the API
// server down for downFor and resumes the replica while it is down: its next save fails.
// A run whose replica never stopped there (another fault ended it first) logs so.
func (r *runner) failSave(ctx context.Context, downFor time.Duration) error {
	err := pollUntil(ctx, 100*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.replicas {
			if s.alive() && strings.Contains(s.r.Log(), `"Pausing at test point"`) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		r.logf("no replica stopped at its test point: no failed save")
		return r.resumePaused()
	}
	return r.h.Cluster.RestartAPIServer(ctx, func(ctx context.Context) error {
		if err := r.resumePaused(); err != nil {
			return err
		}
		return sleepUntil(ctx, time.Now().Add(downFor))
	})
}

// editTarget rewrites each node's BMC annotation to name the spare BMC, a unique machine
// switched off: a mapping edited mid-incident must not move its calls (they go to the
// target the fence recorded), or a read back of the spare would "verify" a running node.
func (r *runner) editTarget(ctx context.Context, nodes []string) error {
	r.mu.Lock()
	if r.spare == nil {
		spare, err := bmc.StartIPMI(ctx, bmc.IPMIOptions{Dir: filepath.Join(r.o.Dir, "bmc", "spare"), PoweredOn: false})
		if err != nil {
			r.mu.Unlock()
			return fmt.Errorf("start the spare BMC: %w", err)
		}
		r.spare = spare
	}
	addr := net.JoinHostPort(r.spare.Host(), strconv.Itoa(r.spare.Port()))
	r.mu.Unlock()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, IPMIAddressKey, addr)
	for _, n := range nodes {
		if _, err := r.h.Cluster.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("edit the BMC annotation of %s: %w", n, err)
		}
	}
	return nil
}

// act carries out one step's action.
func (r *runner) act(ctx context.Context, st Step) error {
	nodes := r.nodes(st)
	r.logf("%s %v", st.Action, nodes)
	switch st.Action {
	case ActPartition, ActPowerLoss, ActFlap, ActCrash, ActCutFromAPIServer:
		for _, n := range nodes {
			r.mu.Lock()
			r.disturbed[n] = true
			r.mu.Unlock()
		}
	}
	if agentActions[st.Action] || st.Action == ActCutFromController {
		return r.actOnAgents(ctx, st.Action, nodes)
	}
	switch st.Action {
	case ActFlap:
		return r.flap(ctx, st, nodes)
	case ActPowerOn:
		return r.powerOn(ctx, nodes)
	case ActKillLeader, ActPauseLeader, ActStopLeader:
		return r.signalLeader(ctx, st.Action)
	case ActFailSave:
		return r.failSave(ctx, st.DownFor.Duration)
	case ActResumePaused:
		return r.resumePaused()
	case ActEditTarget:
		return r.editTarget(ctx, nodes)
	case ActKillAgent:
		return r.killAgent(ctx)
	case ActRestartAPIServer:
		return r.h.Cluster.RestartAPIServer(ctx, func(ctx context.Context) error {
			return sleepUntil(ctx, time.Now().Add(st.DownFor.Duration))
		})
	case ActReleaseEarly:
		return r.releaseEarly(ctx, nodes)
	case ActRestartControllers:
		return r.restartControllers()
	}
	return r.actOnNodes(st.Action, nodes)
}

// actOnNodes carries out an action on each of nodes, their kubelets or their BMCs.
func (r *runner) actOnNodes(action string, nodes []string) error {
	c := r.h.Cluster
	for _, n := range nodes {
		switch action {
		case ActPartition:
			c.Node(n).Crash()
			if r.agents != nil {
				r.agents.Cut(n)
			}
		case ActCutFromAPIServer:
			c.Node(n).CutFromAPIServer()
		case ActPowerLoss:
			if err := r.h.BMCs[n].SetPower(false); err != nil {
				return err
			}
		case ActHeal:
			c.Node(n).Resume()
		case ActRestart:
			c.Node(n).Restart()
		case ActStopBMC:
			if err := r.h.BMCs[n].Stop(); err != nil {
				return err
			}
		case ActIgnoreBMC:
			r.h.MachineIgnoresBMC(n)
		}
	}
	return nil
}

func (r *runner) flap(ctx context.Context, st Step, nodes []string) error {
	for i := range st.Count {
		for _, n := range nodes {
			r.h.Cluster.Node(n).Crash()
		}
		if err := sleepUntil(ctx, time.Now().Add(st.Down.Duration)); err != nil {
			return err
		}
		for _, n := range nodes {
			r.h.Cluster.Node(n).Restart()
		}
		r.logf("flap %d of %d done", i+1, st.Count)
		if err := sleepUntil(ctx, time.Now().Add(st.Up.Duration)); err != nil {
			return err
		}
	}
	return nil
}

// powerOn switches nodes on once their machines have seen the power go off.
func (r *runner) powerOn(ctx context.Context, nodes []string) error {
	for _, n := range nodes {
		err := pollUntil(ctx, 50*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
			return r.h.Cluster.Node(n).PoweredOff(), nil
		})
		if err != nil {
			return fmt.Errorf("machine %s never went off: %w", n, err)
		}
		if err := r.h.BMCs[n].SetPower(true); err != nil {
			return err
		}
	}
	return nil
}

// releaseEarly is a planted bug: it does what a broken controller would, tainting the
// node out of service and deleting its pods and volume attachments while nothing has
// fenced it.
func (r *runner) releaseEarly(ctx context.Context, nodes []string) error {
	cs := r.h.Cluster.Client
	zero := int64(0)
	for _, n := range nodes {
		patch := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"planted","effect":"NoExecute"}]}}`, outOfServiceKey)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		pods, err := cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		vas, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, va := range vas.Items {
			if va.Spec.NodeName == n {
				if err := cs.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
		}
	}
	return nil
}

func nodeOfPod(ctx context.Context, c *Cluster, name string) (string, error) {
	p, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return p.Spec.NodeName, nil
}
