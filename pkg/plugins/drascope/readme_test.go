package drascope

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
)

// TestREADMEListsTheOverriddenExtensionPoints keeps the README's table of
// overridden methods true: every exported method the package declares on
// DRAScope is in the table, nothing else is, and the table names the file
// that declares it.
func TestREADMEListsTheOverriddenExtensionPoints(t *testing.T) {
	declared := map[string]string{} // method -> file
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "DRAScope" {
					declared[fn.Name.Name] = name
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("found no method of DRAScope: the test reads the wrong files")
	}

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| (`[A-Za-z]+`(?:, `[A-Za-z]+`)*) \\| ([^|]+) \\|")
	method := regexp.MustCompile("`([A-Za-z]+)`")
	listed := map[string][]string{} // method -> files the table names
	for _, line := range strings.Split(string(readme), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var inFiles []string
		for _, f := range strings.Split(m[2], ",") {
			inFiles = append(inFiles, strings.TrimSpace(f))
		}
		for _, name := range method.FindAllStringSubmatch(m[1], -1) {
			listed[name[1]] = inFiles
		}
	}

	for name, file := range declared {
		inFiles, ok := listed[name]
		switch {
		case !ok:
			t.Errorf("DRAScope.%s (%s) is not in the README's table of overridden methods", name, file)
		case !slices.Contains(inFiles, file):
			t.Errorf("the README says DRAScope.%s is in %v; it is in %s", name, inFiles, file)
		}
	}
	for name := range listed {
		if _, ok := declared[name]; !ok {
			t.Errorf("the README lists %s, which DRAScope does not override", name)
		}
	}
	t.Logf("%d overridden methods: %v", len(declared), sets.List(sets.KeySet(declared)))
}
