package auth

import (
	"strings"
	"testing"
)

func TestClientTopics(t *testing.T) {
	t.Parallel()
	c := &Client{ID: "shop", Topics: []string{"shop.*", "orders"}}
	for topic, want := range map[string]bool{"shop.events": true, "orders": true, "orders.x": false, "payments.events": false} {
		if got := c.AllowTopic(topic); got != want {
			t.Errorf("AllowTopic(%q) = %v, want %v", topic, got, want)
		}
	}
	if !(&Client{ID: "any"}).AllowTopic("x") {
		t.Error("a client without topics may not write x")
	}
	h := strings.Repeat("a", 64)
	err := ValidateClients([]Client{{ID: "shop", SecretSHA256: h, Topics: []string{"[shop"}}})
	if err == nil || !strings.Contains(err.Error(), `"[shop" is not a glob`) {
		t.Errorf("a bad glob in topics: %v", err)
	}
}
