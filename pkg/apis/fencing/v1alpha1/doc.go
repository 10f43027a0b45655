// Package v1alpha1 holds the fencing.kubefence.io/v1alpha1 API: the NodeFence resource, one
// object per fencing incident and its durable history, and the types of the controller's
// configuration file (read by pkg/configfile). It imports nothing from the rest of kubefence.
//
// +kubebuilder:object:generate=true
// +groupName=fencing.kubefence.io
package v1alpha1
