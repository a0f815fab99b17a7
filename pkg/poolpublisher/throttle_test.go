package poolpublisher

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned/fake"
)

// A write that no turn admitted goes while the budget has a token; after
// that it is refused at once, saying when the next token comes, without
// reaching the apiserver: the pool waits in the queue, not in a worker.
// The fake client only counts requests: no apiserver behaviour is involved.
func TestThrottledWritesWaitForTheBudget(t *testing.T) {
	client := fake.NewSimpleClientset()
	writes := newThrottledWrites(client.DrascopeV1alpha1().ResourcePools(), rate.NewLimiter(1, 1), nil)
	pool := func(name string) *v1alpha1.ResourcePool {
		return &v1alpha1.ResourcePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	if _, err := writes.Create(context.Background(), pool("a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("first write within the budget: %v", err)
	}
	var wait *notYet
	if _, err := writes.Create(context.Background(), pool("b"), metav1.CreateOptions{}); !errors.As(err, &wait) || wait.delay <= 0 || wait.delay > time.Second {
		t.Fatalf("second write in the same second: %v; want it refused until the next token, within a second", err)
	}
	if err := writes.Delete(context.Background(), "a", metav1.DeleteOptions{}); !errors.As(err, &wait) {
		t.Fatalf("delete in the same second: %v; want it refused until the next token", err)
	}
	if n := len(client.Actions()); n != 1 {
		t.Errorf("the apiserver saw %d requests, want only the first create", n)
	}
}

// Writes a turn admitted go at once, those past the budget are counted,
// and any other waits for a token. The fake client only counts requests.
func TestWritesOfATurnDoNotWait(t *testing.T) {
	client := fake.NewSimpleClientset()
	due := 0
	limiter := rate.NewLimiter(1, 1)
	writes := newThrottledWrites(client.DrascopeV1alpha1().ResourcePools(), limiter, func() { due++ })
	// The plan took the only token.
	if !limiter.Allow() {
		t.Fatal("the bucket started empty")
	}
	pool := func(name string) *v1alpha1.ResourcePool {
		return &v1alpha1.ResourcePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	// The bucket is empty: an unadmitted write would wait about 1s, which
	// the deadline does not allow; admitted ones go at once.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := writes.Create(withTurn(ctx, withinBudget), pool("a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("write within an admitted turn: %v", err)
	}
	if _, err := writes.Create(withTurn(ctx, pastBudget), pool("b"), metav1.CreateOptions{}); err != nil {
		t.Errorf("write of a due change: %v", err)
	}
	if _, err := writes.Create(ctx, pool("c"), metav1.CreateOptions{}); err == nil {
		t.Error("an unadmitted write went ahead of the budget")
	}
	if due != 1 {
		t.Errorf("%d writes counted past the budget, want 1", due)
	}
	if n := len(client.Actions()); n != 2 {
		t.Errorf("the apiserver saw %d requests, want the creates of a and b", n)
	}
}
