// Package perf runs drascope's scheduler_perf workloads
// (performance-config.yaml) with upstream's in-tree DynamicResources plugin
// and with DRAScope, side by side in one process. `make perf` runs the
// performance set and prints the table of ./report; `make perf-smoke` runs
// the short set as part of `make test`.
package perf

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/manifests"
	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/plugins/drascope"
	"github.com/drascope/drascope/pkg/plugins/drascopepreemption"
	"github.com/drascope/drascope/test/perf/results"
)

const configFile = "performance-config.yaml"

// variants are the two schedulers compared: the scheduler_perf topic (and
// report column) and the scheduler configuration each runs with.
var variants = []variant{
	{name: results.Upstream, schedulerConfig: "config/upstream.yaml"},
	{name: results.DRAScope, schedulerConfig: "config/drascope.yaml"},
}

// scoringVariants run besides those in test cases labelled "scoring":
// DRAScope's configuration with each packing strategy (docs/scoring.md).
// In those test cases every variant, upstream's too, runs with
// percentageOfNodesToScore: 100 (configFor).
var scoringVariants = []variant{
	{name: results.DRAScopeMostAllocated, schedulerConfig: "config/drascope.yaml", strategy: "MostAllocated"},
	{name: results.DRAScopeLeastAllocated, schedulerConfig: "config/drascope.yaml", strategy: "LeastAllocated"},
}

// preQueueingHintsVariants run besides those in workloads labelled
// "prequeueinghints": both schedulers with the alpha SchedulerPreQueueingHints
// gate on, upstream's newest throughput work, as a second reference.
var preQueueingHintsVariants = []variant{
	{name: results.UpstreamPreQueueingHints, schedulerConfig: "config/upstream.yaml", featureGates: map[string]bool{"SchedulerPreQueueingHints": true}},
	{name: results.DRAScopePreQueueingHints, schedulerConfig: "config/drascope.yaml", featureGates: map[string]bool{"SchedulerPreQueueingHints": true}},
}

// bestFitVariant runs besides those in test cases and workloads labelled
// "devicechoice":
// DRAScope with deviceChoice BestFit (docs/scoring.md).
var bestFitVariant = variant{name: results.DRAScopeBestFit, schedulerConfig: "config/drascope.yaml", deviceChoice: "BestFit"}

// noPublishVariant runs besides those in workloads labelled "publishing":
// DRAScope with ResourcePool publishing off, the reference for what
// publishing costs.
var noPublishVariant = variant{name: results.DRAScopeNoPublish, schedulerConfig: "config/drascope.yaml", noPublish: true}

type variant struct {
	name            string
	schedulerConfig string
	// strategy, when set, is the scoring.strategy added to the DRAScope
	// args of schedulerConfig.
	strategy string
	// deviceChoice, when set, is the deviceChoice added to the DRAScope
	// args of schedulerConfig.
	deviceChoice string
	// noPublish turns poolStatus.publishResourcePools off in the DRAScope
	// args of schedulerConfig.
	noPublish bool
	// featureGates are set on top of the test case's.
	featureGates map[string]bool
}

// pairs is how often each workload runs per variant. One pair is what `make
// perf` runs; more show how much of a difference is noise (docs/perf.md).
var pairs = flag.Int("perf-pairs", 1, "run each selected workload this many times with each scheduler, the second of every two pairs in the reverse order of the first (use an even number); the report gives the median pair")

// firstPair numbers the pairs of this run from it, so that a later run can
// add the pairs an earlier one lacked, in their own orders (say the second
// pair of a workload whose first one ran alone), and the report can merge
// both runs' summaries without renumbering.
var firstPair = flag.Int("perf-first-pair", 1, "the number of this run's first pair: -perf-first-pair=2 -perf-pairs=1 runs a second pair alone, in the second pair's order")

// onlyVariants narrows the variants a workload runs with, so that a
// comparison of two of them (say DRAScope's FirstFit and BestFit) does not
// pay for the others' runs. The report leaves out what did not run.
var onlyVariants = flag.String("perf-variants", "", "comma-separated variants to run (e.g. drascope,drascope-bestfit); empty runs every variant of each workload")

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	// scheduler_perf collects per-plugin metrics for the plugins listed here.
	perf.PluginNames = append(perf.PluginNames, drascope.Name)
	os.Exit(m.Run())
}

// BenchmarkPerfScheduling runs each workload selected by
// -perf-scheduling-label-filter once per variant (-perf-pairs times), in
// the order results.RunOrder gives: over an even number of pairs each
// variant runs before every other one as often as after it, and the first
// place changes between workloads and between twos of pairs.
// Each run writes scheduler_perf's JSON into -data-items-dir, and a line into
// results.IndexFile there naming it.
func BenchmarkPerfScheduling(b *testing.B) {
	dir := flag.Lookup("data-items-dir").Value.String()
	if dir == "" {
		b.Fatal("-data-items-dir is required: the report is built from the files written there (make perf sets it)")
	}
	units, err := selectWorkloads(configFile, strings.Split(perf.PerfSchedulingLabelFilter, ","))
	if err != nil {
		b.Fatal(err)
	}
	if len(units) == 0 {
		b.Fatalf("no workload of %s matches -perf-scheduling-label-filter=%q", configFile, perf.PerfSchedulingLabelFilter)
	}
	// Selection happened above; each run below holds exactly one workload.
	filter := perf.PerfSchedulingLabelFilter
	perf.PerfSchedulingLabelFilter = ""
	b.Cleanup(func() { perf.PerfSchedulingLabelFilter = filter })

	if *pairs < 1 {
		b.Fatalf("-perf-pairs=%d: want at least 1", *pairs)
	}
	if *firstPair < 1 {
		b.Fatalf("-perf-first-pair=%d: want at least 1", *firstPair)
	}
	only, err := variantNames(*onlyVariants)
	if err != nil {
		b.Fatal(err)
	}
	for pair := *firstPair; pair < *firstPair+*pairs; pair++ {
		for i, u := range units {
			order := u.variants()
			var chosen []string
			if only != nil {
				order = slices.DeleteFunc(order, func(v variant) bool { return !only[v.name] })
				if len(order) == 0 {
					continue
				}
				for _, v := range order {
					chosen = append(chosen, v.name)
				}
			}
			order = results.RunOrder(order, i, pair)
			b.Run(u.testCase+"_"+u.workload, func(b *testing.B) {
				for position, v := range order {
					b.Run(v.name, func(b *testing.B) {
						runOnce(b, dir, u, v, pair, position+1, chosen)
					})
				}
			})
		}
	}
}

// variantNames parses -perf-variants; nil means every variant.
func variantNames(list string) (map[string]bool, error) {
	if list == "" {
		return nil, nil
	}
	known := map[string]bool{bestFitVariant.name: true, noPublishVariant.name: true}
	for _, v := range slices.Concat(variants, scoringVariants, preQueueingHintsVariants) {
		known[v.name] = true
	}
	names := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if !known[name] {
			return nil, fmt.Errorf("-perf-variants: unknown variant %q (known: %s)", name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		names[name] = true
	}
	return names, nil
}

// runOnce runs one workload with one variant and records the run in the
// index; chosen are the variants -perf-variants left it (nil: all).
func runOnce(b *testing.B, dir string, u unit, v variant, pair, position int, chosen []string) {
	config, err := u.configFor(b.TempDir(), v)
	if err != nil {
		b.Fatal(err)
	}
	before, err := resultFiles(dir)
	if err != nil {
		b.Fatal(err)
	}
	entry := results.IndexEntry{TestCase: u.testCase, Workload: u.workload, Variant: v.name, Pair: pair, Position: position, Variants: chosen}
	start := time.Now()
	perf.RunBenchmarkPerfScheduling(b, config, v.name, registry(), perf.WithPrepareFn(func(tCtx ktesting.TContext) error {
		if err := installCRDs(tCtx, tCtx.RESTConfig()); err != nil {
			return err
		}
		// scheduler_perf does not reset every metric between runs: count
		// from here.
		var before metricsBefore
		var err error
		if before.victims, err = histogramSum("scheduler_preemption_victims"); err != nil {
			return err
		}
		if before.publishDelay, err = histogramBuckets(publishDelayMetric); err != nil {
			return err
		}
		if before.firstPublishDelay, err = histogramBuckets(firstPublishDelayMetric); err != nil {
			return err
		}
		if before.dueWrites, err = counterSum(dueWritesMetric); err != nil {
			return err
		}
		if before.writeFloor, err = counterSum(writeFloorMetric); err != nil {
			return err
		}
		if before.pruning, err = pruningCounts(); err != nil {
			return err
		}
		// Every workload with measured pods counts the writes its
		// measured window paid for, and their delays.
		if ns := measuredNamespace(u.raw); ns != "" {
			ctx, cancel := context.WithCancel(tCtx)
			tCtx.Cleanup(cancel)
			before.window = watchWriteWindow(ctx, tCtx.Client(), ns)
			before.windowRequired = u.publishing
		}
		// Runs before scheduler_perf's own cleanup, which resets the metrics
		// and stops the apiserver; and before the window's watch stops.
		tCtx.Cleanup(func() {
			checkRun(tCtx, v, &entry, before)
			name, err := writeHeapProfile(dir, entry)
			if err != nil {
				tCtx.Errorf("writing the heap profile: %v", err)
			}
			entry.HeapProfile = name
		})
		return nil
	}), perf.WithNodeUpdateFn(fillClaims))
	entry.Seconds = time.Since(start).Seconds()
	after, err := resultFiles(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range after {
		if !slices.Contains(before, f) {
			entry.ResultFile = f
		}
	}
	if entry.CPUProfile, err = keepCPUProfile(dir, u, v, pair); err != nil {
		b.Fatal(err)
	}
	if entry.ResultFile == "" && !b.Failed() {
		b.Errorf("scheduler_perf wrote no result file into %s", dir)
	}
	if err := results.AppendIndex(dir, entry); err != nil {
		b.Fatal(err)
	}
}

// checkRun records what the run did beyond scheduler_perf's own figures, and
// fails it when the variant did not behave as itself: DRAScope must publish
// ResourcePools and never hand out a device kubelet reported Unhealthy;
// upstream publishes nothing.
func checkRun(tCtx ktesting.TContext, v variant, entry *results.IndexEntry, before metricsBefore) {
	writes, err := counterSum(writesMetric)
	if err != nil {
		tCtx.Errorf("reading ResourcePool writes: %v", err)
	}
	entry.ResourcePoolWrites = int(writes)
	if before.window != nil {
		window := before.window.totals()
		entry.WindowWrites, entry.WindowWriteFloor, entry.WindowSeconds = window.writes, window.floor, window.length.Seconds()
		entry.WindowProcessCPU, entry.WindowEtcdCPU = window.process, window.etcd
		entry.WindowPublishDelays, entry.WindowPublishDelayP95 = quantileBound(window.delays, 0.95)
		_, entry.WindowPublishDelayP99 = quantileBound(window.delays, 0.99)
		if window.length == 0 && before.windowRequired {
			// Where the window is what the workload compares. Elsewhere a
			// run may bind none of its measured pods (upstream's
			// preemptors), and has no window.
			tCtx.Errorf("the harness saw no measured pod bound: the window's writes are not counted")
		}
	}
	if pruning, err := pruningCounts(); err != nil {
		tCtx.Errorf("reading node pruning's answers: %v", err)
	} else {
		entry.Pruning = &results.Pruning{
			Everywhere:   pruning.Everywhere - before.pruning.Everywhere,
			Indexed:      pruning.Indexed - before.pruning.Indexed,
			Fallback:     pruning.Fallback - before.pruning.Fallback,
			MemoAccepted: pruning.MemoAccepted - before.pruning.MemoAccepted,
			MemoRan:      pruning.MemoRan - before.pruning.MemoRan,
			MemoRefuted:  pruning.MemoRefuted - before.pruning.MemoRefuted,
		}
	}
	unhealthy, err := unhealthyDevicesHandedOut(tCtx, tCtx.Client())
	if err != nil {
		tCtx.Errorf("counting Unhealthy devices handed out: %v", err)
	}
	entry.UnhealthyAllocated = unhealthy
	if n, err := unfilledClaims(tCtx); err != nil {
		tCtx.Errorf("counting the fill's claims: %v", err)
	} else if n > 0 {
		tCtx.Errorf("%d claims of namespace %s were never allocated: the cluster was not as full as the workload says", n, fillNamespace)
	}
	if counted, err := bigPods(tCtx, tCtx.Client()); err != nil {
		tCtx.Errorf("counting the 8-GPU pods: %v", err)
	} else {
		entry.BigPods, entry.BigPodsPlaced = counted.created, counted.placed
	}
	if err := countDeviceChoice(tCtx, tCtx.Client(), entry); err != nil {
		tCtx.Errorf("counting the device-choice pods: %v", err)
	}
	if err := countUrgentPods(tCtx, tCtx.Client(), entry, before.victims); err != nil {
		tCtx.Errorf("counting the urgent pods: %v", err)
	}
	if err := countGangs(tCtx, tCtx.Client(), entry); err != nil {
		tCtx.Errorf("counting the gangs: %v", err)
	}
	if entry.PartialGangs > 0 {
		tCtx.Errorf("the %s run left %d of %d gangs partly placed or holding devices for unbound members", v.name, entry.PartialGangs, entry.Gangs)
	}
	upstream := v.name == results.Upstream || v.name == results.UpstreamPreQueueingHints
	if upstream && entry.Victims > 0 {
		tCtx.Errorf("the upstream run preempted %d pods: upstream cannot free devices by preemption, so DRAScope ran in it", entry.Victims)
	}
	if !upstream && entry.UrgentPodsPlaced < entry.UrgentPods {
		tCtx.Errorf("DRAScope placed %d of %d urgent pods: preemption did not free a GPU for each", entry.UrgentPodsPlaced, entry.UrgentPods)
	}
	if !upstream && entry.Victims > entry.UrgentPods {
		tCtx.Errorf("DRAScope preempted %d pods for %d urgent pods of one GPU each: some preempted twice", entry.Victims, entry.UrgentPods)
	}
	if !upstream {
		if err := checkDeviceQuotas(tCtx); err != nil {
			tCtx.Errorf("DeviceQuotas were not enforced: %v", err)
		}
	}
	if !upstream && unhealthy > 0 {
		tCtx.Errorf("DRAScope allocated %d devices that kubelet reported Unhealthy", unhealthy)
	}
	if upstream || v.noPublish {
		if writes != 0 {
			tCtx.Errorf("the %s run made %v ResourcePool writes: it must not publish", v.name, writes)
		}
		return
	}
	// DRAScope publishing, with any scoring strategy.
	// A short run can end before the publisher's first write; what must
	// hold is that the ResourcePools catch up with the claims.
	catchUp := time.Now()
	if err := waitForResourcePools(tCtx); err != nil {
		tCtx.Errorf("ResourcePools do not match the allocated claims: %v", err)
	}
	entry.CatchUpSeconds = time.Since(catchUp).Seconds()
	writes, _ = counterSum(writesMetric)
	entry.ResourcePoolWrites = int(writes)
	floor, err := counterSum(writeFloorMetric)
	if err != nil {
		tCtx.Errorf("reading the ResourcePool write floor: %v", err)
	}
	entry.WriteFloor = int(floor - before.writeFloor)
	dueWrites, err := counterSum(dueWritesMetric)
	if err != nil {
		tCtx.Errorf("reading due ResourcePool writes: %v", err)
	}
	entry.DueWrites = int(dueWrites - before.dueWrites)
	buckets, err := histogramBuckets(publishDelayMetric)
	if err != nil {
		tCtx.Errorf("reading the ResourcePool publish delay: %v", err)
	}
	delays := buckets.since(before.publishDelay)
	entry.PublishDelays, entry.PublishDelayP95 = quantileBound(delays, 0.95)
	_, entry.PublishDelayP99 = quantileBound(delays, 0.99)
	first, err := histogramBuckets(firstPublishDelayMetric)
	if err != nil {
		tCtx.Errorf("reading the ResourcePool first publication delay: %v", err)
	}
	entry.FirstPublications, entry.FirstPublishDelayP95 = quantileBound(first.since(before.firstPublishDelay), 0.95)
	if entry.FirstPublicationSeconds, err = firstPublicationSpan(tCtx); err != nil {
		tCtx.Errorf("timing the first publication: %v", err)
	}
}

// firstPublicationSpan is the time from the first ResourceSlice's creation
// to the last ResourcePool's, in whole seconds (creation timestamps): how
// long after the pools appeared the publisher had created every object.
// Zero without ResourcePools.
func firstPublicationSpan(tCtx ktesting.TContext) (float64, error) {
	client, err := versioned.NewForConfig(tCtx.RESTConfig())
	if err != nil {
		return 0, err
	}
	pools, err := client.DrascopeV1alpha1().ResourcePools().List(tCtx, metav1.ListOptions{})
	if err != nil || len(pools.Items) == 0 {
		return 0, err
	}
	slices, err := tCtx.Client().ResourceV1().ResourceSlices().List(tCtx, metav1.ListOptions{})
	if err != nil || len(slices.Items) == 0 {
		return 0, err
	}
	firstSlice := slices.Items[0].CreationTimestamp.Time
	for _, s := range slices.Items {
		if s.CreationTimestamp.Time.Before(firstSlice) {
			firstSlice = s.CreationTimestamp.Time
		}
	}
	var lastPool time.Time
	for _, p := range pools.Items {
		if p.CreationTimestamp.Time.After(lastPool) {
			lastPool = p.CreationTimestamp.Time
		}
	}
	return lastPool.Sub(firstSlice).Seconds(), nil
}

// bigPods counts the pods of namespace "big" (the Fragmentation test
// case's 8-GPU pods): created, and bound to a node.
func bigPods(ctx context.Context, client kubernetes.Interface) (struct{ created, placed int }, error) {
	var counted struct{ created, placed int }
	pods, err := client.CoreV1().Pods("big").List(ctx, metav1.ListOptions{})
	if err != nil {
		return counted, err
	}
	for _, pod := range pods.Items {
		counted.created++
		if pod.Spec.NodeName != "" {
			counted.placed++
		}
	}
	return counted, nil
}

// countUrgentPods records the PreemptionOnFullCluster test case's urgent
// pods (namespace "urgent"): created, bound, the time from the first
// one's creation until the last bound one's PodScheduled condition, and
// the pods preempted since victimsBefore.
func countUrgentPods(ctx context.Context, client kubernetes.Interface, entry *results.IndexEntry, victimsBefore float64) error {
	pods, err := client.CoreV1().Pods("urgent").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		return err
	}
	var first, last time.Time
	for _, pod := range pods.Items {
		entry.UrgentPods++
		if first.IsZero() || pod.CreationTimestamp.Time.Before(first) {
			first = pod.CreationTimestamp.Time
		}
		if pod.Spec.NodeName == "" {
			continue
		}
		entry.UrgentPodsPlaced++
		if at := scheduledAt(&pod); at.After(last) {
			last = at
		}
	}
	if !last.IsZero() {
		entry.UrgentSeconds = last.Sub(first).Seconds()
	}
	victims, err := histogramSum("scheduler_preemption_victims")
	entry.Victims = int(victims - victimsBefore)
	return err
}

// scheduledAt is when the pod's PodScheduled condition turned true (1 s
// resolution); zero when it has not.
func scheduledAt(pod *v1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// metricsBefore are the process-wide metrics a run counts from.
type metricsBefore struct {
	victims           float64
	publishDelay      buckets
	firstPublishDelay buckets
	dueWrites         float64
	writeFloor        float64
	pruning           results.Pruning
	// window counts the writes inside the measured window; nil when the
	// workload names no measured namespace. windowRequired: a run whose
	// window stays empty fails (the workloads labelled publishing).
	window         *writeWindow
	windowRequired bool
}

const (
	publishDelayMetric      = "drascope_resourcepool_publish_delay_seconds"
	firstPublishDelayMetric = "drascope_resourcepool_first_publish_delay_seconds"
	dueWritesMetric         = "drascope_resourcepool_due_writes_total"
	writesMetric            = "drascope_resourcepool_writes_total"
	writeFloorMetric        = "drascope_resourcepool_write_floor_total"
	pruningMetric           = "drascope_node_pruning_total"
	filterMemoMetric        = "drascope_filter_memo_total"
	// cpuProfileSuffix ends the names of the CPU profiles scheduler_perf
	// writes with -perf-cpuprofile.
	cpuProfileSuffix = "-cpu.prof"
)

// buckets are a histogram's cumulative counts by upper bound, over all its
// series, and its sample count.
type buckets struct {
	bounds []float64
	counts []uint64
	count  uint64
}

// since is what was added to the histogram after earlier; all of it if
// the registry was reset in between.
func (b buckets) since(earlier buckets) buckets {
	if earlier.count > b.count || !slices.Equal(b.bounds, earlier.bounds) {
		return b
	}
	for i := range b.counts {
		if b.counts[i] < earlier.counts[i] {
			// Reset, and grown past the earlier count since.
			return b
		}
	}
	out := buckets{bounds: b.bounds, counts: slices.Clone(b.counts), count: b.count - earlier.count}
	for i := range out.counts {
		out.counts[i] -= earlier.counts[i]
	}
	return out
}

// histogramBuckets reads a histogram of the legacy registry.
func histogramBuckets(name string) (buckets, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return buckets{}, err
	}
	var b buckets
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			b.add(m.GetHistogram())
		}
	}
	return b, nil
}

// add adds a series of the histogram; the first sets the bounds.
func (b *buckets) add(h *dto.Histogram) {
	if b.bounds == nil {
		for _, bucket := range h.GetBucket() {
			b.bounds = append(b.bounds, bucket.GetUpperBound())
		}
		b.counts = make([]uint64, len(b.bounds))
	}
	for i, bucket := range h.GetBucket() {
		if i < len(b.counts) {
			b.counts[i] += bucket.GetCumulativeCount()
		}
	}
	b.count += h.GetSampleCount()
}

// quantileBound returns the sample count and the upper bound of the bucket
// that holds quantile q: the q-quantile is at most that (0 without
// samples). A bound, not an interpolation, so that KEP-5677's 10 s is read
// off its bucket. Beyond the last bucket it returns the negated last bound:
// more than that (JSON has no infinity).
func quantileBound(b buckets, q float64) (int, float64) {
	if b.count == 0 || len(b.bounds) == 0 {
		return int(b.count), 0
	}
	want := q * float64(b.count)
	for i, c := range b.counts {
		if float64(c) >= want {
			return int(b.count), b.bounds[i]
		}
	}
	return int(b.count), -b.bounds[len(b.bounds)-1]
}

// histogramSum is the sum of the samples of a histogram in the legacy
// registry, over all its series.
func histogramSum(name string) (float64, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return sum, nil
}

// unhealthyDevicesHandedOut counts the devices reported Unhealthy in some
// pod's status that claims outside the pre-filled "init" namespace were
// allocated (init claims are allocated by scheduler_perf, not the scheduler),
// admin access aside.
func unhealthyDevicesHandedOut(ctx context.Context, client kubernetes.Interface) (int, error) {
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	unhealthy := map[string]bool{}
	for _, pod := range pods.Items {
		for _, status := range pod.Status.ContainerStatuses {
			for _, res := range status.AllocatedResourcesStatus {
				for _, r := range res.Resources {
					if r.Health == v1.ResourceHealthStatusUnhealthy {
						unhealthy[string(r.ResourceID)] = true
					}
				}
			}
		}
	}
	if len(unhealthy) == 0 {
		return 0, nil
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, claim := range claims.Items {
		if claim.Namespace == "init" || claim.Namespace == fillNamespace || claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue // observes the device (the monitor reporting it), uses none of it
			}
			if unhealthy[r.Driver+"/"+r.Pool+"/"+r.Device] {
				n++
			}
		}
	}
	return n, nil
}

// poolProgressTimeout is how long waitForResourcePools waits for the number
// of differing pools to shrink. The publisher's budgets (a first
// publication of 5000 pools, quiet pools written at maxWritesPerSecond)
// make catching up take minutes on the big workloads, so a fixed deadline
// would be either too short there or far too long for a publisher that is
// stuck.
const poolProgressTimeout = time.Minute

// waitForResourcePools waits until every pool has its ResourcePool and each
// counts as allocated exactly the devices the claims hold, for as long as
// that keeps getting closer.
func waitForResourcePools(tCtx ktesting.TContext) error {
	client, err := versioned.NewForConfig(tCtx.RESTConfig())
	if err != nil {
		return err
	}
	var diffs []string
	fewest, lastProgress := -1, time.Now()
	err = wait.PollUntilContextCancel(tCtx, time.Second, true, func(ctx context.Context) (bool, error) {
		diffs, err = comparePools(ctx, tCtx.Client(), client.DrascopeV1alpha1().ResourcePools())
		if err != nil {
			return false, err
		}
		if fewest < 0 || len(diffs) < fewest {
			fewest, lastProgress = len(diffs), time.Now()
		}
		if len(diffs) > 0 && time.Since(lastProgress) > poolProgressTimeout {
			return false, fmt.Errorf("no progress for %v, %d pools still differ", poolProgressTimeout, len(diffs))
		}
		return len(diffs) == 0, nil
	})
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
	}
	if len(diffs) > 0 {
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.Join(diffs, "; "))
		}
		return errors.New(strings.Join(diffs, "; "))
	}
	return err
}

// comparePools lists how the ResourcePools differ from the claims'
// allocations (admin access takes nothing).
func comparePools(ctx context.Context, client kubernetes.Interface, pools typedv1alpha1.ResourcePoolInterface) ([]string, error) {
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	allocated := map[string]sets.Set[string]{} // driver/pool -> devices
	for _, claim := range claims.Items {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			key := r.Driver + "/" + r.Pool
			if allocated[key] == nil {
				allocated[key] = sets.New[string]()
			}
			allocated[key].Insert(r.Device)
		}
	}
	list, err := pools.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var diffs []string
	seen := sets.New[string]()
	for _, rp := range list.Items {
		key := rp.Spec.Driver + "/" + rp.Spec.PoolName
		seen.Insert(key)
		got := 0
		if rp.Status.Summary != nil {
			got = int(rp.Status.Summary.AllocatedDevices)
		}
		if want := allocated[key].Len(); got != want {
			diffs = append(diffs, fmt.Sprintf("%s: ResourcePool %s has %d allocated, claims hold %d", key, rp.Name, got, want))
		}
	}
	for key := range allocated {
		if !seen.Has(key) {
			diffs = append(diffs, fmt.Sprintf("%s: no ResourcePool, claims hold %d devices", key, allocated[key].Len()))
		}
	}
	// Every pool is published, not only those with devices allocated: a
	// first publication still under way is not caught up.
	resourceSlices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, slice := range resourceSlices.Items {
		if key := slice.Spec.Driver + "/" + slice.Spec.Pool.Name; !seen.Has(key) && allocated[key] == nil {
			seen.Insert(key)
			diffs = append(diffs, fmt.Sprintf("%s: no ResourcePool", key))
		}
	}
	slices.Sort(diffs)
	return diffs, nil
}

// pruningCounts reads drascope_node_pruning_total by answer and
// drascope_filter_memo_total by result.
func pruningCounts() (results.Pruning, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return results.Pruning{}, err
	}
	var p results.Pruning
	for _, f := range families {
		if f.GetName() != pruningMetric && f.GetName() != filterMemoMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			n := int(m.GetCounter().GetValue())
			for _, l := range m.GetLabel() {
				switch l.GetName() + "=" + l.GetValue() {
				case "answer=" + string(nodeprune.Everywhere):
					p.Everywhere += n
				case "answer=" + string(nodeprune.Indexed):
					p.Indexed += n
				case "answer=" + string(nodeprune.Fallback):
					p.Fallback += n
				case "result=" + metrics.FilterMemoAccepted:
					p.MemoAccepted += n
				case "result=" + metrics.FilterMemoRan:
					p.MemoRan += n
				case "result=" + metrics.FilterMemoRefuted:
					p.MemoRefuted += n
				}
			}
		}
	}
	return p, nil
}

// counterSum adds up every series of a counter in the process's registry.
func counterSum(name string) (float64, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

// registry is drascope's out-of-tree registry, with a runtime of its own for
// the one scheduler a run builds, and one addition for scheduler_perf: its
// in-process apiserver starts empty, so drascope's CRDs are installed
// before DRAScope starts, as a deployment would have them.
func registry() frameworkruntime.Registry {
	factory := drascope.Factory(draruntime.New())
	return frameworkruntime.Registry{
		drascope.Name: func(ctx context.Context, args runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
			if err := installCRDs(ctx, fh.KubeConfig()); err != nil {
				return nil, err
			}
			return factory(ctx, args, fh)
		},
		drascopepreemption.Name: drascopepreemption.New,
	}
}

// crds are drascope's CRDs: every variant's apiserver serves them, so that
// a workload may create DeviceQuotas whichever scheduler runs (upstream's
// ignores them).
var crds = []string{"crds/resourcepools.drascope.dev.yaml", "crds/devicequotas.drascope.dev.yaml"}

// installCRDs installs drascope's CRDs where they are not yet served.
func installCRDs(ctx context.Context, config *rest.Config) error {
	for _, path := range crds {
		crd, err := manifests.Files.ReadFile(path)
		if err != nil {
			return err
		}
		if err := localcluster.Apply(ctx, config, "manifests/"+path, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// unit is one workload of one test case.
type unit struct {
	testCase string
	workload string
	// scoring: the test case compares scoring strategies too, and every
	// variant scores every feasible node.
	scoring bool
	// preQueueingHints: the workload runs with SchedulerPreQueueingHints
	// on too.
	preQueueingHints bool
	// publishing: the workload runs DRAScope without publishing too.
	publishing bool
	// deviceChoice: the test case or the workload runs DRAScope with
	// deviceChoice BestFit too.
	deviceChoice bool
	// raw is the test case with only this workload.
	raw map[string]any
}

// variants are the schedulers the unit runs with.
func (u unit) variants() []variant {
	all := slices.Clone(variants)
	if u.scoring {
		all = append(all, scoringVariants...)
	}
	if u.preQueueingHints {
		all = append(all, preQueueingHintsVariants...)
	}
	if u.publishing {
		all = append(all, noPublishVariant)
	}
	if u.deviceChoice {
		all = append(all, bestFitVariant)
	}
	return all
}

// configFor writes a scheduler_perf config holding only the unit, run with
// the variant's scheduler configuration.
func (u unit) configFor(dir string, v variant) (string, error) {
	tc := make(map[string]any, len(u.raw)+1)
	for k, val := range u.raw {
		tc[k] = val
	}
	tc["schedulerConfigPath"] = v.schedulerConfig
	if len(v.featureGates) > 0 {
		gates := map[string]any{}
		if existing, ok := tc["featureGates"].(map[string]any); ok {
			maps.Copy(gates, existing)
		}
		for gate, on := range v.featureGates {
			gates[gate] = on
		}
		tc["featureGates"] = gates
	}
	if v.strategy != "" || v.deviceChoice != "" || v.noPublish || u.scoring {
		data, err := os.ReadFile(v.schedulerConfig)
		if err != nil {
			return "", err
		}
		schedulerConfig := string(data)
		if u.scoring {
			// A comparison of packing must let every scheduler see the
			// fullest node: above 100 nodes the default adaptive
			// percentageOfNodesToScore scores only a sample of the
			// feasible ones (docs/scoring.md, "Sampled scoring on big
			// clusters").
			if strings.Contains(schedulerConfig, "percentageOfNodesToScore") {
				return "", fmt.Errorf("%s sets percentageOfNodesToScore; the harness sets it to 100 in test cases labelled scoring", v.schedulerConfig)
			}
			const kind = "\nkind: KubeSchedulerConfiguration\n"
			if schedulerConfig, err = insertAfter(schedulerConfig, v.schedulerConfig, kind, "percentageOfNodesToScore: 100\n"); err != nil {
				return "", err
			}
		}
		const args = "    args:\n"
		if v.strategy != "" {
			if schedulerConfig, err = insertAfter(schedulerConfig, v.schedulerConfig, args, "      scoring:\n        strategy: "+v.strategy+"\n"); err != nil {
				return "", err
			}
		}
		if v.deviceChoice != "" {
			if schedulerConfig, err = insertAfter(schedulerConfig, v.schedulerConfig, args, "      deviceChoice: "+v.deviceChoice+"\n"); err != nil {
				return "", err
			}
		}
		if v.noPublish {
			const publishing = "publishResourcePools: true"
			if !strings.Contains(schedulerConfig, publishing) {
				return "", fmt.Errorf("%s: no %q to turn off", v.schedulerConfig, publishing)
			}
			schedulerConfig = strings.Replace(schedulerConfig, publishing, "publishResourcePools: false", 1)
		}
		path := filepath.Join(dir, "scheduler-"+v.name+".yaml")
		if err := os.WriteFile(path, []byte(schedulerConfig), 0o644); err != nil {
			return "", err
		}
		tc["schedulerConfigPath"] = path
	}
	data, err := yaml.Marshal([]any{tc})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, configFile)
	return path, os.WriteFile(path, data, 0o644)
}

// insertAfter adds text after the first anchor of a scheduler
// configuration read from path. A variant is a small edit of a checked-in
// file; one whose anchor is gone must fail the run, not run unedited.
func insertAfter(config, path, anchor, text string) (string, error) {
	if !strings.Contains(config, anchor) {
		return "", fmt.Errorf("%s: no %q to add %q after", path, strings.TrimSpace(anchor), strings.TrimSpace(text))
	}
	return strings.Replace(config, anchor, anchor+text, 1), nil
}

// selectWorkloads lists the workloads of a scheduler_perf config that the
// label filter selects, with scheduler_perf's semantics: "x" or "+x" must be
// among the test case's and workload's labels, "-x" must not.
func selectWorkloads(path string, filter []string) ([]unit, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cases []map[string]any
	if err := yaml.Unmarshal(data, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var units []unit
	for _, tc := range cases {
		name, _ := tc["name"].(string)
		if _, set := tc["schedulerConfigPath"]; set {
			return nil, fmt.Errorf("%s: test case %s sets schedulerConfigPath; the harness sets it per variant", path, name)
		}
		workloads, _ := tc["workloads"].([]any)
		for _, w := range workloads {
			wm, _ := w.(map[string]any)
			wname, _ := wm["name"].(string)
			if !labelsMatch(filter, append(stringList(tc["labels"]), stringList(wm["labels"])...)) {
				continue
			}
			raw := make(map[string]any, len(tc))
			for k, val := range tc {
				raw[k] = val
			}
			raw["workloads"] = []any{w}
			units = append(units, unit{testCase: name, workload: wname, raw: raw,
				scoring:          slices.Contains(stringList(tc["labels"]), "scoring"),
				deviceChoice:     slices.Contains(stringList(tc["labels"]), "devicechoice") || slices.Contains(stringList(wm["labels"]), "devicechoice"),
				preQueueingHints: slices.Contains(stringList(wm["labels"]), "prequeueinghints"),
				publishing:       slices.Contains(stringList(wm["labels"]), "publishing"),
			})
		}
	}
	return units, nil
}

func labelsMatch(filter, labels []string) bool {
	for _, f := range filter {
		if f == "" {
			continue
		}
		mustHave := f[0] != '-'
		if f[0] == '-' || f[0] == '+' {
			f = f[1:]
		}
		if slices.Contains(labels, f) != mustHave {
			return false
		}
	}
	return true
}

func stringList(v any) []string {
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
	for _, item := range items {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// keepCPUProfile gives the CPU profile scheduler_perf wrote for the run, if
// any, a name of its own, and returns it. scheduler_perf names a profile by
// test case, workload, topic (the variant) and an ID fixed per process, so
// the next pair's run would overwrite it.
func keepCPUProfile(dir string, u unit, v variant, pair int) (string, error) {
	prefix := strings.ReplaceAll(u.testCase+"_"+u.workload+"_"+v.name+"_", "/", "_")
	written, err := filepath.Glob(filepath.Join(dir, prefix+"*"+cpuProfileSuffix))
	if err != nil {
		return "", err
	}
	pairSuffix := fmt.Sprintf("_pair%d%s", pair, cpuProfileSuffix)
	kept := ""
	for _, f := range written {
		if strings.Contains(filepath.Base(f), "_pair") {
			continue // an earlier pair's
		}
		kept = strings.TrimSuffix(f, cpuProfileSuffix) + pairSuffix
		if err := os.Rename(f, kept); err != nil {
			return "", err
		}
	}
	if kept == "" {
		return "", nil
	}
	return filepath.Base(kept), nil
}

// writeHeapProfile writes a heap profile of the run's end into dir, after a
// garbage collection so that it holds only what is live: every cache full
// with the workload's cluster, before scheduler_perf's clean-up stops the
// scheduler. It returns the file's name.
func writeHeapProfile(dir string, e results.IndexEntry) (string, error) {
	name := strings.ReplaceAll(fmt.Sprintf("%s_%s_%s_pair%d-heap.prof", e.TestCase, e.Workload, e.Variant, max(e.Pair, 1)), "/", "_")
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	goruntime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return "", err
	}
	return name, f.Close()
}

// resultFiles lists scheduler_perf's JSON result files in dir.
func resultFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	matches, err := filepath.Glob(filepath.Join(dir, "BenchmarkPerfScheduling*.json"))
	if err != nil {
		return nil, err
	}
	for i, m := range matches {
		matches[i] = filepath.Base(m)
	}
	return matches, nil
}
