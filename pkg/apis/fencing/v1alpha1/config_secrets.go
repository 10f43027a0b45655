package v1alpha1

import (
	"fmt"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CredentialsLabel, with the value CredentialsLabelValue, marks a Secret that an agent's
// secretRef may choose per node (template or annotation). The controller may get any
// Secret of the agents' namespace then, since RBAC cannot list names no one knows in
// advance; the label is what keeps a node's annotation from choosing any other Secret
// there (a TLS key, say) to send to its target.
const (
	CredentialsLabel      = "fencing.kubefence.io/credentials"
	CredentialsLabelValue = "true"
)

// SecretRef names a Secret: by name, or (an agent's secretRef only) per node, by template
// or annotation, for fleets that give every BMC a password of its own. Exactly one of
// name, template and annotation is set. A Secret chosen per node is read only if it
// carries the label fencing.kubefence.io/credentials: "true" (CredentialsLabel); any
// other is refused with an error naming it.
type SecretRef struct {
	// Namespace holds the Secret: for an agent, the agents' namespace (the chart's release
	// namespace), where the controller's Role lets it get Secrets.
	Namespace string `json:"namespace"`
	// Name is the one Secret for every node.
	Name string `json:"name,omitempty"`
	// Template: the Secret's name is this Go text/template run on the node, with the data
	// and functions of target.template, e.g. `bmc-{{ .Name }}`. A result that is not a
	// Secret's name is an error naming the node.
	Template string `json:"template,omitempty"`
	// Annotation: the Secret's name is this node annotation's value. Whoever may annotate
	// the node (its own kubelet among them) then chooses which labelled Secret goes to its
	// target: prefer template where names allow.
	Annotation string `json:"annotation,omitempty"`
}

// PerNode reports whether the Secret is chosen per node (template or annotation).
func (s *SecretRef) PerNode() bool { return s != nil && (s.Template != "" || s.Annotation != "") }

// SecretTemplate parses the ref's Template as target templates are parsed.
func (s *SecretRef) SecretTemplate() (*template.Template, error) {
	return template.New("secret").Funcs(targetFuncs).Option("missingkey=error").Parse(s.Template)
}

// SecretNameOn names the Secret of node: the node's annotation, or the parsed template
// (SecretTemplate) run on it, or the one name. The name is checked; errors name the node.
func (s *SecretRef) SecretNameOn(tmpl *template.Template, node *corev1.Node) (string, error) {
	var name string
	switch {
	case s.Annotation != "":
		name = node.Annotations[s.Annotation]
		if name == "" {
			return "", fmt.Errorf("node %s has no annotation %s to name its Secret", node.Name, s.Annotation)
		}
	case s.Template != "":
		if tmpl == nil {
			return "", fmt.Errorf("secret template not parsed")
		}
		var err error
		if name, err = executeOnNode("secret template", tmpl, node); err != nil {
			return "", err
		}
	default:
		return s.Name, nil
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("node %s names Secret %q, which is not a Secret's name: %s", node.Name, name, msgs[0])
	}
	return name, nil
}

// validate checks an agent's secretRef at p: a namespace, and exactly one of name,
// template and annotation, each well formed.
func (s *SecretRef) validate(p *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	if s.Namespace == "" {
		errs = append(errs, field.Required(p.Child("namespace"), "the agents' namespace, which holds the Secret"))
	} else {
		errs = append(errs, dnsLabel(p.Child("namespace"), s.Namespace)...)
	}
	set := 0
	for _, v := range []string{s.Name, s.Template, s.Annotation} {
		if v != "" {
			set++
		}
	}
	switch {
	case set == 0:
		errs = append(errs, field.Required(p.Child("name"), "one of name, template or annotation: the Secret, or how a node names its own"))
	case set > 1:
		errs = append(errs, field.Invalid(p, set, "exactly one of name, template, annotation must be set"))
	}
	if s.Name != "" {
		errs = append(errs, dnsSubdomain(p.Child("name"), s.Name)...)
	}
	if s.Annotation != "" {
		errs = append(errs, qualifiedKey(p.Child("annotation"), s.Annotation)...)
	}
	if s.Template != "" {
		if _, err := s.SecretTemplate(); err != nil {
			errs = append(errs, field.Invalid(p.Child("template"), s.Template, err.Error()))
		}
	}
	return errs
}

// validateNamed checks a Secret named outright (networkFence.secret): a namespace and a
// name, nothing chosen per node.
func (s *SecretRef) validateNamed(p *field.Path) field.ErrorList {
	switch {
	case s == nil:
		return nil
	case s.PerNode():
		return field.ErrorList{field.Forbidden(p, "template and annotation: a NetworkFence's Secret is one, named by name")}
	case s.Namespace == "" || s.Name == "":
		return field.ErrorList{field.Required(p, "namespace and name")}
	}
	return append(dnsLabel(p.Child("namespace"), s.Namespace), dnsSubdomain(p.Child("name"), s.Name)...)
}
