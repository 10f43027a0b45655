package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagentwatch"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/requests"
)

// loopParts are what a test's incident loop is built from, as pkg/app builds the
// process's: caches, the incident record, the detector, the agents, the watch on the node
// agents, and the health checkers' requests when the configuration turns them on.
type loopParts struct {
	cfg      *v1alpha1.Config
	kube     kubernetes.Interface
	fencing  versioned.Interface
	dynamic  dynamic.Interface
	agents   fencecall.Source
	recorder record.EventRecorder
	// now is the clock pkg/app would share; time.Now when nil.
	now func() time.Time
}

// newLoop builds the incident loop of p on caches nothing runs: tests fill them.
func newLoop(t testing.TB, p loopParts) *Controller {
	t.Helper()
	set, err := caches.New(p.kube, p.fencing, nil, p.cfg.LeaderElection.Namespace, p.cfg.Watchdog.Namespace, oncall.DefaultPauseConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	store, err := incidents.New(p.fencing.FencingV1alpha1().NodeFences(), set.Fencing.Fencing().V1alpha1().NodeFences().Informer())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if p.now == nil {
		p.now = time.Now
	}
	guard := leader.NewGuard(nil, p.now, nil)
	queue := NewQueue()
	// No StatefulSet controller here: no replacement to wait for.
	releaser := podrelease.OnCaches(p.kube, set.Kube, p.now, -1)
	admission := &nodeview.Admission{}
	rec := &incidents.Recorder{Store: store, Guard: guard, Identity: "me", Events: p.recorder, Now: p.now, Fencing: admission}
	var names []string
	for _, a := range p.cfg.Agents {
		names = append(names, a.Name)
	}
	caller, err := fencecall.New(p.agents, p.cfg, p.kube, fencecall.NewMetrics(reg, names), p.now,
		func() ([]*corev1.Node, error) { return set.Kube.Core().V1().Nodes().Lister().List(everything()) })
	if err != nil {
		t.Fatal(err)
	}
	var reqs *requests.Requests
	if p.cfg.ExternalRemediation.Enabled {
		reqs, err = requests.New(requests.Options{Informer: set.Fencing.Fencing().V1alpha1().KubefenceRemediations(),
			Fencing: p.fencing, Machines: p.dynamic, Nodes: set.Kube.Core().V1().Nodes().Lister(), Policies: p.cfg.Policies,
			Incidents: store, Queue: queue, Confirm: guard.Check})
		if err != nil {
			t.Fatal(err)
		}
	}
	det := detector.ForConfig(p.cfg)
	agents, err := nodeagentwatch.New(nodeagentwatch.Options{Config: p.cfg, Caches: set, Detector: det, Incidents: store,
		Queue: queue, Now: p.now, Identity: "me", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Config: p.cfg, Client: p.kube, Fencing: p.fencing, Caches: set, Store: store, Detector: det,
		Caller: caller, Peers: Peers{Health: &fencecall.Health{}, Requests: reqs, Agents: agents}, Registry: reg, Identity: "me",
		Shared: Shared{Now: p.now, Guard: guard, Record: rec, Queue: queue, Releaser: releaser, Admission: admission},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
