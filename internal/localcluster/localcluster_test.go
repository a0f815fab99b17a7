package localcluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
)

// readyzServer answers /readyz with handler, and returns a client for it and
// a running "apiserver" whose log holds a known last line.
func readyzServer(t *testing.T, handler http.HandlerFunc) (rest.Interface, *Process) {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	client, err := readyzClient(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "kube-apiserver.log")
	if err := os.WriteFile(log, []byte("first line\nE1128 storage is slow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return client, &Process{Name: "kube-apiserver", Log: log, done: make(chan struct{})}
}

// pollingClock is a fake clock that moves on by one polling interval
// whenever waitReady waits for the next request, so that a wait of timeout
// takes timeout/readyzInterval answers however fast or slow the machine is.
func pollingClock(t *testing.T) *testingclock.FakeClock {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			if clk.HasWaiters() {
				clk.Step(readyzInterval)
			}
			runtime.Gosched()
		}
	}()
	return clk
}

// A server that stays unready: the error names the failing check and
// quotes the log, which the sandbox removes when it exits. The wait is
// counted in answers (a fake clock), so the test does not race the machine.
func TestWaitReadySaysWhatWasNotReady(t *testing.T) {
	var requests atomic.Int32
	client, apiserver := readyzServer(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Query().Get("verbose") == "" {
			t.Errorf("the request lacks verbose: %s", r.URL)
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("[+]ping ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n"))
	})
	err := waitReady(context.Background(), client, apiserver, time.Second, pollingClock(t))
	if err == nil {
		t.Fatal("an unready server was taken as ready")
	}
	for _, want := range []string{"not ready within 1s", "HTTP 500: [-]poststarthook/rbac/bootstrap-roles failed", apiserver.Log, "E1128 storage is slow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if want := int32(time.Second/readyzInterval) + 1; requests.Load() != want {
		t.Errorf("asked %d times in a wait of 1s every %s; want %d", requests.Load(), readyzInterval, want)
	}
}

// An answer outlives later failures: when the server answered once and then
// stopped answering, the error still quotes the answer, not the client's
// error.
func TestWaitReadyKeepsTheLastAnswer(t *testing.T) {
	defer func(old time.Duration) { readyzRequestTimeout = old }(readyzRequestTimeout)
	readyzRequestTimeout = 50 * time.Millisecond
	var requests atomic.Int32
	client, apiserver := readyzServer(t, func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) > 1 {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("[-]etcd failed: reason withheld\n"))
	})
	err := waitReady(context.Background(), client, apiserver, time.Second, pollingClock(t))
	if err == nil || !strings.Contains(err.Error(), "last /readyz: HTTP 500: [-]etcd failed") {
		t.Fatalf("want the server's last answer, got %v", err)
	}
}

// A request the server accepts and never answers ends at its own
// deadline, and the next one finds the server ready.
func TestWaitReadyOutlivesAHungRequest(t *testing.T) {
	defer func(old time.Duration) { readyzRequestTimeout = old }(readyzRequestTimeout)
	readyzRequestTimeout = 200 * time.Millisecond
	var requests atomic.Int32
	client, apiserver := readyzServer(t, func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	if err := waitReady(context.Background(), client, apiserver, time.Minute, pollingClock(t)); err != nil {
		t.Fatalf("after a hung request: %v", err)
	}
	if requests.Load() < 2 {
		t.Fatalf("ready after %d requests; the first one should have hung", requests.Load())
	}
}

// A server that exits is reported at once, with its log.
func TestWaitReadyReportsAnExit(t *testing.T) {
	client, apiserver := readyzServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	close(apiserver.done)
	err := waitReady(context.Background(), client, apiserver, time.Minute, pollingClock(t))
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "E1128 storage is slow") {
		t.Fatalf("want the exit with the log's tail, got %v", err)
	}
}

// Ports below the ephemeral range, once each: no outgoing connection can
// take one between FreePort and the server's bind.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < firstPort || port >= low {
			t.Errorf("port %d, want one in [%d, %d)", port, firstPort, low)
		}
		if seen[port] {
			t.Errorf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
