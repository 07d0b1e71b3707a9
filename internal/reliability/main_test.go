package reliability

import (
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestMain runs the suite under CI or with REDIS_URL, and says so otherwise.
func TestMain(m *testing.M) { redistest.MainLong(m) }
