package exampleapp

import (
	"context"
	"testing"
	"time"
)

func TestUnits(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "150": 150, "1000000": 1000000, "007": 7} {
		if got, err := Units(in); err != nil || got != want {
			t.Errorf("Units(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "1000001", "-1", "+5", "1.5", "x", " 1", "99999999999"} {
		if got, err := Units(in); err == nil {
			t.Errorf("Units(%q) = %d, want an error", in, got)
		}
	}
}

func TestSlow(t *testing.T) {
	for _, in := range []string{"-1", "+5", "x", "1.5", "10001", " 1", "99999999999"} {
		if err := Slow(context.Background(), in); err == nil {
			t.Errorf("Slow(%q): no error", in)
		}
	}
	begin := time.Now()
	if err := Slow(context.Background(), "30"); err != nil || time.Since(begin) < 30*time.Millisecond {
		t.Errorf("Slow(30): %v after %v, want nil after 30ms or more", err, time.Since(begin))
	}
	// A context that ends ends the sleep: the client left.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	begin = time.Now()
	if err := Slow(ctx, "10000"); err != nil || time.Since(begin) > 5*time.Second {
		t.Errorf("Slow(10000) with a canceled context: %v after %v, want nil at once", err, time.Since(begin))
	}
	if err := Slow(ctx, ""); err != nil {
		t.Errorf("Slow(\"\"): %v, want the default", err)
	}
}
