package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Phases of a failure as the benchmark reports them, in order.
var BenchPhases = []string{"detect", "decide", "fence", "verify", "remediate", "reschedule"}

// Recovery is how one node's failure played out: from the death of its kubelet to its
// StatefulSet pod Running and Ready on another node, split into phases. The phase ends
// come from the incident's own timeline (detect: Detected; decide: FenceStarted; fence:
// the agent returned; verify: Verified) and from the independent recorder (remediate:
// the pod deleted; reschedule: the new pod Running elsewhere).
type Recovery struct {
	Node, Pod string
	Crash     time.Time
	Phases    map[string]time.Duration
	Total     time.Duration
	Missing   string // why a phase could not be measured, if so
}

// MeasureRecovery builds a node's Recovery from its newest incident and the recorder.
func MeasureRecovery(ctx context.Context, c *Cluster, rec *Recorder, node, pod string, crash time.Time) Recovery {
	r := Recovery{Node: node, Pod: pod, Crash: crash, Phases: map[string]time.Duration{}}
	incs, err := Incidents(ctx, c, node)
	if err != nil || len(incs) == 0 {
		r.Missing = fmt.Sprintf("no incident (%v)", err)
		return r
	}
	nf := incs[len(incs)-1]
	// A step missing from the timeline leaves a zero mark, reported below.
	step := func(typ string) time.Time {
		at, _ := stepAt(nf, typ)
		return at
	}
	marks := []time.Time{crash, step(v1alpha1.StepDetected), step(v1alpha1.StepFenceStarted), step(v1alpha1.StepAgentReturned), step(v1alpha1.StepVerified)}
	var deleted, running time.Time
	for _, s := range rec.All() {
		if s.Object != Namespace+"/"+pod || s.At.Before(crash) {
			continue
		}
		if s.Kind == SeenPodDeleted && s.Node == node && deleted.IsZero() {
			deleted = s.At
		}
		if s.Kind == SeenPodRunning && s.Node != node && running.IsZero() {
			running = s.At
		}
	}
	marks = append(marks, deleted, running)
	for i, ph := range BenchPhases {
		if marks[i].IsZero() || marks[i+1].IsZero() {
			r.Missing = fmt.Sprintf("no mark for the end of %s", ph)
			return r
		}
		r.Phases[ph] = marks[i+1].Sub(marks[i])
	}
	r.Total = running.Sub(crash)
	return r
}

// Released is the time from the crash to the pod's deletion from the dead node: every
// phase but the rescheduling.
func Released(r Recovery) time.Duration {
	var d time.Duration
	for _, ph := range BenchPhases[:len(BenchPhases)-1] {
		d += r.Phases[ph]
	}
	return d
}

// stepAt returns the time of the first step of type typ in nf's timeline, if there is one.
func stepAt(nf v1alpha1.NodeFence, typ string) (time.Time, bool) {
	for _, s := range nf.Status.Timeline {
		if s.Type == typ {
			return s.Time.Time, true
		}
	}
	return time.Time{}, false
}

// Percentile is the nearest-rank percentile p (0–100) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// SummaryTable renders p50/p99 of the total and of every phase for rs as Markdown rows.
func SummaryTable(rs []Recovery) string {
	var b strings.Builder
	b.WriteString("| | total | " + strings.Join(BenchPhases, " | ") + " |\n|---|---|" + strings.Repeat("---|", len(BenchPhases)) + "\n")
	for _, p := range []float64{50, 99} {
		var tot []time.Duration
		per := map[string][]time.Duration{}
		for _, r := range rs {
			if r.Missing != "" {
				continue
			}
			tot = append(tot, r.Total)
			for ph, d := range r.Phases {
				per[ph] = append(per[ph], d)
			}
		}
		fmt.Fprintf(&b, "| p%.0f | **%s** |", p, fmtSecs(Percentile(tot, p)))
		for _, ph := range BenchPhases {
			fmt.Fprintf(&b, " %s |", fmtSecs(Percentile(per[ph], p)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func fmtSecs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// StuckPod is what Kubernetes alone did to a StatefulSet pod of a dead node.
type StuckPod struct {
	Node, Pod          string
	Window             time.Duration
	NotReadyAfter      time.Duration // node Ready turned Unknown/False, after the crash
	MarkedAfter        time.Duration // pod got a deletionTimestamp or DisruptionTarget; 0: never
	Terminating        bool
	RunningElsewhere   bool
	Phase, NodeAtClose string
}

// ObserveStuckPod reads, at the end of the window, what happened to pod of a dead node
// that nothing fenced.
func ObserveStuckPod(ctx context.Context, c *Cluster, rec *Recorder, node, pod string, crash time.Time) (StuckPod, error) {
	s := StuckPod{Node: node, Pod: pod, Window: time.Since(crash)}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return s, err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			s.NotReadyAfter = cond.LastTransitionTime.Sub(crash)
		}
	}
	p, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return s, err
	}
	s.Phase, s.NodeAtClose = string(p.Status.Phase), p.Spec.NodeName
	s.Terminating = p.DeletionTimestamp != nil
	if p.DeletionTimestamp != nil {
		s.MarkedAfter = p.DeletionTimestamp.Sub(crash)
	}
	if d, ok := rec.First(SeenPodDisruptionTarget, node); ok && (s.MarkedAfter == 0 || d.At.Sub(crash) < s.MarkedAfter) {
		s.MarkedAfter = d.At.Sub(crash)
	}
	s.RunningElsewhere = p.Spec.NodeName != node && p.Status.Phase == corev1.PodRunning
	return s, nil
}

// MachineInfo describes this machine for a benchmark report.
func MachineInfo() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				f := strings.Fields(line)
				if kb, err := strconv.Atoi(f[1]); err == nil {
					mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("nproc %d, memory %s, CPU %s, %s/%s, %s", runtime.NumCPU(), mem, model, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// RecoveryRows renders one Markdown row per recovery: its total and every phase.
func RecoveryRows(rs []Recovery) string {
	var b strings.Builder
	b.WriteString("| node | pod | total | " + strings.Join(BenchPhases, " | ") + " |\n|---|---|---|" + strings.Repeat("---|", len(BenchPhases)) + "\n")
	for _, r := range rs {
		if r.Missing != "" {
			fmt.Fprintf(&b, "| %s | %s | not measured: %s |\n", r.Node, r.Pod, r.Missing)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |", r.Node, r.Pod, fmtSecs(r.Total))
		for _, ph := range BenchPhases {
			fmt.Fprintf(&b, " %s |", fmtSecs(r.Phases[ph]))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The parts of docs/benchmarks.md that make bench-report and make bench-realnode write;
// each rewrites its own and leaves the rest of the file as it is.
const (
	SimulatedSection = "simulated"
	RealNodeSection  = "realnode"
)

// Section returns the text between doc's markers of section name, markers included, or
// "" when doc has none.
func Section(doc, name string) string {
	begin, end := sectionMarkers(name)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return ""
	}
	return doc[i : j+len(end)]
}

// WithSection returns doc with section name replaced by body (markers added when body has
// none), or appended when doc has no such section. An empty body leaves doc as it is.
func WithSection(doc, name, body string) string {
	if body == "" {
		return doc
	}
	begin, end := sectionMarkers(name)
	if !strings.HasPrefix(body, begin) {
		body = begin + "\n" + strings.TrimRight(body, "\n") + "\n" + end
	}
	if old := Section(doc, name); old != "" {
		return strings.Replace(doc, old, body, 1)
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + body + "\n"
}

func sectionMarkers(name string) (string, string) {
	return "<!-- section " + name + ": begin -->", "<!-- section " + name + ": end -->"
}
