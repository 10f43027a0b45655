package kubeschemas

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A schema is a decoded JSON Schema (draft 4, as kubeconform compiles it): the same
// map[string]any that encoding/json produces.
type schema = map[string]any

// defPrefix is how the apiserver's OpenAPI v2 document refers to its definitions, and how
// the generated files refer to the copies they carry.
const defPrefix = "#/definitions/"

// draft4 is the dialect of every generated file.
const draft4 = "http://json-schema.org/draft-04/schema#"

// objectMeta is the definition of every object's metadata, also of custom resources'.
const objectMeta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

// FileName is the file kubeconform looks up for kind at apiVersion in a local schema
// location "DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json": the kind in lower case, then
// the first label of the API group if there is one, then the version, joined by hyphens
// (Deployment apps/v1: deployment-apps-v1.json; Service v1: service-v1.json).
func FileName(apiVersion, kind string) string {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	name := strings.ToLower(kind)
	if group != "" {
		first, _, _ := strings.Cut(group, ".")
		name += "-" + strings.ToLower(first)
	}
	return name + "-" + strings.ToLower(version) + ".json"
}

// oneOfTypes are the definitions whose JSON form is not the one type the v2 document
// gives them (string): the apiserver decodes either of these JSON types into them, as
// their OpenAPIV3OneOfTypes in k8s.io/apimachinery declare.
var oneOfTypes = map[string][]string{
	"io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"integer", "string"},
	"io.k8s.apimachinery.pkg.api.resource.Quantity":   {"string", "number"},
}

// oneOf is a schema admitting exactly the JSON types given.
func oneOf(types ...string) schema {
	alts := make([]any, len(types))
	for i, t := range types {
		alts[i] = schema{"type": t}
	}
	return schema{"oneOf": alts}
}

// apiConverter turns the definitions of the apiserver's OpenAPI v2 document into strict
// JSON Schemas.
type apiConverter struct {
	raw  map[string]schema // the document's definitions
	conv map[string]schema // their conversions, by name
}

// gvk is one entry of a definition's x-kubernetes-group-version-kind.
type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

func (g gvk) apiVersion() string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// newAPIConverter reads an OpenAPI v2 document (api/openapi-spec/swagger.json) and converts
// all its definitions.
func newAPIConverter(swagger []byte) (*apiConverter, error) {
	var doc struct {
		Swagger     string            `json:"swagger"`
		Definitions map[string]schema `json:"definitions"`
	}
	if err := json.Unmarshal(swagger, &doc); err != nil {
		return nil, fmt.Errorf("OpenAPI v2 document: %w", err)
	}
	if !strings.HasPrefix(doc.Swagger, "2.") || len(doc.Definitions) == 0 {
		return nil, fmt.Errorf("not an OpenAPI v2 document with definitions (swagger %q, %d definitions)", doc.Swagger, len(doc.Definitions))
	}
	c := &apiConverter{raw: doc.Definitions, conv: map[string]schema{}}
	for name, def := range c.raw {
		s, err := c.definition(name, def)
		if err != nil {
			return nil, fmt.Errorf("definition %s: %w", name, err)
		}
		c.conv[name] = s
	}
	return c, nil
}

func (c *apiConverter) definition(name string, def schema) (schema, error) {
	if types, ok := oneOfTypes[name]; ok {
		return oneOf(types...), nil
	}
	return c.node(def)
}

// validating are the keywords of the v2 document's schemas that constrain a value; the
// rest (descriptions, x-kubernetes-* list and patch hints) only annotate and are dropped.
var validating = []string{"type", "format", "enum", "required", "pattern",
	"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
	"minLength", "maxLength", "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties"}

// node converts one schema of the v2 document. The document uses, besides the validating
// keywords, $ref (to its own definitions), properties, additionalProperties, items and
// allOf; anything else that would hold a schema is refused rather than passed unchecked.
func (c *apiConverter) node(s schema) (schema, error) {
	if ref, ok := s["$ref"].(string); ok {
		name, ok := strings.CutPrefix(ref, defPrefix)
		if !ok {
			return nil, fmt.Errorf("$ref %q outside %s", ref, defPrefix)
		}
		if _, ok := c.raw[name]; !ok {
			return nil, fmt.Errorf("$ref %q: no such definition", ref)
		}
		return schema{"$ref": ref}, nil
	}
	if s["format"] == "int-or-string" {
		return oneOf("integer", "string"), nil
	}
	out := schema{}
	for _, k := range validating {
		if v, ok := s[k]; ok {
			out[k] = v
		}
	}
	for _, k := range []string{"oneOf", "anyOf", "not", "patternProperties", "additionalItems", "definitions"} {
		if _, ok := s[k]; ok {
			return nil, fmt.Errorf("keyword %s not handled", k)
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		conv := make(schema, len(props))
		for name, p := range props {
			cs, err := c.sub(p, "property "+name)
			if err != nil {
				return nil, err
			}
			conv[name] = cs
		}
		out["properties"] = conv
	}
	switch ap := s["additionalProperties"].(type) {
	case nil:
		// Strict, as kubeconform -strict expects and as the apiserver's strict field
		// validation judges: an object whose fields are listed has no others, unless
		// the type keeps unknown fields.
		if _, listed := out["properties"]; listed && s["x-kubernetes-preserve-unknown-fields"] != true {
			out["additionalProperties"] = false
		}
	case bool:
		out["additionalProperties"] = ap
	case map[string]any:
		cs, err := c.sub(ap, "additionalProperties")
		if err != nil {
			return nil, err
		}
		out["additionalProperties"] = cs
	default:
		return nil, fmt.Errorf("additionalProperties of type %T", ap)
	}
	if items, ok := s["items"]; ok {
		cs, err := c.sub(items, "items")
		if err != nil {
			return nil, err
		}
		out["items"] = cs
	}
	if all, ok := s["allOf"].([]any); ok {
		conv := make([]any, len(all))
		for i, a := range all {
			cs, err := c.sub(a, fmt.Sprintf("allOf[%d]", i))
			if err != nil {
				return nil, err
			}
			conv[i] = cs
		}
		out["allOf"] = conv
	}
	return out, nil
}

// sub converts the subschema s, found at where (named in its errors).
func (c *apiConverter) sub(s any, where string) (schema, error) {
	m, ok := s.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a schema", where)
	}
	cs, err := c.node(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return cs, nil
}

// closure adds to defs the converted definitions that s refers to, directly or not.
func (c *apiConverter) closure(s any, defs schema) {
	switch v := s.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, defPrefix)
			if _, done := defs[name]; !done {
				defs[name] = c.conv[name]
				c.closure(c.conv[name], defs)
			}
		}
		for _, e := range v {
			c.closure(e, defs)
		}
	case []any:
		for _, e := range v {
			c.closure(e, defs)
		}
	}
}

// standalone is root as a file of its own: its apiVersion and kind pinned, and the
// definitions it refers to carried along so that every $ref resolves inside the file.
func (c *apiConverter) standalone(root schema, apiVersion, kind string) schema {
	top := make(schema, len(root)+2)
	for k, v := range root {
		top[k] = v
	}
	if props, ok := root["properties"].(map[string]any); ok {
		p := make(schema, len(props))
		for k, v := range props {
			p[k] = v
		}
		if _, ok := p["apiVersion"]; ok {
			p["apiVersion"] = schema{"type": "string", "enum": []any{apiVersion}}
		}
		if _, ok := p["kind"]; ok {
			p["kind"] = schema{"type": "string", "enum": []any{kind}}
		}
		top["properties"] = p
	}
	defs := schema{}
	c.closure(top, defs)
	if len(defs) > 0 {
		top["definitions"] = defs
	}
	top["$schema"] = draft4
	return top
}

// kindFiles is a file per group, version and kind that the document serves, by file name.
func (c *apiConverter) kindFiles() (map[string]schema, error) {
	files := map[string]schema{}
	from := map[string]string{}
	names := make([]string, 0, len(c.raw))
	for name := range c.raw {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		raw, ok := c.raw[name]["x-kubernetes-group-version-kind"]
		if !ok {
			continue
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var gvks []gvk
		if err := json.Unmarshal(b, &gvks); err != nil {
			return nil, fmt.Errorf("definition %s: x-kubernetes-group-version-kind: %w", name, err)
		}
		for _, g := range gvks {
			file := FileName(g.apiVersion(), g.Kind)
			if prev, dup := from[file]; dup && prev != name {
				return nil, fmt.Errorf("%s: both %s and %s", file, prev, name)
			}
			from[file] = name
			files[file] = c.standalone(c.conv[name], g.apiVersion(), g.Kind)
		}
	}
	return files, nil
}
