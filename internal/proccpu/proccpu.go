// Package proccpu reads processes' CPU time from /proc, for the perf
// harness: scheduler_perf runs kube-apiserver, the controllers and the
// scheduler in the harness's own process and etcd in a child process (its
// shared etcd). Go's CPU profile sees only the first; on a machine of two
// cores the second takes its share of the same cores, so a cost that lands
// in etcd (every write is a commit, a WAL write and a watch event) slows
// the measured process without showing in its profile.
package proccpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// Seconds returns the user and system CPU time of process pid, in
// seconds.
func Seconds(pid int) (float64, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	fields, err := statFields(stat)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	// Fields 14 and 15 (utime, stime), counted from 1 with pid first.
	utime, err := strconv.ParseUint(fields[13], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat utime: %w", pid, err)
	}
	stime, err := strconv.ParseUint(fields[14], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat stime: %w", pid, err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// statFields splits a /proc/<pid>/stat line into its fields; the second,
// the command in parentheses, may hold spaces and parentheses itself, so
// it is taken up to the last ')'.
func statFields(stat []byte) ([]string, error) {
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return nil, fmt.Errorf("no command in %q", stat)
	}
	fields := []string{strings.TrimSpace(string(stat[:open])), string(stat[open+1 : end])}
	fields = append(fields, strings.Fields(string(stat[end+1:]))...)
	if len(fields) < 15 {
		return nil, fmt.Errorf("%d fields, want at least 15", len(fields))
	}
	return fields, nil
}

// Child returns the pid of a child of this process whose command is
// command (as /proc/<pid>/stat gives it: at most 15 bytes), 0 when there is
// none.
func Child(command string) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	self := strconv.Itoa(os.Getpid())
	for _, path := range stats {
		stat, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		fields, err := statFields(stat)
		if err != nil || fields[1] != command || fields[3] != self {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err == nil {
			return pid
		}
	}
	return 0
}
