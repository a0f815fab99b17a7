/*
Copyright 2026 The DRAScope Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command verifydocs is make verify's check of the repository's prose: it
// fails when a tracked file names an internal work round ("stop 58",
// "session 12"), which means nothing to a reader and belongs in git history,
// when a Markdown file links to a relative path that does not exist or to
// an anchor no heading of the target produces, and when the repository
// layout table of docs/development.md misses a Go package of the tree or
// names a path that is not there.
//
// It reads the files git tracks, so run it from inside the work tree:
//
//	go run ./hack/verifydocs
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

func main() {
	files, err := trackedFiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "verifydocs:", err)
		os.Exit(2)
	}
	read := func(name string) ([]byte, error) { return os.ReadFile(name) }
	problems := check(files, read)
	problems = append(problems, checkLayout(layoutDoc, files, read)...)
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "verifydocs: %d problem(s): name no internal work rounds (git keeps the history), link only to files and headings that exist, and keep %s's layout table equal to the tree's packages\n", len(problems), layoutDoc)
		os.Exit(1)
	}
}

func trackedFiles() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files, nil
}

// roundNumber matches the ways the team numbered its work: "stop 58",
// "stops 53 to 58", "session 12", "turn 3", "issue 61", "work round 4".
// References to public issues are written owner/repo#N and do not match.
var roundNumber = regexp.MustCompile(`(?i)\b(stops?|sessions?|turns?|issues?|work rounds?) #?[0-9]+\b`)

// skipRoundCheck lists files whose bytes are not the project's prose.
func skipRoundCheck(name string) bool {
	switch {
	case strings.HasPrefix(name, "hack/verifydocs/"), // its own examples
		strings.HasSuffix(name, "go.sum"),
		strings.HasPrefix(name, "pkg/generated/"),
		strings.HasSuffix(name, ".json"), // committed perf summaries: figures, not prose
		strings.HasSuffix(name, ".png"), strings.HasSuffix(name, ".svg"):
		return true
	}
	return false
}

// check returns one line per problem, "file:line: what".
func check(files []string, read func(string) ([]byte, error)) []string {
	tracked := make(map[string]bool, len(files))
	dirs := map[string]bool{}
	for _, f := range files {
		tracked[f] = true
		for d := path.Dir(f); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(name string) (map[string]bool, error) {
		if a, ok := anchorsOf[name]; ok {
			return a, nil
		}
		data, err := read(name)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(data)
		anchorsOf[name] = a
		return a, nil
	}

	var problems []string
	for _, name := range files {
		if skipRoundCheck(name) {
			continue
		}
		data, err := read(name)
		if err != nil {
			// Deleted in the work tree but still tracked: git status says so.
			continue
		}
		lines := strings.Split(string(data), "\n")
		for i, line := range lines {
			if m := roundNumber.FindString(line); m != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: names an internal work round (%q)", name, i+1, m))
			}
		}
		if !strings.HasSuffix(name, ".md") {
			continue
		}
		inFence := false
		for i, line := range lines {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if inFence {
				continue
			}
			for _, target := range links(line) {
				if p := checkLink(name, target, tracked, dirs, anchors); p != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: %s", name, i+1, p))
				}
			}
		}
	}
	return problems
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

// links returns the targets of the Markdown inline links on one line, leaving
// out those inside code spans.
func links(line string) []string {
	line = inlineCode.ReplaceAllString(line, "")
	var out []string
	for _, m := range linkTarget.FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	return out
}

func checkLink(from, target string, tracked, dirs map[string]bool, anchors func(string) (map[string]bool, error)) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	resolved := from
	if file != "" {
		resolved = path.Clean(path.Join(path.Dir(from), file))
		if !tracked[resolved] && !dirs[resolved] {
			return fmt.Sprintf("links to %s, which is not a tracked file or directory", target)
		}
	}
	if anchor == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	a, err := anchors(resolved)
	if err != nil {
		return fmt.Sprintf("links to %s: %v", target, err)
	}
	if !a[anchor] {
		return fmt.Sprintf("links to %s, but %s has no heading whose anchor is #%s", target, resolved, anchor)
	}
	return ""
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// headingAnchors returns the anchors GitHub gives a Markdown file's headings
// (and explicit <a name="..."> anchors), duplicates numbered -1, -2, ...
func headingAnchors(data []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := Slug(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Slug is GitHub's anchor for a heading: the rendered text (link text without
// its target, no code or emphasis marks), lower case, every character but
// letters, digits, hyphens, underscores and spaces dropped, spaces turned
// into hyphens.
func Slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// layoutDoc holds the repository layout table: its first column names
// paths in backticks, several separated by commas.
const layoutDoc = "docs/development.md"

var layoutPath = regexp.MustCompile("`([^`]+)`")

// checkLayout returns a problem for every directory of tracked Go files
// that the layout table does not name, itself or through an ancestor below
// the top level (`pkg/generated` names its subpackages, `pkg` alone would
// name nothing), and for every path the table names that is neither a
// tracked file nor a directory of one.
func checkLayout(doc string, files []string, read func(string) ([]byte, error)) []string {
	data, err := read(doc)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", doc, err)}
	}
	tracked := map[string]bool{}
	dirs := map[string]bool{}
	packages := map[string]bool{}
	for _, f := range files {
		tracked[f] = true
		for d := path.Dir(f); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
		if strings.HasSuffix(f, ".go") && path.Dir(f) != "." {
			packages[path.Dir(f)] = true
		}
	}
	listed := map[string]bool{}
	var problems []string
	inTable := false
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inTable = line == "## Repository layout"
			continue
		case !inTable || !strings.HasPrefix(line, "| `"):
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range layoutPath.FindAllStringSubmatch(first, -1) {
			p := m[1]
			listed[p] = true
			if !tracked[p] && !dirs[p] {
				problems = append(problems, fmt.Sprintf("%s:%d: the layout table names %s, which is not in the tree", doc, i+1, p))
			}
		}
	}
	if len(listed) == 0 {
		return []string{fmt.Sprintf("%s: no \"## Repository layout\" table found", doc)}
	}
	var missing []string
	for pkg := range packages {
		covered := listed[pkg]
		for d := path.Dir(pkg); !covered && strings.Contains(d, "/"); d = path.Dir(d) {
			covered = listed[d]
		}
		if !covered {
			missing = append(missing, pkg)
		}
	}
	slices.Sort(missing)
	for _, pkg := range missing {
		problems = append(problems, fmt.Sprintf("%s: the layout table does not name the package %s", doc, pkg))
	}
	return problems
}
