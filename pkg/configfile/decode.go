package configfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// maxQuoted is how much of a bad value an error quotes: a 10 MiB value repeated on
// stderr helps nobody.
const maxQuoted = 64

// Parse decodes a configuration file (Decode) and drops its warnings.
func Parse(data []byte) (*v1alpha1.Config, error) {
	cfg, _, err := Decode(data)
	return cfg, err
}

// Decode reads one configuration file: one YAML document, decoded strictly (every
// field known, of its type, each error naming its full path), defaulted, then validated.
// Every problem is reported at once. A file without apiVersion and kind is read as
// config.kubefence.io/v1alpha1 with a warning that says which two lines to add.
func Decode(data []byte) (*v1alpha1.Config, []string, error) {
	if err := oneDocument(data); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", placeSyntaxError(data, err))
	}
	var raw any
	if err := json.UnmarshalCaseSensitivePreserveInts(js, &raw); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	if raw == nil {
		raw = map[string]any{}
	}
	if _, ok := raw.(map[string]any); !ok {
		return nil, nil, fmt.Errorf("config: the file must be a YAML mapping of fields (apiVersion, kind, agents, policies, ...), not %v", shortAny(raw))
	}
	warnings, errs := checkHeader(raw)
	errs = append(errs, checkValue(nil, raw, reflect.TypeFor[v1alpha1.Config]())...)
	if len(errs) > 0 {
		return nil, warnings, fmt.Errorf("config: %w", shorten(errs).ToAggregate())
	}
	cfg := &v1alpha1.Config{}
	if strict, err := json.UnmarshalStrict(js, cfg); err != nil || len(strict) > 0 {
		// checkValue refused everything the decoder would; this is a last line.
		return nil, warnings, fmt.Errorf("config: %w", errors.Join(append([]error{err}, strict...)...))
	}
	cfg.Default()
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, warnings, fmt.Errorf("config: %w", shorten(errs).ToAggregate())
	}
	return cfg, warnings, nil
}

// oneDocument refuses a file with a second YAML document: it would be ignored, even a
// whole configuration with dryRun: true.
func oneDocument(data []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	docs := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs++
		}
	}
	if docs > 1 {
		return fmt.Errorf("the file holds %d YAML documents; a configuration is exactly one (remove the '---' separators)", docs)
	}
	return nil
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, line...)
		}
	}
	return out
}

// checkHeader checks apiVersion and kind; both absent is the older, unversioned form.
func checkHeader(raw any) ([]string, field.ErrorList) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, nil // checkValue reports it
	}
	av, hasAV := m["apiVersion"]
	kind, hasKind := m["kind"]
	if !hasAV && !hasKind {
		return []string{fmt.Sprintf("the configuration has no apiVersion and kind; it is read as %s %s. "+
			"Add these two lines at its top: 'apiVersion: %s' and 'kind: %s'", v1alpha1.ConfigAPIVersion, v1alpha1.ConfigKind, v1alpha1.ConfigAPIVersion, v1alpha1.ConfigKind)}, nil
	}
	var errs field.ErrorList
	if av != v1alpha1.ConfigAPIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), shortAny(av), []string{v1alpha1.ConfigAPIVersion}))
	}
	if kind != v1alpha1.ConfigKind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), shortAny(kind), []string{v1alpha1.ConfigKind}))
	}
	return nil, errs
}

var (
	durationType     = reflect.TypeFor[metav1.Duration]()
	intOrStringType  = reflect.TypeFor[intstr.IntOrString]()
	stringMapType    = reflect.TypeFor[map[string]string]()
	agentType        = reflect.TypeFor[v1alpha1.Agent]()
	noExplicitZeroes = map[string]string{
		"maxConcurrent": "10", "flapThreshold": "3", "burst": "fencesPerMinute", "keepPerNode": "10",
	}
)

// checkValue checks that v, decoded from JSON, fits Go type t, and names the full path of
// every value that does not: unknown fields, wrong types (a YAML boolean where a word is
// expected, most often), durations that do not parse, integers out of range, and explicit
// zeroes where a default would silently take their place.
func checkValue(p *field.Path, v any, t reflect.Type) field.ErrorList {
	if v == nil {
		return nil // null is the field left out
	}
	switch {
	case t == durationType:
		return checkDuration(p, v)
	case t == intOrStringType:
		return checkIntOrString(p, v)
	case t.Kind() == reflect.Pointer:
		return checkValue(p, v, t.Elem())
	}
	switch t.Kind() {
	case reflect.Struct:
		return checkStruct(p, v, t)
	case reflect.Slice:
		items, ok := v.([]any)
		if !ok {
			return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be a list")}
		}
		var errs field.ErrorList
		for i, item := range items {
			errs = append(errs, checkValue(p.Index(i), item, t.Elem())...)
		}
		return errs
	case reflect.Map:
		return checkMap(p, v, t)
	case reflect.String:
		return checkString(p, v)
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be true or false")}
		}
		return nil
	case reflect.Int32, reflect.Int64, reflect.Int:
		return checkInt(p, v, t)
	}
	return field.ErrorList{field.InternalError(p, fmt.Errorf("no check for Go type %s", t))}
}

func checkStruct(p *field.Path, v any, t reflect.Type) field.ErrorList {
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be a mapping of fields")}
	}
	fields := jsonFields(t)
	var errs field.ErrorList
	for _, key := range sortedKeys(m) {
		ft, ok := fields[key]
		if !ok {
			errs = append(errs, field.Forbidden(child(p, key), unknownField(key, fields)))
			continue
		}
		if max, ok := collectionBounds[t][key]; ok && items(m[key]) > max {
			errs = append(errs, field.TooMany(child(p, key), items(m[key]), max))
			continue
		}
		if t == agentType && key == "params" {
			errs = append(errs, checkParams(child(p, key), m[key])...)
			continue
		}
		if vErrs := checkValue(child(p, key), m[key], ft); len(vErrs) > 0 {
			errs = append(errs, vErrs...)
			continue
		}
		errs = append(errs, explicitZero(child(p, key), key, m[key], ft)...)
	}
	return errs
}

// jsonFields maps a struct's JSON names to their types; inline members (TypeMeta) add theirs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case strings.Contains(opts, "inline"):
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
		case name == "":
			out[f.Name] = f.Type
		default:
			out[name] = f.Type
		}
	}
	return out
}

// items is the length of a list or a mapping, 0 for anything else.
func items(v any) int {
	switch v := v.(type) {
	case []any:
		return len(v)
	case map[string]any:
		return len(v)
	}
	return 0
}

// checkParams checks an agent's params: each a string, named by its path as a field of
// the agent (agents[0].params.cipherSuite), as the agent's own errors are.
func checkParams(p *field.Path, v any) field.ErrorList {
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be a mapping")}
	}
	var errs field.ErrorList
	for _, key := range sortedKeys(m) {
		if _, ok := m[key].(string); !ok {
			// Never quoted back: a password put in params by mistake must not reach a log.
			errs = append(errs, field.TypeInvalid(p.Child(key), "(not shown)", "must be a string; quote it"))
		}
	}
	return errs
}

func checkMap(p *field.Path, v any, t reflect.Type) field.ErrorList {
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be a mapping")}
	}
	var errs field.ErrorList
	for _, key := range sortedKeys(m) {
		if t == stringMapType {
			// Values of parameters and labels are never quoted back: a password
			// put in the wrong place must not reach a log.
			if _, ok := m[key].(string); !ok {
				errs = append(errs, field.TypeInvalid(p.Key(key), "(not shown)", "must be a string; quote it"))
			}
			continue
		}
		errs = append(errs, checkValue(p.Key(key), m[key], t.Elem())...)
	}
	return errs
}

func checkString(p *field.Path, v any) field.ErrorList {
	switch v := v.(type) {
	case string:
		return nil
	case bool:
		return field.ErrorList{field.TypeInvalid(p, v,
			"must be a string: YAML reads unquoted yes, no, on, off, true and false as booleans; quote the value")}
	default:
		return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be a string; quote it")}
	}
}

func checkInt(p *field.Path, v any, t reflect.Type) field.ErrorList {
	n, ok := integer(v)
	lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
	if t.Kind() != reflect.Int32 {
		lo, hi = math.MinInt64, math.MaxInt64
	}
	if !ok {
		return field.ErrorList{field.TypeInvalid(p, shortAny(v), "must be a whole number")}
	}
	if n < lo || n > hi {
		return field.ErrorList{field.Invalid(p, n, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))}
	}
	return nil
}

func checkDuration(p *field.Path, v any) field.ErrorList {
	s, ok := v.(string)
	if !ok {
		return field.ErrorList{field.TypeInvalid(p, shortAny(v), `must be a duration with its unit, such as "90s", "10m" or "1h30m" ("0s" for zero)`)}
	}
	if _, err := time.ParseDuration(s); err != nil {
		return field.ErrorList{field.Invalid(p, short(s), `not a duration: use a number and a unit, such as "90s", "10m" or "1h30m" (units ns, us, ms, s, m, h)`)}
	}
	return nil
}

// explicitZero refuses 0 where Default would put its default in its place. Only
// expectedRenewInterval means something by zero: unknown.
func explicitZero(p *field.Path, key string, v any, t reflect.Type) field.ErrorList {
	if t == durationType && key != "expectedRenewInterval" {
		if s, ok := v.(string); ok {
			if d, err := time.ParseDuration(s); err == nil && d == 0 {
				return field.ErrorList{field.Invalid(p, s, "an explicit zero would be replaced by the default; leave the field out, or set the duration you mean")}
			}
		}
	}
	if def, ok := noExplicitZeroes[key]; ok && isZeroNumber(v) {
		return field.ErrorList{field.Invalid(p, 0,
			fmt.Sprintf("an explicit 0 would be replaced by the default (%s); leave the field out, or set the value you mean", def))}
	}
	return nil
}

func checkIntOrString(p *field.Path, v any) field.ErrorList {
	if _, ok := integer(v); ok {
		return nil
	}
	if s, ok := v.(string); ok && strings.HasSuffix(s, "%") {
		return nil
	}
	return field.ErrorList{field.TypeInvalid(p, shortAny(v), `must be a whole number or a percentage such as "40%"`)}
}

// integer reads a JSON number decoded with PreserveInts.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	}
	return 0, false
}

func isZeroNumber(v any) bool {
	n, ok := integer(v)
	return ok && n == 0
}

// child is p.Child, or the root field when p is nil.
func child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// unknownField says that key is not a field here, and which one was meant when only the
// case differs.
func unknownField(key string, fields map[string]reflect.Type) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf("unknown field; did you mean %q?", name)
		}
	}
	names := slices.Sorted(maps.Keys(fields))
	return fmt.Sprintf("unknown field; the fields here are %s", strings.Join(names, ", "))
}

// short quotes at most maxQuoted bytes of s.
func short(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:maxQuoted], len(s))
}

func shortAny(v any) any {
	switch v := v.(type) {
	case string:
		return short(v)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "empty"
	}
	return v
}

// shorten cuts every quoted string value of errs to maxQuoted bytes.
func shorten(errs field.ErrorList) field.ErrorList {
	for _, e := range errs {
		if s, ok := e.BadValue.(string); ok {
			e.BadValue = short(s)
		}
	}
	return errs
}
