package v1alpha1

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The node address types a NetworkFence agent may fence.
const (
	AddressInternalIP = "InternalIP"
	AddressExternalIP = "ExternalIP"
)

// validateNetworkFence checks an agent that is a csi-addons NetworkFence: no plugin
// fields, one of driver and className, and address types it can fence.
func (a *Agent) validateNetworkFence(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		name string
		set  bool
	}{{"binary", a.Binary != ""}, {"sha256", a.SHA256 != ""}, {"address", a.Address != ""}, {"tls", a.TLS != nil},
		{"params", len(a.Params) > 0}, {"secretRef", a.SecretRef != nil}, {"target.providerID", a.Target.ProviderID}} {
		if f.set {
			errs = append(errs, field.Forbidden(p.Child(f.name), "not with networkFence: the controller creates the NetworkFence itself"))
		}
	}
	errs = append(errs, a.validateCommon(p)...)
	n, np := a.NetworkFence, p.Child("networkFence")
	switch {
	case n.Driver == "" && n.ClassName == "":
		errs = append(errs, field.Required(np.Child("driver"), "the CSI driver that fences (or className, a NetworkFenceClass)"))
	case n.Driver != "" && n.ClassName != "":
		errs = append(errs, field.Invalid(np.Child("className"), n.ClassName, "exactly one of driver and className"))
	case n.Driver != "":
		errs = append(errs, dnsSubdomain(np.Child("driver"), n.Driver)...)
	default:
		errs = append(errs, dnsSubdomain(np.Child("className"), n.ClassName)...)
		if len(n.Parameters) > 0 || n.Secret != nil {
			errs = append(errs, field.Forbidden(np.Child("parameters"), "with className the NetworkFenceClass holds the parameters and the Secret"))
		}
	}
	errs = append(errs, n.Secret.validateNamed(np.Child("secret"))...)
	errs = append(errs, boundedParams(np.Child("parameters"), n.Parameters)...)
	errs = append(errs, tooMany(np.Child("addressTypes"), len(n.AddressTypes), MaxAddressTypes)...)
	valid := []string{AddressInternalIP, AddressExternalIP}
	for i, t := range n.AddressTypes {
		if !slices.Contains(valid, t) {
			errs = append(errs, field.NotSupported(np.Child("addressTypes").Index(i), t, valid))
		}
	}
	if len(n.AddressTypes) == 0 && a.Target.sources() == 0 {
		errs = append(errs, field.Required(np.Child("addressTypes"), fmt.Sprintf("which node addresses to fence (default [%s]), or a target mapping", AddressInternalIP)))
	}
	return errs
}
