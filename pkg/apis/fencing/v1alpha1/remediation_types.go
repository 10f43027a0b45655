package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The external remediation contract that NodeHealthCheck (medik8s) and Cluster API's
// MachineHealthCheck follow: they create a KubefenceRemediation from a
// KubefenceRemediationTemplate when a node or machine is unhealthy, read its conditions,
// and delete it once the node is healthy again. kubefence turns each one into a
// NodeFence (docs/health-checks.md).
const (
	// RemediationNodeNameAnnotation names the node, set by NodeHealthCheck; without it
	// the node comes from the owning Machine's status.nodeRef, or is the object's name.
	RemediationNodeNameAnnotation = "remediation.medik8s.io/node-name"
	// RemediationTemplateNameAnnotation names the template the request was made from.
	RemediationTemplateNameAnnotation = "remediation.medik8s.io/template-name"
	// RemediationTimedOutAnnotation is set by NodeHealthCheck when its escalation timeout
	// expired: kubefence stops (an incident that has not called an agent is cancelled; a
	// fence already under way is finished and verified, never left half done).
	RemediationTimedOutAnnotation = "remediation.medik8s.io/nhc-timed-out"
	// MultipleTemplatesAnnotation, on a template, tells NodeHealthCheck that requests
	// may be named generateName <node>- rather than after the node.
	MultipleTemplatesAnnotation = "remediation.medik8s.io/multiple-templates-support"

	// ConditionProcessing is True while kubefence works on the request.
	ConditionProcessing = "Processing"
	// ConditionSucceeded is True once the node was verified fenced and its workloads
	// released; False when kubefence gave up (the caller escalates to its next
	// remediator at once); Unknown before.
	ConditionSucceeded = "Succeeded"
	// ConditionPermanentNodeDeletionExpected is always False: kubefence never deletes the
	// Node.
	ConditionPermanentNodeDeletionExpected = "PermanentNodeDeletionExpected"

	// RemediationAnnotation, on a NodeFence, names the KubefenceRemediation
	// (namespace/name) it was opened for; RemediationUIDLabel holds that object's UID.
	RemediationAnnotation = "fencing.kubefence.io/remediation"
	RemediationUIDLabel   = "fencing.kubefence.io/remediation-uid"
	// RequestedByRemediationPrefix starts spec.requestedBy of the NodeFences opened for a
	// KubefenceRemediation; only the controller's ServiceAccount may write it.
	RequestedByRemediationPrefix = "remediation:"
)

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=kfr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="NodeFence",type=string,JSONPath=`.status.nodeFence`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// KubefenceRemediation is a request from a health checker (NodeHealthCheck,
// MachineHealthCheck) to fence one node. Its status mirrors the NodeFence it opened.
type KubefenceRemediation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KubefenceRemediationSpec   `json:"spec,omitempty"`
	Status KubefenceRemediationStatus `json:"status,omitempty"`
}

// KubefenceRemediationSpec is what a template asks of kubefence for each request made
// from it. The node's policy decides everything else (levels, budget, release).
type KubefenceRemediationSpec struct {
	// Action overrides the policy's action for the NodeFence this request opens.
	// +kubebuilder:validation:Enum=Off;Reboot
	// +optional
	Action FenceAction `json:"action,omitempty"`
}

// KubefenceRemediationStatus mirrors the request's NodeFence.
type KubefenceRemediationStatus struct {
	// NodeName is the node the request is about.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// NodeFence is the incident that carries the request: one kubefence opened for it,
	// or the node's open incident when there already was one.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeFence string `json:"nodeFence,omitempty"`
	// Phase is the NodeFence's phase.
	// +kubebuilder:validation:Enum=Pending;Fencing;Fenced;Remediated;Recovered;Held;Failed;Cancelled
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Message explains the phase; Evidence is what the last agent call reported.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Message string `json:"message,omitempty"`
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Evidence string `json:"evidence,omitempty"`
	// Conditions are Processing, Succeeded and PermanentNodeDeletionExpected, as
	// NodeHealthCheck reads them.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// KubefenceRemediationList is a list of KubefenceRemediation.
type KubefenceRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubefenceRemediation `json:"items"`
}

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=kfrt

// KubefenceRemediationTemplate is what a NodeHealthCheck's remediationTemplate or a
// MachineHealthCheck's remediation templateRef names: each request is made from its
// spec.template.
type KubefenceRemediationTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec KubefenceRemediationTemplateSpec `json:"spec"`
}

// KubefenceRemediationTemplateSpec holds the template.
type KubefenceRemediationTemplateSpec struct {
	Template KubefenceRemediationTemplateResource `json:"template"`
}

// KubefenceRemediationTemplateResource is the part of a request the template sets.
type KubefenceRemediationTemplateResource struct {
	// Metadata holds labels and annotations for each request made from the template:
	// Cluster API's MachineHealthCheck copies them, NodeHealthCheck does not.
	// +optional
	Metadata TemplateMetadata         `json:"metadata,omitempty"`
	Spec     KubefenceRemediationSpec `json:"spec"`
}

// TemplateMetadata is the metadata a template gives the requests made from it.
type TemplateMetadata struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// +kubebuilder:object:root=true

// KubefenceRemediationTemplateList is a list of KubefenceRemediationTemplate.
type KubefenceRemediationTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubefenceRemediationTemplate `json:"items"`
}
