package reliability

import (
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestMain says which real-Redis tests were skipped, without -v.
func TestMain(m *testing.M) { redistest.Main(m) }
