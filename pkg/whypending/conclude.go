package whypending

import (
	"fmt"
	"slices"
	"strings"
)

// conclude is the report's one line a person can act on: the first thing,
// in the order the scheduler meets them, that keeps the pod from its
// devices.
func conclude(r *Report, requests []*request, claims []PodClaim, classesHidden bool) string {
	for _, c := range r.Claims {
		switch {
		case c.Hidden:
			return fmt.Sprintf("claim %s of the pod may not be read: ask for get on resourceclaims in namespace %s", c.Name, strings.Split(r.Pod, "/")[0])
		case c.Missing && c.ResourceClaim != "":
			return fmt.Sprintf("claim %s of the pod (ResourceClaim %s) does not exist: the scheduler waits for it to be created", c.Name, c.ResourceClaim)
		case c.Missing:
			return fmt.Sprintf("claim %s of the pod is made from a template and not created yet: the resourceclaim controller creates it", c.Name)
		}
	}
	if r.AdminAccessRefused != "" {
		return r.AdminAccessRefused
	}
	if len(claims) == 0 {
		return "the pod has no ResourceClaims: DRA does not keep it pending (a DRA extended resource, if it asks for one, is not covered here)"
	}
	if r.Fit == nil && slices.ContainsFunc(claims, func(pc PodClaim) bool { return pc.Claim != nil && pc.Claim.Status.Allocation == nil }) {
		return "the devices cannot be counted: listing ResourceSlices is not permitted"
	}
	if r.Fit == nil {
		if r.Node != "" {
			return fmt.Sprintf("every claim of the pod is allocated and the pod is bound to node %s", r.Node)
		}
		return "every claim of the pod is allocated: its devices do not keep it pending; the scheduler's message says what does"
	}
	if classesHidden && len(requests) > 0 {
		return "the requests cannot be matched to devices: listing DeviceClasses is not permitted"
	}
	for _, req := range requests {
		for _, a := range req.alts {
			if a.report.Verdict.ClassMissing {
				return fmt.Sprintf("claim %s, request %s: device class %s does not exist", req.claim, a.report.Name, a.report.DeviceClass)
			}
		}
	}
	if r.Fit.Count > 0 {
		more := ""
		if r.Fit.Count > 1 {
			more = fmt.Sprintf(" and %d more", r.Fit.Count-1)
		}
		return fmt.Sprintf("the pod's devices fit on node %s%s: if it is still pending, something besides its devices keeps it there (the scheduler's message says what), or the devices were taken since", r.Fit.Nodes[0], more)
	}
	if r.Fit.ConstraintsFail {
		return "every request has enough free devices on some node, but no node asked has devices that meet the claims' constraints together (see Constraints)"
	}
	switch {
	case r.Fit.TimedOut:
		return fmt.Sprintf("no node checked so far fits the pod's devices, and the check stopped after %d nodes (%d left): try a longer --timeout", r.Fit.Tried, r.Fit.Untried)
	case r.Fit.RunsExhausted:
		return fmt.Sprintf("none of the first %d nodes with enough free devices for each request fits the pod's devices (%d more were not asked)", r.Fit.Tried, r.Fit.Untried)
	}
	for _, req := range requests {
		if a := unmetEverywhere(req); a != nil {
			return requestConclusion(req, a)
		}
	}
	if r.Fit.Tried > 0 {
		return fmt.Sprintf("%s enough free devices for each request, but upstream's allocator places the claims on none of them (shared counters or capacity between requests)", nodesHave(r.Fit.Tried))
	}
	closest := ""
	if len(r.Closest) > 0 {
		closest = fmt.Sprintf(": closest is node %s (%s)", r.Closest[0].Node, strings.Join(r.Closest[0].Lacks, "; "))
	}
	return "no node has free devices for every request at once" + closest
}

// unmetEverywhere returns the request's first alternative when no node has
// enough free devices for any alternative, else nil.
func unmetEverywhere(req *request) *alternative {
	for _, a := range req.alts {
		if a.report.Verdict.NodesWithEnough > 0 {
			return nil
		}
	}
	return req.alts[0]
}

// requestConclusion says why no node meets a request.
func requestConclusion(req *request, a *alternative) string {
	v := a.report.Verdict
	what := fmt.Sprintf("%d × %s", a.need, a.report.DeviceClass)
	if a.allMode {
		what = "all " + a.report.DeviceClass + " devices"
	}
	alternatives := ""
	if len(req.alts) > 1 {
		alternatives = fmt.Sprintf(" (nor any of its %d alternatives)", len(req.alts))
	}
	prefix := fmt.Sprintf("claim %s, request %s%s needs %s on one node", req.claim, a.report.Name, alternatives, what)
	if v.NodesWithMatching == 0 {
		return prefix + ": no node has a matching device (check the device class and the request's selectors)"
	}
	held := joinNonZero(v.Devices.Allocated, "allocated", v.Devices.Tainted, "tainted", v.Devices.Unhealthy, "Unhealthy", v.Devices.CountersExhausted, "short of shared counters", v.Devices.CapacityExhausted, "short of capacity")
	if len(v.Taints) > 0 {
		held += " (" + strings.Join(v.Taints, ", ") + ")"
	}
	s := fmt.Sprintf("%s; %s matching devices, ", prefix, nodesHave(v.NodesWithMatching))
	if v.MostFree == 0 {
		s += "none has one free"
	} else {
		s += fmt.Sprintf("at most %d free (on %s)", v.MostFree, Nodes(v.NodesWithMostFree))
	}
	if held != "" {
		s += fmt.Sprintf("; of %d matching devices %s", v.Devices.Matching, held)
	}
	if v.Devices.HeldByLowerPriority > 0 {
		s += fmt.Sprintf("; %d are held by pods of lower priority, which preemption may take", v.Devices.HeldByLowerPriority)
	}
	return s
}

// Nodes is "1 node" or "N nodes".
func Nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// nodesHave is "1 node has" or "N nodes have".
func nodesHave(n int) string {
	if n == 1 {
		return "1 node has"
	}
	return fmt.Sprintf("%d nodes have", n)
}
