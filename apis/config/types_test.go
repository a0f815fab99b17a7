package config

import "testing"

// An unset deviceHealth.policy follows the DRADeviceTaintRules gate, so the
// defaults start on every supported cluster; a policy that is set stays.
func TestDeviceHealthPolicyResolve(t *testing.T) {
	for _, tc := range []struct {
		policy     DeviceHealthPolicy
		taintRules bool
		want       DeviceHealthPolicy
	}{
		{"", true, DeviceHealthTaint},
		{"", false, DeviceHealthAvoid},
		{DeviceHealthTaint, false, DeviceHealthTaint}, // refused at start, with its own message
		{DeviceHealthAvoid, true, DeviceHealthAvoid},
		{DeviceHealthIgnore, true, DeviceHealthIgnore},
	} {
		if got := tc.policy.Resolve(tc.taintRules); got != tc.want {
			t.Errorf("%q.Resolve(taintRules=%v) = %q, want %q", tc.policy, tc.taintRules, got, tc.want)
		}
	}
}
