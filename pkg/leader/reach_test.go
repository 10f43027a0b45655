package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestReach(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var none *Reach
	if got := none.Since(t0); !got.IsZero() {
		t.Errorf("nil Reach: since %s, want zero", got)
	}
	r := &Reach{MaxGap: 6 * time.Second}
	if got := r.Since(t0); !got.IsZero() {
		t.Errorf("no answer yet: since %s, want zero", got)
	}
	for _, s := range []int{0, 2, 4, 9} {
		r.Seen(true, at(s))
	}
	if got := r.Since(at(10)); !got.Equal(at(0)) {
		t.Errorf("answers 0-9 s, none more than 6 s apart: since %s, want %s", got, at(0))
	}
	if got := r.Since(at(16)); !got.IsZero() {
		t.Errorf("last answer 7 s ago: since %s, want zero", got)
	}
	r.Seen(true, at(17)) // 8 s after the last: a break
	if got := r.Since(at(18)); !got.Equal(at(17)) {
		t.Errorf("answer after an 8 s gap: since %s, want %s", got, at(17))
	}
	r.Seen(false, at(19))
	if got := r.Since(at(19)); !got.IsZero() {
		t.Errorf("after a failed call: since %s, want zero", got)
	}
	r.Seen(true, at(20))
	if got := r.Since(at(21)); !got.Equal(at(20)) {
		t.Errorf("answer after a failed call: since %s, want %s", got, at(20))
	}
}

// TestReachLock: the leader-election lock records each call's end; an answer that needed
// the API server's storage keeps the reach, a refused connection or a server error
// breaks it.
func TestReachLock(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for name, tc := range map[string]struct {
		err  error
		kept bool
	}{
		"the Lease read":               {nil, true},
		"no Lease yet (NotFound)":      {apierrors.NewNotFound(gr, "kubefence"), true},
		"a write lost a race":          {apierrors.NewConflict(gr, "kubefence", errors.New("modified")), true},
		"connection refused":           {errors.New("dial tcp 10.0.0.1:6443: connect: connection refused"), false},
		"etcd out of reach (500)":      {apierrors.NewInternalError(errors.New("etcdserver: request timed out")), false},
		"the API server timed out":     {apierrors.NewTimeoutError("request timed out", 1), false},
		"the API server is overloaded": {apierrors.NewTooManyRequests("overloaded", 1), false},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(leaderLease("other", 0, time.Now()))
			client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.err != nil {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
			r := &Reach{MaxGap: 6 * time.Second}
			r.Seen(true, now.Add(-2*time.Second))
			lock := reachLock{Interface: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "kubefence", Name: "kubefence"},
				Client: client.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: "me"}},
				reach: r, now: func() time.Time { return now }}
			_, _, err := lock.Get(context.Background())
			if (err == nil) != (tc.err == nil) {
				t.Fatalf("Get: %v, want %v", err, tc.err)
			}
			if kept := !r.Since(now).IsZero(); kept != tc.kept {
				t.Errorf("reach kept %v, want %v (since %s)", kept, tc.kept, r.Since(now))
			}
		})
	}
}
