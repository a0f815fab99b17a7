package poolpublisher

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned/fake"
)

// A write beyond the budget waits for a token; one that could not get it
// before its deadline fails without reaching the apiserver. The fake client
// only counts requests: no apiserver behaviour is involved.
func TestThrottledWritesWaitForTheBudget(t *testing.T) {
	client := fake.NewSimpleClientset()
	writes := newThrottledWrites(client.DrascopeV1alpha1().ResourcePools(), 1, nil)
	pool := func(name string) *v1alpha1.ResourcePool {
		return &v1alpha1.ResourcePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	if _, err := writes.Create(context.Background(), pool("a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("first write within the budget: %v", err)
	}
	// The next token comes in a second; a deadline far shorter than that
	// cannot be met, which rate.Limiter reports at once.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := writes.Create(ctx, pool("b"), metav1.CreateOptions{}); err == nil {
		t.Fatal("second write in the same second went through; want it held back")
	}
	if err := writes.Delete(ctx, "a", metav1.DeleteOptions{}); err == nil {
		t.Fatal("delete in the same second went through; want it held back")
	}
	if n := len(client.Actions()); n != 1 {
		t.Errorf("the apiserver saw %d requests, want only the first create", n)
	}
}

// A write whose change is due goes ahead of the budget, without taking a
// token from pools still fresh; one not yet due waits for its token.
func TestDueWritesGoAheadOfTheBudget(t *testing.T) {
	client := fake.NewSimpleClientset()
	due := 0
	writes := newThrottledWrites(client.DrascopeV1alpha1().ResourcePools(), 1, func() { due++ })
	pool := func(name string) *v1alpha1.ResourcePool {
		return &v1alpha1.ResourcePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	if _, err := writes.Create(context.Background(), pool("a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("first write within the budget: %v", err)
	}
	// The next token comes in a second. A write already due goes at once;
	// the context's deadline, far shorter than a second, catches one that
	// waits for the token instead.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for _, name := range []string{"b", "c"} {
		if _, err := writes.Create(withDue(ctx, time.Now()), pool(name), metav1.CreateOptions{}); err != nil {
			t.Fatalf("write of due pool %s: %v", name, err)
		}
	}
	if due != 2 {
		t.Errorf("%d writes counted as due, want 2", due)
	}
	// Due in an hour: it waits for the token like any other, which the
	// deadline does not allow.
	if _, err := writes.Create(withDue(ctx, time.Now().Add(time.Hour)), pool("d"), metav1.CreateOptions{}); err == nil {
		t.Fatal("a write due in an hour went ahead of the budget")
	}
	if n := len(client.Actions()); n != 3 {
		t.Errorf("the apiserver saw %d requests, want the three creates of a, b and c", n)
	}
}
