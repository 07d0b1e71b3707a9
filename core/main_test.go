package core

import (
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestMain says which real-Redis tests were skipped, without -v. The
// suites test what Redis decides and how its errors travel: they run
// without the default local fallback, which its own tests turn on
// (TestDefaultFallback*).
func TestMain(m *testing.M) {
	defaultFallback = nil
	redistest.Main(m)
}
