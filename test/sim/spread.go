package sim

import "context"

// DeploySpreadStatefulSet is DeployStatefulSet with a required pod anti-affinity on the
// host name: no two pods share a node, so each failed node strands exactly one pod and a
// scenario can name a victim by the pod it runs ("@web-0").
func (c *Cluster) DeploySpreadStatefulSet(ctx context.Context, name string, replicas int) error {
	return c.deployStatefulSet(ctx, name, replicas, true)
}
