package core

import (
	"context"
	"testing"
	"time"
)

// TestRowFactsMatchTheScripts: the facts of each row of algorithms that the
// code outside the scripts acts on agree with what the script does, for
// every Algorithm, so a new one whose row says otherwise fails here. A
// queueing algorithm admits a request behind another with a Delay (WaitN
// then measures its deadline against the queue); a burst one holds Burst
// units, not Rate.
// Guards: "a new algorithm is a script and a row" (algorithm's doc), for
// the queues and burst facts; fails if LeakyBucket's row loses queues.
func TestRowFactsMatchTheScripts(t *testing.T) {
	ctx := context.Background()
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			_, _, l := miniLimiter(t)
			lim := Limit{Algorithm: a, Rate: 2, Period: time.Second, Burst: 3}
			var delayed, third bool
			for i := range 3 {
				r, err := l.Allow(ctx, 1, lim.For("k"))
				switch {
				case err != nil:
					t.Fatalf("request %d: %v", i+1, err)
				case i < 2 && !r.Allowed:
					t.Fatalf("request %d: %+v; want admitted", i+1, r)
				case i == 1:
					delayed = r.Delay > 0
				case i == 2:
					third = r.Allowed
				}
			}
			if got := lim.queues(); got != delayed {
				t.Errorf("the row says queues %v; the script delayed the second request: %v", got, delayed)
			}
			if got := algorithms[a].burst; got != third {
				t.Errorf("the row says burst %v; the script admitted a third request of Rate 2, Burst 3: %v", got, third)
			}
		})
	}
}
