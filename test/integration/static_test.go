package integration

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"testing"

	"github.com/drascope/drascope/internal/localcluster"
)

// The image's base, distroless/static, has no C library: the binaries
// make build gives it must be linked statically (no ELF interpreter, no
// shared library), built without cgo and with -trimpath, and carry the
// version they were stamped with. (A build without the Makefile's flags,
// plain go build with cgo on, fails each check.)
func TestBinariesAreStatic(t *testing.T) {
	for _, binary := range []string{"drascope-scheduler", "kubectl-dra", "drascope-sandbox"} {
		t.Run(binary, func(t *testing.T) {
			path, err := localcluster.BinPath(env.cp.BinDir, binary)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s asks for an ELF interpreter: it is linked dynamically", path)
				}
			}
			if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
				t.Errorf("%s needs shared libraries %v (%v)", path, libs, err)
			}
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
				t.Errorf("%s built with CGO_ENABLED=%q, -trimpath=%q; want 0 and true", path, settings["CGO_ENABLED"], settings["-trimpath"])
			}
			// -trimpath leaves -ldflags out of the build settings (they may
			// hold paths): look for the stamped version itself.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte("+drascope.")) {
				t.Errorf("%s carries no drascope version (gitVersion <kubernetes>+drascope.<describe>)", path)
			}
		})
	}
}
