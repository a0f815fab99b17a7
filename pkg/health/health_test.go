package health

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const hold = 10 * time.Minute

var (
	gpu0 = Device{Driver: "gpu.example.com", Pool: "node-1", Name: "gpu-0"}
	gpu1 = Device{Driver: "gpu.example.com", Pool: "node-1", Name: "gpu-1"}
)

// podReporting is a running pod on node-1 whose container reports health
// for its claim "gpu" as kubelet writes it.
func podReporting(name string, resources ...v1.ResourceHealth) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.PodSpec{
			NodeName:       "node-1",
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-" + name)}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning,
			ContainerStatuses: []v1.ContainerStatus{{
				Name:                     "ctr",
				AllocatedResourcesStatus: []v1.ResourceStatus{{Name: "claim:gpu/req", Resources: resources}},
			}},
		},
	}
}

func health(id string, h v1.ResourceHealthStatus, message string) v1.ResourceHealth {
	r := v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: h}
	if message != "" {
		r.Message = &message
	}
	return r
}

type recorder struct{ changed [][]Device }

func (r *recorder) record(d []Device) { r.changed = append(r.changed, d) }

func newTestCache(t *testing.T) (*Cache, *testingclock.FakeClock, *recorder) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC))
	rec := &recorder{}
	c := New(Options{HoldTime: hold, Clock: clk, OnChange: rec.record})
	return c, clk, rec
}

func unhealthyIDs(c *Cache) sets.Set[structured.DeviceID] {
	set := sets.New[structured.DeviceID]()
	c.InsertUnhealthy(set)
	return set
}

func TestUnhealthyUntilAHealthyReport(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, rec := newTestCache(t)

	c.ObservePod(logger, nil, podReporting("trainer", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, "ECC error"), health("gpu.example.com/node-1/gpu-1", v1.ResourceHealthStatusHealthy, "")))
	r, ok := c.Get(gpu0)
	if !ok || r.Health != v1.ResourceHealthStatusUnhealthy || r.Pod != "default/trainer" || r.Node != "node-1" || r.Message != "ECC error" {
		t.Fatalf("gpu-0: %+v %v, want Unhealthy from default/trainer on node-1 with its message", r, ok)
	}
	if want := "reported by pod default/trainer at 2026-11-22T09:00:00Z: ECC error"; r.Detail() != want {
		t.Errorf("detail %q, want %q", r.Detail(), want)
	}
	if got := unhealthyIDs(c); !got.Equal(sets.New(structured.MakeDeviceID("gpu.example.com", "node-1", "gpu-0"))) {
		t.Errorf("unhealthy set %v, want only gpu-0", got)
	}

	// The pod is deleted; its report stays. A replacement on the other
	// device reports nothing new about gpu-0.
	clk.Step(time.Minute)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 after a minute: %s, want Unhealthy", r.Health)
	}
	// Unknown does not clear Unhealthy.
	c.ObservePod(logger, nil, podReporting("probe", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnknown, "")))
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 after an Unknown report: %s, want Unhealthy", r.Health)
	}
	// A Healthy report does.
	c.ObservePod(logger, nil, podReporting("next", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusHealthy, "")))
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusHealthy || r.Pod != "default/next" {
		t.Fatalf("gpu-0 after a Healthy report: %+v, want Healthy from default/next", r)
	}
	if got := unhealthyIDs(c); got.Len() != 0 {
		t.Errorf("unhealthy set %v, want empty", got)
	}
	want := [][]Device{{gpu0, gpu1}, {gpu0}}
	if len(rec.changed) != len(want) || len(rec.changed[0]) != 2 || rec.changed[1][0] != gpu0 {
		t.Errorf("changes %v, want %v (nothing for the Unknown report)", rec.changed, want)
	}
}

func TestHoldTimeEnds(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, rec := newTestCache(t)
	c.ObservePod(logger, nil, podReporting("trainer", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, "")))
	rec.changed = nil

	clk.Step(hold - time.Second)
	if next := c.expire(logger); !next.Equal(clk.Now().Add(time.Second)) {
		t.Errorf("next expiry %v, want in one second", next)
	}
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 a second before the hold time ends: %s", r.Health)
	}
	clk.Step(time.Second)
	// Reads see Unknown at once, even before expire runs.
	if got := unhealthyIDs(c); got.Len() != 0 {
		t.Errorf("unhealthy set at the end of the hold time: %v", got)
	}
	if next := c.expire(logger); !next.IsZero() {
		t.Errorf("next expiry %v, want none", next)
	}
	r, _ := c.Get(gpu0)
	if r.Health != v1.ResourceHealthStatusUnknown || !r.Expired || !strings.Contains(r.Detail(), "hold time ended") {
		t.Errorf("gpu-0 after the hold time: %+v %q, want Unknown, expired", r, r.Detail())
	}
	if len(rec.changed) != 1 || rec.changed[0][0] != gpu0 {
		t.Errorf("changes %v, want gpu-0 told once", rec.changed)
	}

	// Unhealthy again: a new hold time starts.
	c.ObservePod(logger, nil, podReporting("again", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, "")))
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || r.Expired {
		t.Errorf("gpu-0 reported Unhealthy again: %+v", r)
	}
}

func TestRunTellsWhenTheHoldTimeEnds(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	c, clk, _ := newTestCache(t)
	expired := make(chan []Device, 1)
	c.opts.OnChange = func(d []Device) { expired <- d }
	c.ObservePod(logger, nil, podReporting("trainer", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, "")))
	<-expired // the report itself
	go c.Run(ctx)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(hold)
	select {
	case d := <-expired:
		if len(d) != 1 || d[0] != gpu0 {
			t.Errorf("expired %v, want gpu-0", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not expire gpu-0 at the end of its hold time")
	}
}

func TestRenewedOnlyByPodsKubeletStillRuns(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, _ := newTestCache(t)
	running := podReporting("crashloop", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, "Xid 79"))
	c.ObservePod(logger, nil, running)

	// Eight minutes later the crash-looping pod restarts; its status still
	// says Unhealthy: a fresh report.
	clk.Step(8 * time.Minute)
	restarted := running.DeepCopy()
	restarted.Status.ContainerStatuses[0].RestartCount++
	c.ObservePod(logger, running, restarted)
	clk.Step(8 * time.Minute)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("16 minutes after the first report, 8 after the last: %s, want Unhealthy", r.Health)
	}

	// The pod fails; a later update of its frozen status is no report.
	failed := restarted.DeepCopy()
	failed.Status.Phase = v1.PodFailed
	c.ObservePod(logger, restarted, failed)
	clk.Step(time.Minute)
	labelled := failed.DeepCopy()
	labelled.Labels = map[string]string{"seen": "true"}
	c.ObservePod(logger, failed, labelled)
	clk.Step(hold - 2*time.Minute)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnknown {
		t.Errorf("a hold time after the failed pod's last change: %s, want Unknown", r.Health)
	}
}

func TestInitAndEphemeralContainersReport(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, _ := newTestCache(t)
	pod := podReporting("p")
	pod.Status.ContainerStatuses = nil
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "init", AllocatedResourcesStatus: []v1.ResourceStatus{{
		Name: "claim:gpu", Resources: []v1.ResourceHealth{health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, "")}}}}}
	pod.Status.EphemeralContainerStatuses = []v1.ContainerStatus{{Name: "debug", AllocatedResourcesStatus: []v1.ResourceStatus{{
		Name: "claim:gpu/req", Resources: []v1.ResourceHealth{health("gpu.example.com/node-1/gpu-1", v1.ResourceHealthStatusUnhealthy, "")}}}}}
	c.ObservePod(logger, nil, pod)
	if got := len(c.Unhealthy()); got != 2 {
		t.Errorf("%d Unhealthy devices, want 2 (init and ephemeral containers)", got)
	}
}

func TestParseResourceID(t *testing.T) {
	tests := map[string]struct {
		id      string
		want    Device
		wantErr string
	}{
		"plain":                   {id: "gpu.example.com/node-1/gpu-0", want: gpu0},
		"pool with slashes":       {id: "gpu.example.com/rack-1/node-1/gpu-0", want: Device{Driver: "gpu.example.com", Pool: "rack-1/node-1", Name: "gpu-0"}},
		"two parts":               {id: "gpu.example.com/gpu-0", wantErr: "got 2 part(s)"},
		"one part":                {id: "gpu-0", wantErr: "got 1 part(s)"},
		"empty pool segment":      {id: "gpu.example.com//gpu-0", wantErr: "pool name"},
		"bad driver":              {id: "GPU_Driver/node-1/gpu-0", wantErr: "driver name"},
		"bad device":              {id: "gpu.example.com/node-1/gpu.0", wantErr: "device name"},
		"empty":                   {id: "", wantErr: "got 1 part(s)"},
		"trailing slash (no dev)": {id: "gpu.example.com/node-1/", wantErr: "device name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseResourceID(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestBadResourceIDsAreIgnoredAndLoggedOnce(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	c, _, _ := newTestCache(t)
	c.opts.Resolver.KnownDriver = func(driver string) bool { return driver == "gpu.example.com" }
	pod := podReporting("p",
		health("gpu.example.com/gpu-0", v1.ResourceHealthStatusUnhealthy, ""),
		health("nic.example.com/node-1/nic-0", v1.ResourceHealthStatusUnhealthy, ""),
		health("gpu.example.com/node-1/gpu-1", v1.ResourceHealthStatusUnhealthy, ""),
	)
	for range 3 {
		c.ObservePod(logger, nil, pod)
	}
	if got := c.Unhealthy(); len(got) != 1 || got[0].Device != gpu1 {
		t.Errorf("Unhealthy %v, want only gpu-1", got)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []string{`resourceID="gpu.example.com/gpu-0"`, `resourceID="nic.example.com/node-1/nic-0"`} {
		n := 0
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "Ignoring a device health report") && strings.Contains(line, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s logged %d times at the default level, want once; logs:\n%s", want, n, logs)
		}
	}
	if !strings.Contains(logs, `no ResourceSlice is published by driver \"nic.example.com\"`) {
		t.Errorf("the unknown driver is not named in the logs:\n%s", logs)
	}
}

func TestCDIDeviceIDsResolveThroughTheClaim(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, _ := newTestCache(t)
	claims := map[string]*resourceapi.ResourceClaim{
		"default/claim-single": allocatedClaim("req", "gpu-0"),
		"default/claim-double": allocatedClaim("req", "gpu-0", "gpu-1"),
	}
	c.opts.Resolver.Claim = func(namespace, name string) (*resourceapi.ResourceClaim, error) {
		if claim, ok := claims[namespace+"/"+name]; ok {
			return claim, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
	}
	c.ObservePod(logger, nil, podReporting("single", health("gpu.example.com/gpu=gpu-0", v1.ResourceHealthStatusUnhealthy, "")))
	c.ObservePod(logger, nil, podReporting("double", health("gpu.example.com/gpu=gpu-1", v1.ResourceHealthStatusUnhealthy, "")))
	c.ObservePod(logger, nil, podReporting("gone", health("gpu.example.com/gpu=gpu-1", v1.ResourceHealthStatusUnhealthy, "")))
	if got := c.Unhealthy(); len(got) != 1 || got[0].Device != gpu0 {
		t.Errorf("Unhealthy %v, want only gpu-0 (the one device of claim-single)", got)
	}
}

func allocatedClaim(request string, devices ...string) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	for _, d := range devices {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "gpu.example.com", Pool: "node-1", Device: d})
	}
	return claim
}

func TestNewHealthyReports(t *testing.T) {
	unhealthy := podReporting("p", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, ""))
	healthy := podReporting("p", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusHealthy, ""))
	plain := podReporting("p")
	for name, tc := range map[string]struct {
		old, pod *v1.Pod
		want     bool
	}{
		"Unhealthy to Healthy":    {old: unhealthy, pod: healthy, want: true},
		"new pod reports Healthy": {pod: healthy, want: true},
		"still Healthy":           {old: healthy, pod: healthy},
		"Healthy to Unhealthy":    {old: healthy, pod: unhealthy},
		"no reports":              {old: plain, pod: plain},
	} {
		t.Run(name, func(t *testing.T) {
			if got := NewHealthyReports(tc.old, tc.pod); got != tc.want {
				t.Errorf("NewHealthyReports = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzParseResourceID: any string either parses into a device that prints
// back as the same ID, or is refused; nothing panics.
func FuzzParseResourceID(f *testing.F) {
	for _, seed := range []string{"gpu.example.com/node-1/gpu-0", "a/b/c/d", "gpu.example.com/gpu=gpu-0", "//", "a//b", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		d, err := ParseResourceID(id)
		if err == nil && d.String() != id {
			t.Errorf("%q parsed into %+v, which prints as %q", id, d, d.String())
		}
	})
}

// A long message is cut on a character boundary: half a UTF-8 character
// would reach the ResourcePool as U+FFFD and never read back equal.
func TestDetailCutsLongMessagesOnACharacter(t *testing.T) {
	r := Report{Pod: "ns/p", Since: time.Unix(0, 0), Message: "x" + strings.Repeat("é", maxMessage)}
	detail := r.Detail()
	if !utf8.ValidString(detail) {
		t.Errorf("detail is not valid UTF-8: %q", detail)
	}
	if !strings.HasSuffix(detail, "é...") {
		t.Errorf("detail %q does not end with whole characters and ...", detail[len(detail)-10:])
	}
}
