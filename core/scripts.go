package core

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts' header comments document their state, ARGV and reply.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/driver.lua
	driverLua string
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
	//go:embed scripts/concurrency.lua
	concurrencyLua string
)

// The same Lua reaches Redis in two forms. Where the server has Redis 7
// functions, the Limiter loads the whole library once (FUNCTION LOAD) and
// each decision is one FCALL: every function the library defines exists
// once, in the server. Elsewhere (miniredis, older or restricted Redis),
// each decision is an EVALSHA of a script holding only the algorithm it
// needs, which defines its functions again on every call. Both run the
// same driver on the same state, so they decide alike.
var (
	// libraryName names the library, with a hash of the code, so that
	// instances running different versions of redlimit on one Redis (a
	// rolling deploy) each call their own. Its function libraryName decides
	// any call (run in driver.lua); libraryName+"_1" one request on one
	// state under one Limit, with fewer arguments (one).
	libraryName, librarySource = buildLibrary()
	// evalScripts[script] holds the algorithm of that script index alone;
	// evalScripts[0] holds every algorithm, for layers of several.
	// evalOne[script] is the one-request form of evalScripts[script].
	evalScripts, evalOne = buildEvalScripts()
)

// sources are the algorithms' files, each once.
func sources() []string {
	var out []string
	for _, a := range rows() {
		if !strings.Contains(strings.Join(out, ""), a.source) {
			out = append(out, a.source)
		}
	}
	return out
}

// body is the prelude, the given algorithms' files (each in a block of its
// own, so their locals do not collide) and the driver.
func body(srcs ...string) string {
	var b strings.Builder
	b.WriteString(preludeLua)
	for _, s := range srcs {
		b.WriteString("do\n")
		b.WriteString(s)
		b.WriteString("\nend\n")
	}
	b.WriteString(driverLua)
	return b.String()
}

func buildLibrary() (name, src string) {
	code := body(sources()...)
	sum := sha256.Sum256([]byte(code))
	name = "redlimit_" + hex.EncodeToString(sum[:6])
	return name, "#!lua name=" + name + "\n" + code +
		"redis.register_function('" + name + "', run)\n" +
		"redis.register_function('" + name + "_1', one)\n"
}

// evalScript is a script with its source, for the calls that send EVAL
// themselves (see call's once).
type evalScript struct {
	*redis.Script
	src string
}

func newEvalScript(src string) *evalScript { return &evalScript{redis.NewScript(src), src} }

func buildEvalScripts() (all, one [8]*evalScript) {
	all[0] = newEvalScript(body(sources()...) + "return run(KEYS, ARGV)\n")
	for _, a := range rows() {
		all[a.script] = newEvalScript(body(a.source) + "return run(KEYS, ARGV)\n")
		one[a.script] = newEvalScript(body(a.source) + "return one(KEYS, ARGV)\n")
	}
	return all, one
}

// Modes of a request, as the prelude names them.
const (
	modeConsume = 0
	modePeek    = 1
	modeAtMost  = 2
	modeRefund  = 3
	modeCharge  = 4
	modeRenew   = 5
)
