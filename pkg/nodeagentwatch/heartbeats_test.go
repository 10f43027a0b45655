package nodeagentwatch

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
)

// TestKubeletCheckAsksAgain: a routine check of a kubelet heard before that goes
// unanswered is asked again before its silence stops counting. A kubelet slow once, and
// a node that has just died and whose agent its peers declare gone in between, keep the
// kubelet's silence as evidence; a kubelet silent twice while its agent is present (a
// firewall) has it discounted.
func TestKubeletCheckAsksAgain(t *testing.T) {
	for name, tc := range map[string]struct {
		answerFrom int  // the first request (1-based) the kubelet answers; 0: none
		agentGoes  bool // its agent is declared gone after the first request, by the second
		discounted bool
	}{
		"slow once, then answers":                  {answerFrom: 2},
		"the node died; its agent went in between": {agentGoes: true},
		"silent twice with its agent present":      {discounted: true},
		"answers at once":                          {answerFrom: 1},
	} {
		t.Run(name, func(t *testing.T) {
			det := detector.New(detector.Thresholds{Heartbeats: true})
			heard := time.Now().Add(-time.Second)
			det.ObserveKubeletCheck("node-1", heard, true)
			var requests atomic.Int32
			srv := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				n := requests.Add(1)
				if n == 2 && tc.agentGoes {
					det.ObserveAgent("node-1", time.Now(), true)
				}
				if tc.answerFrom == 0 || int(n) < tc.answerFrom {
					<-r.Context().Done() // silent until the probe gives up
					return
				}
				rw.WriteHeader(http.StatusUnauthorized) // any answer shows the kubelet alive
			}))
			defer srv.Close()
			cfg := &v1alpha1.Heartbeats{KubeletTimeout: metav1.Duration{Duration: 200 * time.Millisecond},
				ProbeInterval: metav1.Duration{Duration: 10 * time.Millisecond}}
			h := newHeartbeats(cfg, prometheus.NewRegistry())
			if h.recheck != detector.KubeletReprobe {
				t.Fatalf("recheck %s with a 10ms probe interval, want detector.KubeletReprobe %s", h.recheck, detector.KubeletReprobe)
			}
			h.recheck = 50 * time.Millisecond
			w := &Watch{detector: det, now: time.Now, heartbeats: h}

			slots := make(chan struct{}, 1)
			slots <- struct{}{} // held, as checkKubelets holds one when it starts a check
			w.checkKubelet(context.Background(), kubeletAt(t, "node-1", srv.Listener.Addr()), slots)
			if len(slots) != 0 {
				t.Errorf("%d probe slot(s) still held after the check", len(slots))
			}

			got := det.KubeletAnswered("node-1")
			switch {
			case tc.discounted && !got.IsZero():
				t.Errorf("the kubelet was heard at %s after %d unanswered probes with its agent present; want its silence discounted", got, requests.Load())
			case !tc.discounted && got.IsZero():
				t.Errorf("the kubelet's silence was discounted after %d probe(s); want it still heard", requests.Load())
			case !tc.discounted && tc.answerFrom == 0 && !got.Equal(heard):
				t.Errorf("heard at %s, want still at %s (no answer since)", got, heard)
			case tc.answerFrom > 0 && !got.After(heard):
				t.Errorf("heard at %s, want after %s: it answered", got, heard)
			}
			if want := max(tc.answerFrom, 2); tc.answerFrom != 1 && int(requests.Load()) != want {
				t.Errorf("%d probes, want %d", requests.Load(), want)
			}
		})
	}
}

// TestRecheckAfter: the second probe waits at least detector.KubeletReprobe, and for a
// slower peer group long enough for memberlist to declare a dead agent gone.
func TestRecheckAfter(t *testing.T) {
	for probe, want := range map[time.Duration]time.Duration{
		10 * time.Millisecond:  detector.KubeletReprobe,
		200 * time.Millisecond: 6 * time.Second,
		500 * time.Millisecond: 15 * time.Second,
	} {
		if got := recheckAfter(&v1alpha1.Heartbeats{ProbeInterval: metav1.Duration{Duration: probe}}); got != want {
			t.Errorf("probe interval %s: recheck after %s, want %s", probe, got, want)
		}
	}
}

// kubeletAt is a Node whose kubelet listens at addr.
func kubeletAt(t *testing.T, name string, addr net.Addr) *corev1.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(p)}},
	}}
}
