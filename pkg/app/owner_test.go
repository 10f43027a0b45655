package app

import "testing"

// TestPodOwner: the pod owns the identity Lease only when both are in one namespace; the
// garbage collector would delete a Lease whose owner it looks for in vain, and with it
// the proof that a replica lives on its node.
func TestPodOwner(t *testing.T) {
	for name, tc := range map[string]struct {
		o    AppOptions
		want bool
	}{
		"in a pod, same namespace":   {AppOptions{Pod: PodOptions{Namespace: "kf", Name: "c-1", UID: "u-1"}}, true},
		"in a pod, Lease elsewhere":  {AppOptions{Pod: PodOptions{Namespace: "other", Name: "c-1", UID: "u-1"}}, false},
		"no UID (an older manifest)": {AppOptions{Pod: PodOptions{Namespace: "kf", Name: "c-1"}}, false},
		"outside a pod":              {AppOptions{}, false},
	} {
		got := podOwner(tc.o, "kf")
		if (got != nil) != tc.want {
			t.Errorf("%s: owner %+v, want one: %v", name, got, tc.want)
		}
		if got != nil && (got.Kind != "Pod" || got.Name != "c-1" || string(got.UID) != "u-1") {
			t.Errorf("%s: owner %+v", name, got)
		}
	}
}
