package controller

import "github.com/kubefence/kubefence/pkg/loopmetrics"

// refreshFenced sets kubefence_node_fenced_timestamp_seconds from the cached incidents:
// the open ones whose fence holds, which KubefenceNodeLeftOff reads. Like
// refreshUnhealthy it runs on its own period, so the series goes with a recovered,
// cancelled or deleted incident.
func (c *Controller) refreshFenced() {
	c.metrics.SetFenced(loopmetrics.FencedNodes(c.store.Cached(), c.cfg.Policies))
}
