package core

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts' header comments document their state, ARGV and reply.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/batch.lua
	batchLua string
	//go:embed scripts/layers.lua
	layersLua string
	//go:embed scripts/token_bucket.lua
	tokenBucketLua string
	//go:embed scripts/sliding_window.lua
	slidingWindowLua string
	//go:embed scripts/sliding_window_counter.lua
	slidingWindowCounterLua string
	//go:embed scripts/fixed_window.lua
	fixedWindowLua string
	//go:embed scripts/leaky_bucket.lua
	leakyBucketLua string
)

// batchScripts[a] decides requests under Algorithm a: the prelude, the
// algorithm's own script, then the batch driver. redis.Script runs EVALSHA
// and falls back to EVAL on NOSCRIPT (after a SCRIPT FLUSH or a failover),
// so each SHA is computed once, here.
var batchScripts = func() (s [len(algorithms)]*redis.Script) {
	for a := range algorithms {
		s[a] = redis.NewScript(preludeLua + "do\n" + algorithms[a].source + "\nend\nlocal A = algorithms[" +
			strconv.Itoa(a+1) + "]\n" + batchLua)
	}
	return s
}()

// layersScript decides one request against several Limits of one caller,
// atomically: the prelude, every algorithm's script, then the layers
// driver, so each algorithm's arithmetic is written once.
var layersScript = func() *redis.Script {
	var b strings.Builder
	b.WriteString(preludeLua)
	for a := range algorithms {
		b.WriteString("do\n" + algorithms[a].source + "\nend\n")
	}
	b.WriteString(layersLua)
	return redis.NewScript(b.String())
}()

// Modes of a request, as the prelude names them.
const (
	modeConsume = 0
	modePeek    = 1
	modeAtMost  = 2
	modeRefund  = 3
)
