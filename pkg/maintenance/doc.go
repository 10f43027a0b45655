// Package maintenance tells a node that people or the platform took out on purpose from a
// node that failed: cordoned and drained, marked for deletion by the Cluster Autoscaler,
// backing a Cluster API Machine being deleted, under a medik8s NodeMaintenance, rebooted
// by kured, or labelled to be excluded from remediation. Signal is a pure function over
// those objects; Reader follows the optional Machines and NodeMaintenances in the
// process's shared dynamic informers, when their CustomResourceDefinitions are installed.
// It writes nothing; pkg/policy holds such a node for a bounded window.
package maintenance
