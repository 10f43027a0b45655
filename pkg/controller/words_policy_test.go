package controller

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// confirmOffPolicy is the chart's confirm-off admission policy as installed, and its
// binding with actions.
func confirmOffPolicy(actions ...admissionregistrationv1.ValidationAction) []runtime.Object {
	fail := admissionregistrationv1.Fail
	return []runtime.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-confirm-off",
			Labels: map[string]string{oncall.WordPolicyLabel: string(oncall.ConfirmOff)}},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-confirm-off"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "kubefence-confirm-off", ValidationActions: actions}},
	}
}

// TestFixtureConfirmOffTrustsPolicyInForce: alice is on call through a group, so the
// authorizer refuses her user name alone. While the chart's confirm-off policy is in
// force (it checked her, groups included, when she set the word) her word releases the
// node with no review asked; with the policy bound to warn only, the loop asks, and
// refuses, saying she was checked by user name only.
func TestFixtureConfirmOffTrustsPolicyInForce(t *testing.T) {
	for name, tc := range map[string]struct {
		actions  []admissionregistrationv1.ValidationAction
		released bool
	}{
		"bound with Deny": {[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, true},
		"bound to warn":   {[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}, false},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, fixtureConfig(), append(threeNodes(), failedWithWord())...)
			for _, o := range confirmOffPolicy(tc.actions...) {
				if err := f.kube.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			asked := f.authorize("bob")
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls()
			if !tc.released {
				f.expectWordRefused("so alice was checked by user name only, groups unknown")
				return
			}
			st := f.incident("node-1").Status
			if st.Phase != v1alpha1.PhaseRemediated || st.ConfirmedOff == nil || st.ConfirmedOff.By != "alice" || len(*asked) != 0 {
				t.Fatalf("phase %s, confirmedOff %+v, reviews %+v: want released on alice's word, no review asked", st.Phase, st.ConfirmedOff, *asked)
			}
		})
	}
}
