package drascope

import (
	"fmt"

	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drascope/drascope/apis/config"
	configv1 "github.com/drascope/drascope/apis/config/v1"
)

// defaultArgs returns the args a config without a DRAScope pluginConfig entry
// gets: v1 defaults, converted to the internal type.
func defaultArgs() (*config.DRAScopeArgs, error) {
	versioned := &configv1.DRAScopeArgs{}
	schedscheme.Scheme.Default(versioned)
	args := &config.DRAScopeArgs{}
	if err := schedscheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("defaulting %s plugin args: %w", Name, err)
	}
	return args, nil
}
