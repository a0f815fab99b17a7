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
	writes := newThrottledWrites(client.DrascopeV1alpha1().ResourcePools(), 1)
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
