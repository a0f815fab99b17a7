package kubectldra

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/version"
)

// drascopeVersion is drascope's own version from a binary's gitVersion. The
// Makefile stamps gitVersion as the Kubernetes version drascope links, with
// drascope's release (the VERSION file, CHANGELOG.md's newest entry) as
// build metadata, "v1.37.2+drascope.v0.1.0": the scheduler's
// compatibility-version machinery needs the Kubernetes version there.
func drascopeVersion(gitVersion string) (drascope, kubernetes string) {
	kubernetes, drascope, found := strings.Cut(gitVersion, "+drascope.")
	if !found {
		return "unknown (not built by make build)", gitVersion
	}
	return drascope, kubernetes
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the drascope version kubectl dra was built from",
		Long: `Print drascope's version (CHANGELOG.md's entry), the Kubernetes version its
libraries come from, and the commit and date of the build. drascope-scheduler
--version prints the same stamp as Kubernetes components do.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			drascope, kubernetes := drascopeVersion(info.GitVersion)
			_, err := fmt.Fprintf(streams.Out, "drascope %s\nKubernetes libraries %s\ncommit %s (%s), built %s with %s\n",
				drascope, kubernetes, info.GitCommit, info.GitTreeState, info.BuildDate, info.GoVersion)
			return err
		},
	}
}
