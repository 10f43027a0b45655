package kubeschemas

import (
	"encoding/json"
	"fmt"
)

// crdConverter turns the OpenAPI v3 schemas of CustomResourceDefinitions into strict JSON
// Schemas, each object's metadata checked as the apiserver's ObjectMeta.
type crdConverter struct {
	api *apiConverter
}

// crd is the part of a CustomResourceDefinition the schemas come from.
type crd struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Schema *struct {
				OpenAPIV3Schema schema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// files adds to files a schema per served version of the CRD in doc (JSON).
func (c crdConverter) files(doc []byte, files map[string]schema) error {
	var d crd
	if err := json.Unmarshal(doc, &d); err != nil {
		return err
	}
	if d.APIVersion != "apiextensions.k8s.io/v1" || d.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("%s %s is not an apiextensions.k8s.io/v1 CustomResourceDefinition", d.APIVersion, d.Kind)
	}
	for _, v := range d.Spec.Versions {
		if !v.Served {
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("%s %s/%s: no openAPIV3Schema", d.Spec.Names.Kind, d.Spec.Group, v.Name)
		}
		root, err := crdNode(v.Schema.OpenAPIV3Schema)
		if err != nil {
			return fmt.Errorf("%s %s/%s: %w", d.Spec.Names.Kind, d.Spec.Group, v.Name, err)
		}
		props, _ := root["properties"].(map[string]any)
		if props == nil {
			return fmt.Errorf("%s %s/%s: root schema lists no properties", d.Spec.Names.Kind, d.Spec.Group, v.Name)
		}
		// The apiserver checks every custom resource's metadata as ObjectMeta, whatever
		// the CRD's schema says of it (at most name and generateName constraints).
		props["metadata"] = schema{"$ref": defPrefix + objectMeta}
		apiVersion := d.Spec.Group + "/" + v.Name
		file := FileName(apiVersion, d.Spec.Names.Kind)
		if _, dup := files[file]; dup {
			return fmt.Errorf("%s: two CRDs map to it", file)
		}
		files[file] = c.api.standalone(root, apiVersion, d.Spec.Names.Kind)
	}
	return nil
}

// crdNode converts one schema of a CRD's openAPIV3Schema.
func crdNode(s schema) (schema, error) {
	out := schema{}
	// Descriptions, defaults, examples and the x-kubernetes-* hints only annotate;
	// x-kubernetes-validations (CEL) is not checked here.
	for _, k := range validating {
		if v, ok := s[k]; ok {
			out[k] = v
		}
	}
	if _, ok := s["$ref"]; ok {
		return nil, fmt.Errorf("$ref in a structural schema")
	}
	if err := crdChildren(s, out); err != nil {
		return nil, err
	}
	preserve := s["x-kubernetes-preserve-unknown-fields"] == true || s["x-kubernetes-embedded-resource"] == true
	switch ap := s["additionalProperties"].(type) {
	case nil:
		if _, listed := out["properties"]; listed && !preserve {
			out["additionalProperties"] = false
		}
	case bool:
		out["additionalProperties"] = ap
	case map[string]any:
		cs, err := crdSub("additionalProperties", ap)
		if err != nil {
			return nil, err
		}
		out["additionalProperties"] = cs
	}
	// An int-or-string field is "anyOf: [integer, string]" in a structural schema; one
	// without that spelled out still takes either.
	if s["x-kubernetes-int-or-string"] == true && out["anyOf"] == nil && out["oneOf"] == nil && out["type"] == nil {
		out["oneOf"] = oneOf("integer", "string")["oneOf"]
	}
	if s["nullable"] == true {
		if t, ok := out["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
		if e, ok := out["enum"].([]any); ok {
			out["enum"] = append(append([]any(nil), e...), nil)
		}
	}
	return out, nil
}

// crdSub is crdNode of the schema v found at where.
func crdSub(where string, v any) (schema, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a schema", where)
	}
	cs, err := crdNode(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return cs, nil
}

// crdChildren converts s's properties, items, not and the schemas it combines into out.
func crdChildren(s, out schema) error {
	if props, ok := s["properties"].(map[string]any); ok {
		conv := make(schema, len(props))
		for name, p := range props {
			cs, err := crdSub("property "+name, p)
			if err != nil {
				return err
			}
			conv[name] = cs
		}
		out["properties"] = conv
	}
	for _, k := range []string{"items", "not"} {
		if v, ok := s[k]; ok {
			cs, err := crdSub(k, v)
			if err != nil {
				return err
			}
			out[k] = cs
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		list, ok := s[k].([]any)
		if !ok {
			continue
		}
		conv := make([]any, len(list))
		for i, e := range list {
			cs, err := crdSub(fmt.Sprintf("%s[%d]", k, i), e)
			if err != nil {
				return err
			}
			conv[i] = cs
		}
		out[k] = conv
	}
	return nil
}
