package controller

import (
	"context"

	"k8s.io/klog/v2"
)

// gateKey marks a context whose sync entered the gate.
type gateKey struct{}

// yieldToReleases holds the record of a release back while a storm's other releases are
// under way (pkg/releasegate): a storm is eventStormAt nodes fencing at once. Outside a
// storm, or in a sync that did not enter the gate, it returns at once.
func (c *Controller) yieldToReleases(ctx context.Context) {
	if entered, _ := ctx.Value(gateKey{}).(bool); !entered {
		return
	}
	if c.decide.admission.FencingNow(c.store.Cached(), c.now()) < eventStormAt {
		return
	}
	waited := c.decide.gate.Yield(ctx, c.queue.Len)
	klog.FromContext(ctx).V(2).Info("Release recorded after the storm's other releases", "waited", waited)
}
