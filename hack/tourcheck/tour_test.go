// Package tourcheck checks that docs/incident-tour.md names code that exists: every file
// it cites under pkg/, every name it puts beside a file, and every package-qualified
// name of a package under pkg/.
package tourcheck

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// fileName is `dir/file.go`, optionally followed by `Name`: a file under pkg/ and a
	// name declared in it.
	fileName = regexp.MustCompile("`([a-z0-9_/]+\\.go)`(?: `([A-Za-z_][A-Za-z0-9_]*)`)?")
	// qualified is `pkg.Name`: a name declared in the package pkg of pkg/.
	qualified = regexp.MustCompile("`([a-z0-9]+)\\.([A-Z][A-Za-z0-9_]*)`")
)

func TestTourNamesResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "incident-tour.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgDirs := map[string]string{} // package name → its directory under pkg/
	if err := filepath.WalkDir(filepath.Join(root, "pkg"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if _, seen := pkgDirs[d.Name()]; !seen {
				pkgDirs[d.Name()] = p
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The standard library, found from the go command: a test built with -trimpath (as
	// make test builds) knows no GOROOT of its own.
	std := build.Default
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		std.GOROOT = strings.TrimSpace(string(out))
	}
	checked := 0
	for _, m := range fileName.FindAllStringSubmatch(string(doc), -1) {
		if !strings.Contains(m[1], "/") {
			continue // a file of the package the sentence is about
		}
		path := filepath.Join(root, "pkg", m[1])
		names, err := declared(path)
		if err != nil {
			t.Errorf("docs/incident-tour.md cites %s: %v", m[1], err)
			continue
		}
		checked++
		if m[2] != "" && !names[m[2]] {
			t.Errorf("docs/incident-tour.md cites `%s` `%s`: %s declares no %s", m[1], m[2], m[1], m[2])
		}
	}
	for _, m := range qualified.FindAllStringSubmatch(string(doc), -1) {
		dir, ok := pkgDirs[m[1]]
		if !ok {
			if _, err := std.Import(m[1], "", build.FindOnly); err != nil {
				t.Errorf("docs/incident-tour.md cites %s.%s: no package %s under pkg/ nor in the standard library", m[1], m[2], m[1])
			}
			continue // the standard library's (time.Now)
		}
		checked++
		if !declaredIn(t, dir, m[2]) {
			t.Errorf("docs/incident-tour.md cites %s.%s: %s declares no %s", m[1], m[2], dir, m[2])
		}
	}
	if checked < 40 {
		t.Errorf("checked %d names of docs/incident-tour.md; the patterns no longer match how it cites code", checked)
	}
	t.Logf("%d names of docs/incident-tour.md resolve", checked)
}

// declaredIn: a non-test file of dir declares name.
func declaredIn(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		names, err := declared(f)
		if err != nil {
			t.Fatal(err)
		}
		if names[name] {
			return true
		}
	}
	return false
}

// declared are the top-level names of the Go file at path: functions, methods, types,
// variables and constants.
func declared(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			names[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names, nil
}
