// Command checkbounds fails when the code outgrows the sizes that keep it readable (make
// lint): a production file over 450 lines, a production function over 80, a package
// under pkg/ over 2,500 production lines, or a struct under pkg/ or cmd/ with more than
// 15 fields. Generated files and tests are left out. A bound checked once drifts; checked
// at every lint, it holds.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Bounds.
const (
	maxFileLines     = 450
	maxFuncLines     = 80
	maxPackageLines  = 2500
	maxStructFields  = 15
	packageLinesRoot = "pkg/"
)

// structFieldsRoots are the trees whose structs are held to maxStructFields.
var structFieldsRoots = []string{"pkg/", "cmd/"}

func main() {
	files, err := productionFiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkbounds:", err)
		os.Exit(2)
	}
	problems, err := check(files)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkbounds:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// productionFiles are the repository's Go files that are neither tests nor generated.
func productionFiles() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := sc.Text()
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		gen, err := generated(f)
		if err != nil {
			return nil, err
		}
		if !gen {
			files = append(files, f)
		}
	}
	return files, sc.Err()
}

// generated reports whether f carries Go's "Code generated ... DO NOT EDIT." line before
// its package clause.
func generated(f string) (bool, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "package ") {
			return false, nil
		}
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(strings.TrimSpace(line), "DO NOT EDIT.") {
			return true, nil
		}
	}
	return false, nil
}

// check returns every bound files break, sorted.
func check(files []string) ([]string, error) {
	var problems []string
	pkgLines := map[string]int{}
	fset := token.NewFileSet()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		lines := bytes.Count(src, []byte("\n"))
		if lines > maxFileLines {
			problems = append(problems, fmt.Sprintf("%s: %d lines, over %d", f, lines, maxFileLines))
		}
		if strings.HasPrefix(f, packageLinesRoot) {
			pkgLines[filepath.Dir(f)] += lines
		}
		file, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		problems = append(problems, checkDecls(fset, f, file)...)
	}
	for dir, n := range pkgLines {
		if n > maxPackageLines {
			problems = append(problems, fmt.Sprintf("%s: package of %d production lines, over %d", dir, n, maxPackageLines))
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// checkDecls checks the functions and, under structFieldsRoots, the structs of one file.
func checkDecls(fset *token.FileSet, name string, file *ast.File) []string {
	var problems []string
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				problems = append(problems, fmt.Sprintf("%s: func %s: %d lines, over %d", name, funcName(fn), n, maxFuncLines))
			}
		}
	}
	if !underAny(name, structFieldsRoots) {
		return problems
	}
	ast.Inspect(file, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		fields := 0
		for _, f := range st.Fields.List {
			fields += max(len(f.Names), 1)
		}
		if fields > maxStructFields {
			problems = append(problems, fmt.Sprintf("%s: struct %s: %d fields, over %d", name, ts.Name.Name, fields, maxStructFields))
		}
		return true
	})
	return problems
}

// underAny reports whether the slash-separated path name lies under one of roots.
func underAny(name string, roots []string) bool {
	for _, r := range roots {
		if strings.HasPrefix(name, r) {
			return true
		}
	}
	return false
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
