package grpclimit

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/redlimittest"
)

// TestCheckRefusalFieldsAreTrailers: an in-handler Check that refuses
// writes its fields and notes the refusal in one critical section, so a
// SendMsg of another goroutine of the handler (send) either goes before
// (the headers carry nothing of the refusal) or after (the fields stay
// for the trailers): never the refusal's fields as headers. The sender
// spins until the fields hold something, then sends at once; when Check
// took the lock once a field, it sent the refusal's fields as headers in
// most of these rounds.
func TestCheckRefusalFieldsAreTrailers(t *testing.T) {
	rd := redlimittest.Start(t)
	p, err := httplimit.New(httplimit.Config{Limiter: rd.NewLimiter(), Limit: core.Limit{Rate: 1, Period: time.Hour},
		Headers: httplimit.Headers{httplimit.XRateLimit{}, httplimit.IETF{}}})
	if err != nil {
		t.Fatal(err)
	}
	base := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 443}})
	if err := Check(base, p, 1); err != nil {
		t.Fatalf("the one unit: %v", err)
	}
	for round := range 200 {
		var headers atomic.Int64
		out := sink{
			setHeader:  func(metadata.MD) error { headers.Add(1); return nil },
			setTrailer: func(metadata.MD) {},
		}
		f, ctx, _ := fieldsOf(base, out)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				f.mu.Lock()
				dirty := f.dirty
				f.mu.Unlock()
				if dirty {
					f.send()
					return
				}
			}
		}()
		err := Check(ctx, p, 1)
		<-done
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("round %d: %v, want ResourceExhausted", round, err)
		}
		if n := headers.Load(); n != 0 {
			t.Fatalf("round %d: a refusal's fields went out as headers (%d SetHeader), want them kept for the trailers", round, n)
		}
	}
}
