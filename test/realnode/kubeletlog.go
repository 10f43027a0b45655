package realnode

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// PodStart is what the kubelet that got a pod logged while it started it, read from that
// kubelet's own log: the part of a pod's move that is the kubelet's.
type PodStart struct {
	Node string
	// Reached is the kubelet's first line about the pod: it had the pod from its watch.
	Reached time.Time
	// Verified is when it began verifying the pod's attached volume
	// (VerifyControllerAttachedVolume): it does so only once its own node status has
	// listed the volume in volumesInUse, at its next status update.
	Verified time.Time
	// Refused is when the API server's node authorizer refused the kubelet the pod's
	// claim because its graph did not yet link the claim to the node (zero: it did not).
	// The kubelet's pod worker then tries the pod again only after its backoff (10 s).
	Refused time.Time
}

// PodStart reads node's kubelet log of its current boot from from on: when the kubelet
// first logged pod (namespace/name), when it began verifying the attached volume vol (the
// PersistentVolume's name), and whether the node authorizer refused it the pod's claim.
func (c *Cluster) PodStart(node, pod, vol string, from time.Time) (PodStart, error) {
	n := c.Node(node)
	n.mu.Lock()
	log := n.path("logs", fmt.Sprintf("kubelet-%d.log", n.boots))
	n.mu.Unlock()
	f, err := os.Open(log)
	if err != nil {
		return PodStart{}, err
	}
	defer f.Close()
	ps, err := scanPodStart(bufio.NewScanner(f), pod, vol, from)
	ps.Node = node
	if err != nil {
		return ps, fmt.Errorf("%s: %w", log, err)
	}
	return ps, nil
}

// scanPodStart finds a pod's start in a kubelet's log lines (klog's header, structured
// values: `pod="default/web-0"`).
func scanPodStart(lines *bufio.Scanner, pod, vol string, from time.Time) (PodStart, error) {
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	var ps PodStart
	podKey := `pod="` + pod + `"`
	verify := `VerifyControllerAttachedVolume started for volume \"` + vol + `\"`
	for lines.Scan() {
		line := lines.Text()
		if !strings.Contains(line, podKey) {
			continue
		}
		at, ok := klogTime(line, from)
		if !ok || at.Before(from) {
			continue
		}
		if ps.Reached.IsZero() {
			ps.Reached = at
		}
		if ps.Refused.IsZero() && strings.Contains(line, "error processing PVC") && strings.Contains(line, "no relationship found between node") {
			ps.Refused = at
		}
		if strings.Contains(line, verify) {
			ps.Verified = at
			return ps, nil
		}
	}
	if err := lines.Err(); err != nil {
		return ps, err
	}
	return ps, fmt.Errorf("no line of %s verifying volume %s after %s", pod, vol, from.Format(time.RFC3339Nano))
}

// klogTime is the time of a klog line ("I1128 13:20:36.870461 ..."), in the local time
// zone klog writes it in. klog gives no year: the line's is the one that puts it within
// half a year of near, so that a log read across a new year keeps its order.
func klogTime(line string, near time.Time) (time.Time, bool) {
	const layout = "0102 15:04:05.000000"
	if len(line) < 1+len(layout) || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation(layout, line[1:1+len(layout)], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	t = t.AddDate(near.Year()-t.Year(), 0, 0)
	switch {
	case t.Sub(near) > 183*24*time.Hour:
		t = t.AddDate(-1, 0, 0)
	case near.Sub(t) > 183*24*time.Hour:
		t = t.AddDate(1, 0, 0)
	}
	return t, true
}
