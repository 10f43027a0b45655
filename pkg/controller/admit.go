package controller

import (
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// admit is policy's verdict on the incident named incident, of node pn, from the cached
// incidents and this replica's claims on the budget (nodeview.Admission.Admit).
func (c *Controller) admit(pol *v1alpha1.Policy, pn policy.Node, cl policy.Cluster, incident string, now time.Time) policy.Decision {
	return c.decide.admission.Admit(c.store.Cached(), pol, pn, cl, incident, now)
}
