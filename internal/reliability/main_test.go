package reliability

import (
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The suffixes of the Redis keys core writes for one state of each
// algorithm, for the tests that read Redis directly: the digit is the key
// format of core's scripts, so they change with it (a stale name reads as
// an empty window: ZCARD 0, EXISTS 0).
const (
	swKey  = ":sw3"  // SlidingWindow's log
	swmKey = ":sw3m" // SlidingWindow's second key
	tbKey  = ":tb4"  // TokenBucket
	fwKey  = ":fw4"  // FixedWindow
)

// TestMain runs the suite under CI or with REDIS_URL, and says so otherwise.
func TestMain(m *testing.M) { redistest.MainLong(m) }
