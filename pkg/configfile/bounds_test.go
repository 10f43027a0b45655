package configfile

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// manyParams is a flow mapping of n parameters named p0, p1, ...
func manyParams(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "p%d: '1'", i)
	}
	b.WriteString("}")
	return b.String()
}

// TestCollectionsAreBounded: a list or map longer than its bound is refused with one
// error that names the field and the bound, before its items are looked at.
func TestCollectionsAreBounded(t *testing.T) {
	for name, tc := range map[string]struct {
		old, new, want string
	}{
		"50,000 unknown params": {"timeout: 30s", "timeout: 30s\n  params: " + manyParams(50000),
			"config: agents[0].params: Too many: 50000: must have at most 64 items"},
		"50,000 params that are not strings": {"timeout: 30s", "timeout: 30s\n  params: " + strings.ReplaceAll(manyParams(50000), "'1'", "1"),
			"config: agents[0].params: Too many: 50000: must have at most 64 items"},
		"params of 64 KiB and more": {"timeout: 30s", "timeout: 30s\n  params: {caBundle: '" + strings.Repeat("A", v1alpha1.MaxParamsBytes) + "'}",
			"config: agents[0].params: Too long: may not be more than 65536 bytes"},
		"101 policies": {"", valid + strings.Repeat("- name: p\n  levels: [{agents: [ipmi]}]\n", 100),
			"config: policies: Too many: 101: must have at most 100 items"},
		"65 matchLabels": {`action: "Off"`, `action: "Off"` + "\n  nodeSelector: {matchLabels: " + manyParams(65) + "}",
			"config: policies[0].nodeSelector.matchLabels: Too many: 65: must have at most 64 items"},
		"257 values of an expression": {`action: "Off"`, `action: "Off"` + "\n  nodeSelector: {matchExpressions: [{key: a, operator: In, values: [" +
			strings.TrimSuffix(strings.Repeat("x, ", 257), ", ") + "]}]}",
			"config: policies[0].nodeSelector.matchExpressions[0].values: Too many: 257: must have at most 256 items"},
		"networkFence parameters": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com, parameters: " + manyParams(65) + "}\n- name: remote",
			"config: agents[1].networkFence.parameters: Too many: 65: must have at most 64 items"},
		"three address types": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com, addressTypes: [InternalIP, ExternalIP, InternalIP]}\n- name: remote",
			"config: agents[1].networkFence.addressTypes: Too many: 3: must have at most 2 items"},
	} {
		t.Run(name, func(t *testing.T) {
			doc := tc.new
			if tc.old != "" {
				doc = strings.Replace(valid, tc.old, tc.new, 1)
			}
			_, err := Parse([]byte(doc))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n%.500v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// TestValidateBoundsConfigsBuiltInCode: Validate holds the same bounds for a Config
// that never went through the decoder.
func TestValidateBoundsConfigsBuiltInCode(t *testing.T) {
	cfg, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Agents[0].Params = map[string]string{}
	for i := range 1000 {
		cfg.Agents[0].Params[fmt.Sprintf("p%d", i)] = "1"
	}
	cfg.Policies[0].NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: make([]string, 300)}}}
	got := cfg.Validate().ToAggregate().Error()
	for _, want := range []string{
		"agents[0].params: Too many: 1000: must have at most 64 items",
		"policies[0].nodeSelector.matchExpressions[0].values: Too many: 300: must have at most 256 items",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Validate: %.300s\nwant it to contain %s", got, want)
		}
	}
}

// TestEveryCollectionIsBounded: every list and map of the configuration's types has its
// bound in collectionBounds, so that a new one cannot be added unbounded.
func TestEveryCollectionIsBounded(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ == durationType || typ == intOrStringType {
			return
		}
		seen[typ] = true
		for name, ft := range jsonFields(typ) {
			elem := ft
			for elem.Kind() == reflect.Pointer {
				elem = elem.Elem()
			}
			if elem.Kind() == reflect.Slice || elem.Kind() == reflect.Map {
				if _, ok := collectionBounds[typ][name]; !ok {
					t.Errorf("%s.%s (%s) has no bound in collectionBounds", path, name, ft)
				}
				walk(elem.Elem(), path+"."+name+"[]")
				continue
			}
			walk(ft, path+"."+name)
		}
	}
	walk(reflect.TypeFor[v1alpha1.Config](), "config")
	if len(seen) < 10 {
		t.Errorf("walked only %d types", len(seen))
	}
}
