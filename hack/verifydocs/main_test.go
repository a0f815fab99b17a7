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

package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Measured build and test times":              "measured-build-and-test-times",
		"`kubectl dra describe pool`":                "kubectl-dra-describe-pool",
		"DRADeviceClassExhausted":                    "dradeviceclassexhausted",
		"At scale: 2000 and 5000 nodes":              "at-scale-2000-and-5000-nodes",
		"Admin access (KEP-5018)":                    "admin-access-kep-5018",
		"The [routing policy](deploying.md) and you": "the-routing-policy-and-you",
		"snake_case_names stay":                      "snake_case_names-stay",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	files := map[string]string{
		"README.md": strings.Join([]string{
			"See [design](docs/design.md#the-overview) and [perf](docs/perf.md#noise).",
			"A [missing file](docs/nope.md), a [bad anchor](docs/design.md#nowhere).",
			"The [second overview](docs/design.md#the-overview-1), [manifests](manifests/scheduler).",
			"[Upstream](https://github.com/kubernetes/kubernetes#readme) and `[code](nowhere.md)`.",
			"```",
			"[in a fence](ignored.md)",
			"```",
		}, "\n"),
		"docs/design.md":                      "# Design\n## The overview\ntext\n## The overview\n[back](../README.md)\n",
		"docs/perf.md":                        "# Perf\n<a name=\"noise\"></a>\nMeasured in stop 58, see kubernetes/kubernetes#140877.\n",
		"manifests/scheduler/deployment.yaml": "# rounds 0, 3, 6 ask for a half\n# fixed in session 12\n",
		"go.sum":                              "example.com/stop 1 h1:\n",
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, fmt.Errorf("open %s: %w", name, os.ErrNotExist)
	}
	got := map[string]bool{}
	for _, p := range check(names, read) {
		got[p] = true
	}
	want := []string{
		`README.md:2: links to docs/nope.md, which is not a tracked file or directory`,
		`README.md:2: links to docs/design.md#nowhere, but docs/design.md has no heading whose anchor is #nowhere`,
		`docs/perf.md:3: names an internal work round ("stop 58")`,
		`manifests/scheduler/deployment.yaml:2: names an internal work round ("session 12")`,
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing problem %q", w)
		}
		delete(got, w)
	}
	for p := range got {
		t.Errorf("unexpected problem %q", p)
	}
}

func TestCheckLayout(t *testing.T) {
	doc := strings.Join([]string{
		"# Development",
		"## Repository layout",
		"| path | what |",
		"|---|---|",
		"| `pkg/listed` | a package |",
		"| `cmd/tool`, `pkg/tool` | a command and its package |",
		"| `pkg/generated` | generated packages |",
		"| `pkg/gone` | removed since |",
		"| `docs` | the docs |",
		"## Make targets",
		"| `pkg/unlisted` | not the layout table |",
	}, "\n")
	files := []string{
		"docs/development.md", "go.mod", "main.go",
		"pkg/listed/a.go", "cmd/tool/main.go", "pkg/tool/tool.go",
		"pkg/generated/clientset/client.go", "pkg/generated/listers/v1/lister.go",
		"pkg/unlisted/b.go", "pkg/nested/deeper/c.go",
	}
	read := func(name string) ([]byte, error) {
		if name == "docs/development.md" {
			return []byte(doc), nil
		}
		return nil, os.ErrNotExist
	}
	got := checkLayout("docs/development.md", files, read)
	want := []string{
		"docs/development.md:8: the layout table names pkg/gone, which is not in the tree",
		"docs/development.md: the layout table does not name the package pkg/nested/deeper",
		"docs/development.md: the layout table does not name the package pkg/unlisted",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
