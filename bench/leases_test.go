package bench

import (
	"strings"

	"github.com/redlimit/redlimit/core"
)

// leaseShare is the share of a key's quota one lease may take.
const leaseShare = 1.0 / 16

// oursLeases takes leases of a hot key's quota (core.WithLeases) and
// spends them in process. Leases apply to window limits only, so its limit
// is a fixed window of the scenario's quota; it runs on the one-key rows.
var oursLeases = ours("ours/leases", "ours-leases", core.FixedWindow, core.WithLeases(leaseShare))

// leaseImpls are the contenders with leases, run on the one-key rows only.
var leaseImpls = []impl{oursLeases}

// leaseLabel is a lease contender's name in the tables.
func leaseLabel(im impl) string {
	return "ours + leases (`WithLeases(1.0/16)`, " + strings.ReplaceAll(core.FixedWindow.String(), "_", " ") + ")"
}

func init() {
	// The net/http app with leases, on the same hot key (every request
	// comes from 127.0.0.1) under a fixed window of httpLimit's quota.
	httpExtraModes = append(httpExtraModes, httpMode{
		name:   "limited-leases",
		label:  "limited, leases (`WithLeases(1.0/16)`, fixed window)",
		client: "http-leases",
		limit:  core.Limit{Algorithm: core.FixedWindow, Rate: httpLimit.Rate, Period: httpLimit.Period},
		opts:   []core.Option{core.WithLeases(leaseShare)},
	})
}
