package results

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the docs' report blocks from the summaries (make perf-docs)")

// reportBlock is a table of the docs printed by the report: the marker
// holds the report's arguments, relative to the repository's root.
var reportBlock = regexp.MustCompile("(?s)(<!-- report ([^>]*) -->\n)(.*?)(<!-- end report -->)")

// Every table of the docs that a marker says the report prints is what the
// report prints from the committed summaries. make perf-docs rewrites
// them.
func TestDocsTablesArePrintedFromSummaries(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	blocks := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var failed bool
		rewritten := reportBlock.ReplaceAllFunc(data, func(block []byte) []byte {
			m := reportBlock.FindSubmatch(block)
			blocks++
			var tables []string
			var paths []string
			var workloads *regexp.Regexp
			for _, arg := range strings.Fields(string(m[2])) {
				if list, ok := strings.CutPrefix(arg, "-tables="); ok {
					tables = strings.Split(list, ",")
					continue
				}
				if re, ok := strings.CutPrefix(arg, "-workloads="); ok {
					var err error
					if workloads, err = regexp.Compile(re); err != nil {
						t.Errorf("%s: report %s: -workloads: %v", doc, m[2], err)
						return block
					}
					continue
				}
				paths = append(paths, filepath.Join(root, arg))
			}
			var got bytes.Buffer
			if err := Render(&got, paths, tables, workloads); err != nil {
				t.Errorf("%s: report %s: %v", doc, m[2], err)
				failed = true
				return block
			}
			if got.String() != string(m[3]) {
				if !*update {
					t.Errorf("%s: the table of report %s differs from what it prints (make perf-docs rewrites it).\ndoc:\n%s\nreport:\n%s", doc, m[2], m[3], got.String())
				}
				failed = true
			}
			return []byte(string(m[1]) + got.String() + string(m[4]))
		})
		if *update && failed {
			if err := os.WriteFile(doc, rewritten, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if blocks == 0 {
		t.Errorf("no <!-- report … --> block in the docs: the perf tables are not checked")
	}
}
