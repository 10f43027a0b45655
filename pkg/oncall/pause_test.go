package oncall

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestPausesFollowTheConfigMaps: a pause request is an entry of a labelled ConfigMap;
// adding, changing and removing one is seen without a restart, each change notifies
// the loop, and kubefence_paused has one series per standing request.
func TestPausesFollowTheConfigMaps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("kubefence"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.PauseLabel + "=true" }))
	reg := prometheus.NewRegistry()
	p, err := NewPauses(factory.Core().V1().ConfigMaps().Informer(), false, reg)
	if err != nil {
		t.Fatal(err)
	}
	var notified atomic.Int32
	p.Notify(func() { notified.Add(1) })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if why := p.Why(); why != "" {
		t.Fatalf("paused with no request: %q", why)
	}
	cms := client.CoreV1().ConfigMaps("kubefence")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-pause", Labels: map[string]string{v1alpha1.PauseLabel: "true"}},
		Data: map[string]string{"patch-night": "alice: rack 3 firmware"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("%s: why %q, notified %d", what, p.Why(), notified.Load())
		}
	}
	eventually("pause seen", func() bool { return p.Why() == "patch-night: alice: rack 3 firmware" && notified.Load() == 1 })
	if n := testutil.ToFloat64(p.gauge.WithLabelValues("patch-night")); n != 1 {
		t.Errorf("kubefence_paused{reason=patch-night} = %v", n)
	}
	cm.Data["upgrade"] = "bob: control plane"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("second request seen", func() bool {
		return p.Why() == "patch-night: alice: rack 3 firmware; upgrade: bob: control plane" && notified.Load() == 2
	})
	delete(cm.Data, "patch-night")
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("request lifted", func() bool { return p.Why() == "upgrade: bob: control plane" && notified.Load() == 3 })
	if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("pause ended", func() bool { return p.Why() == "" && notified.Load() == 4 })
	if n, err := testutil.GatherAndCount(reg, "kubefence_paused"); err != nil || n != 0 {
		t.Errorf("kubefence_paused has %d series after the pause ended (%v)", n, err)
	}
}

// TestConfigPauseIsAReason: the configuration's paused is one more reason, always there.
func TestConfigPauseIsAReason(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	p, err := NewPauses(factory.Core().V1().ConfigMaps().Informer(), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if why := p.Why(); !strings.HasPrefix(why, ConfigReason) {
		t.Errorf("why %q; want the configuration named", why)
	}
	var none *Pauses
	if none.Why() != "" {
		t.Error("no pauses, yet paused")
	}
}
