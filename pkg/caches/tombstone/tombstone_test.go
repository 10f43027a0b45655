package tombstone

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestUnwrap: a delete the watch saw hands the object itself; one it missed hands the
// last state the cache held, under its key; anything else passes through unchanged.
func TestUnwrap(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	for name, tc := range map[string]struct {
		obj  any
		want any
	}{
		"seen delete":           {node, node},
		"missed delete":         {cache.DeletedFinalStateUnknown{Key: "node-1", Obj: node}, node},
		"missed, no state kept": {cache.DeletedFinalStateUnknown{Key: "node-1"}, nil},
		"nil":                   {nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Unwrap(tc.obj); got != tc.want {
				t.Errorf("Unwrap(%v) = %v, want %v", tc.obj, got, tc.want)
			}
		})
	}
}
