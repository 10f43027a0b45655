package main

import (
	"context"
	"fmt"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim"
)

var metaGet = metav1.GetOptions{}

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// waitMoved waits until the victim's incident is remediated and web-0 runs elsewhere.
func waitMoved(ctx context.Context, h *sim.Harness, victim string) (string, error) {
	var moved string
	phase := v1alpha1.Phase("")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := sim.Incidents(ctx, h.Cluster, victim)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		if p := incs[len(incs)-1].Status.Phase; p != phase {
			phase = p
			say("incident %s: %s", incs[len(incs)-1].Name, p)
			if p == v1alpha1.PhaseFailed || p == v1alpha1.PhaseHeld {
				return false, fmt.Errorf("incident %s: %s", p, incs[len(incs)-1].Status.Message)
			}
		}
		pod, err := h.Cluster.Client.CoreV1().Pods(sim.Namespace).Get(ctx, "web-0", metaGet)
		if err != nil || pod.Spec.NodeName == victim || pod.Status.Phase != corev1.PodRunning || phase != v1alpha1.PhaseRemediated {
			return false, nil
		}
		moved = pod.Spec.NodeName
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("web-0 did not move off %s: %w", victim, err)
	}
	say("web-0 is Running on %s", moved)
	return moved, nil
}

// runningAgainAfter is when web-0 was first seen Running after the crash, in seconds after it.
func runningAgainAfter(seen []sim.Seen, crashAt time.Time) float64 {
	for _, s := range seen {
		if s.Kind == sim.SeenPodRunning && s.Object == sim.Namespace+"/web-0" && s.At.After(crashAt) {
			return s.At.Sub(crashAt).Seconds()
		}
	}
	return time.Since(crashAt).Seconds()
}

// running returns the processes of pids that still exist.
func running(pids map[string]int) []string {
	var left []string
	for name, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			left = append(left, fmt.Sprintf("%s (pid %d)", name, pid))
		}
	}
	sort.Strings(left)
	return left
}
