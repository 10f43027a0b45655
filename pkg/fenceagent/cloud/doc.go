// Package cloud is the driver behind fence-agent-cloud: it fences a node by force-stopping
// its cloud instance, chosen by the node's providerID (aws:///<zone>/<instance-id> for
// EC2, openstack:///<server-id> for Nova), and reports success only after reading the
// stopped state back from the cloud API within the call's deadline. It starts the
// instance again on unfence, sorts API failures into the plugin error kinds (unknown
// instance and rejected credentials are permanent, throttling is retried with backoff
// and then retryable), and keeps every credential out of its errors and evidence.
package cloud
