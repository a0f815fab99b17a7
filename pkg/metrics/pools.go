package metrics

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/poolcache"
)

// The metrics without labels are vectors of no labels all the same: only
// vectors are reset by legacyregistry.Reset, which kube-apiserver-style
// /metrics resets and scheduler_perf (between workloads) rely on.
var (
	// SyncDuration: how long one ResourcePool sync took (KEP-5677 name).
	SyncDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "resourcepool_controller_sync_duration_seconds",
		Help:           "Time taken to sync one ResourcePool object with its pool's snapshot.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// SyncErrors: failed ResourcePool syncs (KEP-5677 name).
	SyncErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "resourcepool_controller_sync_errors_total",
		Help:           "Number of ResourcePool syncs that failed and were retried with backoff.",
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// SnapshotDelay: from an allocation change to the snapshot showing it.
	SnapshotDelay = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "drascope_resourcepool_snapshot_delay_seconds",
		Help:           "Delay between a change to a pool's slices or allocations (including in-flight allocations) and the side-cache snapshot that reflects it.",
		Buckets:        metrics.ExponentialBuckets(0.0001, 2, 18),
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// publishDelayBuckets are doublings from 1ms to about 1s, then steps of
	// 2.5s around the default poolStatus.maxPublishDelay (10s, KEP-5677's
	// SLO: 95% of status updates within 10s): whether the 95th and 99th
	// percentiles keep the promise is read from a bucket boundary at it,
	// and by how much they miss it to within 2.5s, not between 8.192s and
	// 16.384s.
	publishDelayBuckets = append(metrics.ExponentialBuckets(0.001, 2, 11), 2.5, 5, 7.5, 10, 12.5, 15, 20, 30, 60)

	// PublishDelay: from an allocation change to the ResourcePool write.
	PublishDelay = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "drascope_resourcepool_publish_delay_seconds",
		Help:           "Delay between the oldest change a ResourcePool status write reflects and that write, for pools whose object exists (first publications: drascope_resourcepool_first_publish_delay_seconds).",
		Buckets:        publishDelayBuckets,
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// FirstPublishDelay: from a new pool's first change to its object's
	// creation, which is paced apart from the writes of changes.
	FirstPublishDelay = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "drascope_resourcepool_first_publish_delay_seconds",
		Help:           "Delay between a new pool's oldest change and the creation of its ResourcePool, which is paced at poolStatus.maxCreationsPerSecond apart from the writes of changes; not part of drascope_resourcepool_publish_delay_seconds.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 22),
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// Writes: ResourcePool API writes by verb, the publisher's load on the
	// apiserver.
	Writes = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_resourcepool_writes_total",
		Help:           "ResourcePool writes the publisher made, by verb (create, update of the status, delete).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"verb"})
	// DueWrites: writes made past the budget to keep within the delay the
	// publisher aims for.
	DueWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_resourcepool_due_writes_total",
		Help:           "ResourcePool writes that went ahead of poolStatus.maxWritesPerSecond because the change they show reached its deadline (poolStatus.maxPublishDelay, less the time its write and the writes queued ahead of it take).",
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// WriteFloor: the fewest writes the changes seen needed, beside Writes.
	WriteFloor = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_resourcepool_write_floor_total",
		Help:           "The fewest ResourcePool writes that could have published within poolStatus.maxPublishDelay every change the publishing replica saw after its first write of the pool: one per group of a pool's changes within maxPublishDelay of the group's first. drascope_resourcepool_writes_total beyond it is what pacing and early writes of quiet pools add.",
		StabilityLevel: metrics.ALPHA,
	}, nil)
	// RecomputeDuration: computing one pool's snapshot.
	RecomputeDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name:           "drascope_resourcepool_recompute_duration_seconds",
		Help:           "Time taken to recompute one pool's snapshot in the side cache.",
		Buckets:        metrics.ExponentialBuckets(0.00001, 2, 18),
		StabilityLevel: metrics.ALPHA,
	}, nil)

	// ConflictChecks: suspected conflicts checked against the API, by
	// result (Confirmed, NotConfirmed).
	ConflictChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_allocation_conflict_checks_total",
		Help:           "Suspected allocation conflicts checked by reading their claims from the API, by result: Confirmed (reported) or NotConfirmed (the side cache's in-flight view or informer lag; checked again later while still suspected).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// NodePruning: how each pod's node pruning was answered
	// (nodeprune.Outcome).
	NodePruning = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_node_pruning_total",
		Help:           "Pods whose nodes DRAScope pruned, by how the availability index answered: Everywhere (every node reaches a free device; nothing pruned), Indexed (pruned from the index, whose in-use set was the cycle's), Fallback (the index's view was not the cycle's, as while informer events reach it and the scheduler's claim tracker at different times; the pass over every slice answered).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"answer"})

	// EarlyRefusals: pods DRAScope's PreFilter pruned for before
	// upstream's, refused or passed (plugins/drascope/prune.go).
	EarlyRefusals = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_early_refusals_total",
		Help:           "Scheduling attempts node pruning ran on before upstream's PreFilter, by result: Refused (no node reaches a free device for every request; the pod was refused without running upstream's PreFilter) or Passed (upstream's PreFilter ran on the same in-use set, with the slices of the pools that reach the nodes left).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// FilterMemo: how DRAScope's Filter answered in the cycles its memo
	// served (pkg/filtermemo).
	FilterMemo = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_filter_memo_total",
		Help:           "Filter calls in the scheduling cycles DRAScope's filter memo served, by result: Accepted (the node was accepted before with the same claim specs, classes, node, slices and devices in use, and upstream's allocator did not run), Ran (upstream's Filter ran), Refuted (upstream's Filter, run for the chosen node at Reserve, refused a node the memo accepted; expected to stay 0).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// GangPlans: what DRAScope's planning did for a gang whose pod-group
	// cycle failed (plugins/drascope/podgrouppostfilter.go).
	GangPlans = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_gang_plans_total",
		Help:           "Failed pod-group cycles for which DRAScope looked for devices for every gang member at once, by result: Placed (the gang placed with the plan in a check run, and is retried with it), NoPlan (the members do not all fit at once), NotPlaced (a plan, but the gang did not place with it: something besides devices stops it), Budget (the search used up its allocator runs), Abandoned (a planned gang failed again because the cluster changed; planned afresh in its next failed cycle).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// AllocationRuns: how each of DRAScope's own runs of upstream's
	// allocator ended (pkg/dryrun: preemption's dry runs, release checks,
	// gang planning).
	AllocationRuns = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_allocation_runs_total",
		Help:           "Runs of upstream's structured allocator that DRAScope makes itself (preemption dry runs, release checks, gang planning; upstream's Filter is not counted), by outcome: fit, nofit (searched, no fit), infeasible (skipped: the node has too few free devices or counters for the claims), timeout (ended by the per-run timeout or the cycle's budget), error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})

	devicesDesc = metrics.NewDesc("drascope_resourcepool_devices",
		"Devices of a pool by state (Available, Allocated, PartiallyAllocated, Unavailable), as the scheduler sees them. PartiallyAllocated devices are counted under Allocated too.",
		[]string{"driver", "pool", "node", "state"}, nil, metrics.ALPHA, "")
	conflictsDesc = metrics.NewDesc("drascope_resourcepool_allocation_conflicts",
		"Confirmed allocation conflicts of a pool, as when two schedulers raced for its devices, by kind: OverAllocatedDevice (devices held by more claims than they allow), OverConsumedCapacity (devices whose shares consume more than their capacity), OverConsumedCounter (shared counters consumed beyond their value).",
		[]string{"driver", "pool", "node", "kind"}, nil, metrics.ALPHA, "")
	wholeFreeDesc = metrics.NewDesc("drascope_resourcepool_whole_devices_free",
		"Whole devices a pool can still give a pod: physical devices offered as partitions (shared counter sets, KEP-4815) that no allocated device draws on and whose device taking all of them is Available, and Available devices that draw on no counters. Beside drascope_resourcepool_devices{state=\"Available\"}, which counts free partitions too, it shows whether small allocations fragment the pool (deviceChoice: BestFit packs them).",
		[]string{"driver", "pool", "node"}, nil, metrics.ALPHA, "")
	healthDesc = metrics.NewDesc("drascope_resourcepool_device_health",
		"Devices of a pool by the health kubelet last reported for them in pod status (KEP-4680): Healthy, Unhealthy, or Unknown (no report, or an Unhealthy report older than deviceHealth.unhealthyHoldTime).",
		[]string{"driver", "pool", "node", "health"}, nil, metrics.ALPHA, "")
	pendingDesc = metrics.NewDesc("drascope_pending_pods",
		"Pods of this scheduler's DRAScope profiles that are not bound and have a claim still to allocate, by a device class their claims ask for (a pod counts once per class; a prioritized list by its first choice); 0 for every other DeviceClass. Includes pods in a scheduling cycle right now.",
		[]string{"device_class"}, nil, metrics.ALPHA, "")
	classAvailableDesc = metrics.NewDesc("drascope_device_class_available_devices",
		"Available devices that a DeviceClass's selectors accept, over every pool the allocator uses (complete, with valid slices); 0 for a class no free device matches. With drascope_pending_pods of the class above 0, pods wait for devices no pool has free.",
		[]string{"device_class"}, nil, metrics.ALPHA, "")
	claimPodsDesc = metrics.NewDesc("drascope_pods_with_claims",
		"Pods that use ResourceClaims and have not finished, by spec.schedulerName. Beside kube-scheduler, a series for a scheduler that is not drascope's means two scheduler processes allocate devices, and may hand one device to two claims: route such pods with the shipped admission policy (README: Deployment modes).",
		[]string{"scheduler"}, nil, metrics.ALPHA, "")
	conditionDesc = metrics.NewDesc("drascope_resourcepool_condition",
		"Conditions of a pool, as its ResourcePool status has them (1 true, 0 false): Complete (every slice of the pool's generation is present) and Valid (its slices passed validation and no confirmed allocation conflict).",
		[]string{"driver", "pool", "node", "condition"}, nil, metrics.ALPHA, "")
	publishingDesc = metrics.NewDesc("drascope_resourcepool_publishing",
		"1 when this replica publishes ResourcePool objects, 0 when poolStatus.publishResourcePools is on but it does not (a standby, or the CRD is not installed); no series when publishing is off. Across replicas, a maximum of 0 means nobody keeps ResourcePools current.",
		nil, nil, metrics.ALPHA, "")
	oldestUnwrittenDesc = metrics.NewDesc("drascope_resourcepool_oldest_unwritten_change_seconds",
		"Age of the oldest pool change that no ResourcePool write has taken up yet, in the replica that publishes (0 when every ResourcePool is current). The publisher writes each change within poolStatus.maxPublishDelay. New pools waiting for their object to be created, which is paced apart, do not count.",
		nil, nil, metrics.ALPHA, "")
	quotaUsedDesc = metrics.NewDesc("drascope_devicequota_used",
		"What a namespace's allocations use of an amount a DeviceQuota limits (devices, a shared counter, a consumable capacity) for one device class, in flight included; at most 1000 series.",
		[]string{"namespace", "devicequota", "device_class", "amount"}, nil, metrics.ALPHA, "")
	quotaLimitDesc = metrics.NewDesc("drascope_devicequota_limit",
		"The limit a DeviceQuota sets on an amount (devices, a shared counter, a consumable capacity) for one device class; at most 1000 series.",
		[]string{"namespace", "devicequota", "device_class", "amount"}, nil, metrics.ALPHA, "")
	quotaRefusedDesc = metrics.NewDesc("drascope_devicequota_refused_pods",
		"Pods a DeviceQuota refused that wait for their namespace's quota to change or its usage to fall, by namespace; at most 1000 series.",
		[]string{"namespace"}, nil, metrics.ALPHA, "")
	poolsDesc = metrics.NewDesc("resourcepool_controller_pools_total",
		"Number of pools the scheduler's side cache tracks.",
		nil, nil, metrics.ALPHA, "")

	// exported is the side cache whose pools the per-pool gauges show. The
	// legacy registry that /metrics serves is process-wide, like every
	// kube-scheduler metric, so one cache is exported at a time: the one
	// whose runtime started last.
	exported     atomic.Pointer[Source]
	registerOnce sync.Once
)

// Source is what the per-pool gauges read at scrape time.
type Source interface {
	List() []*poolcache.Snapshot
	// PendingPodsByDeviceClass counts the scheduler's pods waiting for
	// devices, by the device classes their claims ask for.
	PendingPodsByDeviceClass() map[string]int
	// AvailableDevicesByDeviceClass counts the Available devices each
	// DeviceClass accepts.
	AvailableDevicesByDeviceClass() map[string]int
	// PodsWithClaimsByScheduler counts the pods that use ResourceClaims and
	// have not finished, by scheduler name.
	PodsWithClaimsByScheduler() map[string]int
	// Publishing reports whether publishing ResourcePools is on, whether
	// this process publishes, and the age of its oldest unwritten change.
	Publishing() (enabled, publishing bool, oldestUnwritten time.Duration)
	// DeviceQuotas are the amounts DeviceQuotas limit, at most
	// MaxQuotaSeries of them, and the pods a DeviceQuota refused that
	// wait, by namespace (at most MaxQuotaSeries namespaces).
	DeviceQuotas() (amounts []QuotaAmount, refused map[string]int)
}

// MaxQuotaSeries bounds the series of each DeviceQuota metric.
const MaxQuotaSeries = 1000

// QuotaAmount is one amount a DeviceQuota limits: "devices", "counter
// NAME" or "capacity NAME" of a device class.
type QuotaAmount struct {
	Namespace, Quota, Class, Amount string
	Used, Limit                     float64
}

// Export registers the metrics in the legacy registry (once per process)
// and points the per-pool gauges at source until stop is called. stop
// leaves the gauges alone when another source was exported since, so that
// one scheduler stopping while the next starts (tests, scheduler_perf)
// never blanks the newer one's pools.
func Export(source Source) (stop func()) {
	Register()
	p := &source
	exported.Store(p)
	return func() { exported.CompareAndSwap(p, nil) }
}

// Register registers every drascope metric in the legacy registry, once per
// process. The per-pool gauges have no series until a source is exported.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(SyncDuration, SyncErrors, SnapshotDelay, PublishDelay, FirstPublishDelay, Writes, DueWrites, WriteFloor, RecomputeDuration, ConflictChecks,
			NodePruning, EarlyRefusals, FilterMemo, GangPlans, AllocationRuns, IgnoredReports, RuleWrites)
		legacyregistry.CustomMustRegister(&poolCollector{})
	})
}

// ObserveRecompute is a poolcache.Options.Observe function.
func ObserveRecompute(_ drausage.PoolID, _ int, compute, delay time.Duration) {
	RecomputeDuration.WithLabelValues().Observe(compute.Seconds())
	SnapshotDelay.WithLabelValues().Observe(delay.Seconds())
}

// ObserveWrite is a poolpublisher.Options.ObserveWrite function.
func ObserveWrite(verb string) {
	Writes.WithLabelValues(verb).Inc()
}

// ObserveDueWrite is a poolpublisher.Options.ObserveOverBudget function.
func ObserveDueWrite() {
	DueWrites.WithLabelValues().Inc()
}

// ObserveWriteFloor is a poolpublisher.Options.ObserveWriteFloor function.
func ObserveWriteFloor() {
	WriteFloor.WithLabelValues().Inc()
}

// ObserveConflictCheck is a conflictcheck.Options.Observe function.
func ObserveConflictCheck(result string, n int) {
	ConflictChecks.WithLabelValues(result).Add(float64(n))
}

// ObservePruning is a nodeprune.IndexOptions.Observe function.
func ObservePruning(answer nodeprune.Outcome) {
	NodePruning.WithLabelValues(string(answer)).Inc()
}

// Results of drascope_early_refusals_total.
const (
	EarlyRefusalRefused = "Refused"
	EarlyRefusalPassed  = "Passed"
)

// ObserveEarlyRefusal counts an attempt pruned before upstream's PreFilter.
func ObserveEarlyRefusal(result string) {
	EarlyRefusals.WithLabelValues(result).Inc()
}

// Results of drascope_filter_memo_total.
const (
	FilterMemoAccepted = "Accepted"
	FilterMemoRan      = "Ran"
	FilterMemoRefuted  = "Refuted"
)

// ObserveFilterMemo counts a Filter call in a cycle the filter memo served.
func ObserveFilterMemo(result string) {
	FilterMemo.WithLabelValues(result).Inc()
}

// ObserveGangPlan counts a result of DRAScope's gang planning.
func ObserveGangPlan(result string) {
	GangPlans.WithLabelValues(result).Inc()
}

// ObserveAllocationRun is a dryrun.Allocating.Observe function.
func ObserveAllocationRun(outcome dryrun.Outcome) {
	AllocationRuns.WithLabelValues(string(outcome)).Inc()
}

// ObserveSync is a poolpublisher.Options.Observe function.
func ObserveSync(duration time.Duration, err error) {
	SyncDuration.WithLabelValues().Observe(duration.Seconds())
	if err != nil {
		SyncErrors.WithLabelValues().Inc()
	}
}

// poolCollector reads the cache at scrape time: no stale series for pools
// that are gone.
type poolCollector struct {
	metrics.BaseStableCollector

	// made are the series of the snapshots the last scrape sent.
	mu   sync.Mutex
	made map[*poolcache.Snapshot][]metrics.Metric
}

func (c *poolCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- devicesDesc
	ch <- wholeFreeDesc
	ch <- conflictsDesc
	ch <- healthDesc
	ch <- poolsDesc
	ch <- pendingDesc
	ch <- classAvailableDesc
	ch <- conditionDesc
	ch <- claimPodsDesc
	ch <- publishingDesc
	ch <- oldestUnwrittenDesc
	ch <- quotaUsedDesc
	ch <- quotaLimitDesc
	ch <- quotaRefusedDesc
}

func (c *poolCollector) CollectWithStability(ch chan<- metrics.Metric) {
	source := exported.Load()
	if source == nil {
		// Nothing kept for a cache that stopped.
		c.mu.Lock()
		c.made = nil
		c.mu.Unlock()
		return
	}
	for class, n := range (*source).PendingPodsByDeviceClass() {
		ch <- metrics.NewLazyConstMetric(pendingDesc, metrics.GaugeValue, float64(n), class)
	}
	for class, n := range (*source).AvailableDevicesByDeviceClass() {
		ch <- metrics.NewLazyConstMetric(classAvailableDesc, metrics.GaugeValue, float64(n), class)
	}
	for scheduler, n := range (*source).PodsWithClaimsByScheduler() {
		ch <- metrics.NewLazyConstMetric(claimPodsDesc, metrics.GaugeValue, float64(n), scheduler)
	}
	if enabled, publishing, oldest := (*source).Publishing(); enabled {
		ch <- metrics.NewLazyConstMetric(publishingDesc, metrics.GaugeValue, boolValue(publishing))
		if publishing {
			ch <- metrics.NewLazyConstMetric(oldestUnwrittenDesc, metrics.GaugeValue, oldest.Seconds())
		}
	}
	amounts, refused := (*source).DeviceQuotas()
	for _, a := range amounts[:min(len(amounts), MaxQuotaSeries)] {
		ch <- metrics.NewLazyConstMetric(quotaUsedDesc, metrics.GaugeValue, a.Used, a.Namespace, a.Quota, a.Class, a.Amount)
		ch <- metrics.NewLazyConstMetric(quotaLimitDesc, metrics.GaugeValue, a.Limit, a.Namespace, a.Quota, a.Class, a.Amount)
	}
	namespaces := slices.Sorted(maps.Keys(refused))
	for _, namespace := range namespaces[:min(len(namespaces), MaxQuotaSeries)] {
		ch <- metrics.NewLazyConstMetric(quotaRefusedDesc, metrics.GaugeValue, float64(refused[namespace]), namespace)
	}
	snapshots := (*source).List()
	ch <- metrics.NewLazyConstMetric(poolsDesc, metrics.GaugeValue, float64(len(snapshots)))
	// The registry sorts each family by its label values, labels in name
	// order: driver, node, pool(, state) for the devices and the whole
	// devices free; condition, driver, node, pool for the conditions;
	// driver, kind (health), node, pool for the conflicts (health).
	slices.SortFunc(snapshots, func(a, b *poolcache.Snapshot) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.NodeName, b.NodeName), cmp.Compare(a.Pool, b.Pool))
	})
	pools := c.poolSeries(snapshots)
	for _, series := range pools {
		for _, m := range series[:firstCondition] {
			ch <- m
		}
	}
	for slot := firstCondition; slot < firstByDriver; slot++ {
		for _, series := range pools {
			ch <- series[slot]
		}
	}
	for start := 0; start < len(pools); {
		end := start + 1
		for end < len(pools) && snapshots[end].Driver == snapshots[start].Driver {
			end++
		}
		for slot := firstByDriver; slot < seriesPerPool; slot++ {
			for _, series := range pools[start:end] {
				ch <- series[slot]
			}
		}
		start = end
	}
}

// poolSeries returns each pool's series (seriesPerPool of them), in the
// order of snapshots. A pool's series are made once per snapshot, which
// the cache replaces on every change and never alters, so a scrape
// rebuilds only the pools that changed since the last one. Otherwise a
// scrape makes and validates every series of every pool, and that grows
// with the cluster: 26000 series at 2000 nodes, where scheduler_perf
// gathers the registry every second (docs/metrics.md, "Cost of a scrape").
func (c *poolCollector) poolSeries(snapshots []*poolcache.Snapshot) [][]metrics.Metric {
	c.mu.Lock()
	defer c.mu.Unlock()
	made := make(map[*poolcache.Snapshot][]metrics.Metric, len(snapshots))
	out := make([][]metrics.Metric, 0, len(snapshots))
	for _, s := range snapshots {
		series, ok := c.made[s]
		if !ok {
			series = newPoolSeries(s)
		}
		made[s] = series
		out = append(out, series)
	}
	// Pools gone, and snapshots replaced, are forgotten.
	c.made = made
	return out
}

// A pool's series, by slot: the devices by state and the whole devices
// free; from firstCondition on, its conditions; from firstByDriver on,
// its conflicts by kind and devices by health. In each, the family's own
// label values in order.
const (
	firstCondition = 5
	firstByDriver  = 7
	seriesPerPool  = 13
)

// newPoolSeries makes a pool's series, in slot order.
func newPoolSeries(s *poolcache.Snapshot) []metrics.Metric {
	labels := []string{s.Driver, s.Pool, s.NodeName}
	series := make([]metrics.Metric, 0, seriesPerPool)
	gauge := func(desc *metrics.Desc, value float64, label string) {
		series = append(series, metrics.NewLazyConstMetric(desc, metrics.GaugeValue, value, append(labels[:3:3], label)...))
	}
	sum := s.Summary
	gauge(devicesDesc, float64(sum.Allocated), string(drausage.DeviceAllocated))
	gauge(devicesDesc, float64(sum.Available), string(drausage.DeviceAvailable))
	gauge(devicesDesc, float64(sum.PartiallyAllocated), string(drausage.DevicePartiallyAllocated))
	gauge(devicesDesc, float64(sum.Unavailable), string(drausage.DeviceUnavailable))
	series = append(series, metrics.NewLazyConstMetric(wholeFreeDesc, metrics.GaugeValue, float64(s.WholeDevicesFree), labels...))
	// firstCondition
	gauge(conditionDesc, boolValue(s.Complete()), v1alpha1.ConditionComplete)
	gauge(conditionDesc, boolValue(s.Valid()), v1alpha1.ConditionValid)
	// firstByDriver
	conflicts := s.ConflictCounts()
	for _, kind := range []drausage.ConflictKind{drausage.OverAllocatedDevice, drausage.OverConsumedCapacity, drausage.OverConsumedCounter} {
		gauge(conflictsDesc, float64(conflicts[kind]), string(kind))
	}
	var healthy, unhealthy, unknown int
	for _, d := range s.Devices {
		switch d.Health.Status {
		case v1.ResourceHealthStatusHealthy:
			healthy++
		case v1.ResourceHealthStatusUnhealthy:
			unhealthy++
		default:
			unknown++
		}
	}
	gauge(healthDesc, float64(healthy), string(v1.ResourceHealthStatusHealthy))
	gauge(healthDesc, float64(unhealthy), string(v1.ResourceHealthStatusUnhealthy))
	gauge(healthDesc, float64(unknown), string(v1.ResourceHealthStatusUnknown))
	return series
}

// ObservePublished is a poolpublisher.Options.ObservePublished function.
func ObservePublished(delay time.Duration, first bool) {
	if first {
		FirstPublishDelay.WithLabelValues().Observe(delay.Seconds())
		return
	}
	PublishDelay.WithLabelValues().Observe(delay.Seconds())
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
