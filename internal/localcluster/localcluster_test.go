package localcluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// readyzServer answers /readyz with handler, and returns a client for it and
// a running "apiserver" whose log holds a known last line.
func readyzServer(t *testing.T, handler http.HandlerFunc) (kubernetes.Interface, *Process) {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "kube-apiserver.log")
	if err := os.WriteFile(log, []byte("first line\nE1128 storage is slow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return client, &Process{Name: "kube-apiserver", Log: log, done: make(chan struct{})}
}

// A server that stays unready: the error names the failing check and
// quotes the log, which the sandbox removes when it exits.
func TestWaitReadySaysWhatWasNotReady(t *testing.T) {
	client, apiserver := readyzServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("verbose") == "" {
			t.Errorf("the request lacks verbose: %s", r.URL)
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("[+]ping ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n"))
	})
	err := waitReady(context.Background(), client, apiserver, time.Second)
	if err == nil {
		t.Fatal("an unready server was taken as ready")
	}
	for _, want := range []string{"not ready within 1s", "HTTP 500: [-]poststarthook/rbac/bootstrap-roles failed", apiserver.Log, "E1128 storage is slow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
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
	if err := waitReady(context.Background(), client, apiserver, 5*time.Second); err != nil {
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
	err := waitReady(context.Background(), client, apiserver, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "E1128 storage is slow") {
		t.Fatalf("want the exit with the log's tail, got %v", err)
	}
}
