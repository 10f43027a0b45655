package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestSecretRefValidate: an agent's secretRef names its Secret in exactly one way, each
// checked, and every problem is reported at its field; a NetworkFence's Secret is named.
func TestSecretRefValidate(t *testing.T) {
	p := field.NewPath("agents").Index(0).Child("secretRef")
	for name, tc := range map[string]struct {
		ref   SecretRef
		named bool
		want  string
	}{
		"name":            {ref: SecretRef{Namespace: "kf", Name: "bmc"}},
		"template":        {ref: SecretRef{Namespace: "kf", Template: "bmc-{{ .Name }}"}},
		"annotation":      {ref: SecretRef{Namespace: "kf", Annotation: "example.com/bmc-secret"}},
		"no namespace":    {ref: SecretRef{Name: "bmc"}, want: "agents[0].secretRef.namespace: Required value"},
		"none":            {ref: SecretRef{Namespace: "kf"}, want: "agents[0].secretRef.name: Required value: one of name, template or annotation"},
		"two":             {ref: SecretRef{Namespace: "kf", Name: "bmc", Template: "bmc-{{ .Name }}"}, want: "agents[0].secretRef: Invalid value: 2: exactly one of name, template, annotation"},
		"bad template":    {ref: SecretRef{Namespace: "kf", Template: "bmc-{{ .Name "}, want: "agents[0].secretRef.template: Invalid value"},
		"bad annotation":  {ref: SecretRef{Namespace: "kf", Annotation: "a b"}, want: `agents[0].secretRef.annotation: Invalid value: "a b"`},
		"networkFence":    {ref: SecretRef{Namespace: "kf", Name: "ceph"}, named: true},
		"networkFence tp": {ref: SecretRef{Namespace: "kf", Template: "x"}, named: true, want: "agents[0].secretRef: Forbidden: template and annotation"},
	} {
		t.Run(name, func(t *testing.T) {
			errs := tc.ref.validate(p)
			if tc.named {
				errs = tc.ref.validateNamed(p)
			}
			got := errs.ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Errorf("got %v, want %q", got, tc.want)
			}
		})
	}
}
