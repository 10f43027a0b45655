package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of kubefence's resources.
const GroupName = "fencing.kubefence.io"

var (
	// SchemeGroupVersion is the group and version of this package's types.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}
	// NodeFenceResource is the NodeFence resource, for dynamic and REST clients.
	NodeFenceResource = SchemeGroupVersion.WithResource("nodefences")
	// RemediationResource and RemediationTemplateResource are the external remediation
	// contract's resources (NodeHealthCheck, MachineHealthCheck).
	RemediationResource         = SchemeGroupVersion.WithResource("kubefenceremediations")
	RemediationTemplateResource = SchemeGroupVersion.WithResource("kubefenceremediationtemplates")

	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

// Resource is the group-qualified resource, as the generated listers name it in errors.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NodeFence{}, &NodeFenceList{},
		&KubefenceRemediation{}, &KubefenceRemediationList{},
		&KubefenceRemediationTemplate{}, &KubefenceRemediationTemplateList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
