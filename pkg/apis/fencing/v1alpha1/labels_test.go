package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestLabelValue: a node name of any valid length becomes a valid label value, the same
// each time; one that fits is left as it is, and two long names that differ only after
// the cut get different values.
func TestLabelValue(t *testing.T) {
	long := "node-1." + strings.Repeat("a", 46) + ".rack-7.example.internal"
	other := "node-1." + strings.Repeat("a", 46) + ".rack-8.example.internal"
	for _, name := range []string{"node-1", strings.Repeat("n", 63), long, other, strings.Repeat("a.", 126) + "b"} {
		v := LabelValue(name)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", name, v, errs)
		}
		if len(name) <= 63 && v != name {
			t.Errorf("LabelValue(%q) = %q, want it unchanged", name, v)
		}
		if LabelValue(name) != v {
			t.Errorf("LabelValue(%q) is not the same twice", name)
		}
	}
	if LabelValue(long) == LabelValue(other) {
		t.Errorf("%q and %q share the label value %q", long, other, LabelValue(long))
	}
}
