package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestStructBoundCoversPkgAndCmd: a struct over the bound is reported anywhere under
// pkg/ and cmd/, not only in pkg/controller, and a struct outside them is left alone.
func TestStructBoundCoversPkgAndCmd(t *testing.T) {
	var fields strings.Builder
	for i := range maxStructFields + 1 {
		fmt.Fprintf(&fields, "\tF%d int\n", i)
	}
	src := "package p\n\ntype big struct {\n" + fields.String() + "}\n\ntype small struct{ A, B int }\n"
	for name, want := range map[string]bool{
		"pkg/controller/c.go":           true,
		"pkg/nodeagent/agent.go":        true,
		"pkg/fenceagent/ipmi/x/deep.go": true,
		"cmd/fence-node-agent/m.go":     true,
		"test/sim/harness.go":           false,
		"hack/checkbounds/main.go":      false,
	} {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		problems := checkDecls(fset, name, file)
		got := len(problems) == 1 && strings.Contains(problems[0], fmt.Sprintf("struct big: %d fields, over %d", maxStructFields+1, maxStructFields))
		if got != want || (!want && len(problems) > 0) {
			t.Errorf("%s: %q, want the big struct reported: %v", name, problems, want)
		}
	}
}
