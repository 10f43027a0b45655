package leader

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestFollow: a replica's identity Lease created in the cluster makes its node host a
// live replica; the Lease deleted (a clean exit) forgets it.
func TestFollow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	r := NewReplicas("", 5*time.Second)
	if err := r.Follow(factory.Coordination().V1().Leases().Informer(), func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown() // after cancel: the informers stop on ctx
	defer cancel()
	replica, renewed := "replica-b", metav1.NewMicroTime(now)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "identity-b", Namespace: "kubefence",
		Labels: map[string]string{v1alpha1.NodeLabel: "node-2"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &replica, RenewTime: &renewed}}
	leases := client.CoordinationV1().Leases(lease.Namespace)
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica-b seen on node-2", func() bool { e, _ := r.On("node-2", now); return e != "" })
	if err := leases.Delete(ctx, lease.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica-b forgotten", func() bool { e, _ := r.On("node-2", now); return e == "" })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
