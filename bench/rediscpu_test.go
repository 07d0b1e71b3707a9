package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis server's CPU is read from INFO: used_cpu_user + used_cpu_sys,
// the whole redis-server process (getrusage), in seconds with µs digits.
// total_net_input_bytes, read with it, tells whether anyone else used the
// server during a window: every client of this process counts the bytes it
// writes (countingConn), so Redis reading more than that means another
// client sent commands. (total_commands_processed cannot tell: it counts
// the commands a script runs as well.)

// sentBytes is what every Redis client of this process has written.
var sentBytes atomic.Int64

// countingConn counts the bytes written to Redis. It is a syscall.Conn
// like the *net.TCPConn it wraps, so that go-redis still runs its health
// check on it.
type countingConn struct{ net.Conn }

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	sentBytes.Add(int64(n))
	return n, err
}

func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("bench: not a syscall.Conn")
	}
	return sc.SyscallConn()
}

// countWrites makes the clients of opt count what they write.
func countWrites(opt *redis.Options) {
	dial := redis.NewDialer(opt)
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{c}, nil
	}
}

// redisSample is one INFO reading, and what this process had sent by then.
type redisSample struct {
	cpu     time.Duration // used_cpu_user + used_cpu_sys
	netIn   int64         // total_net_input_bytes
	sent    int64         // sentBytes
	scripts scriptStats   // INFO commandstats, the script commands
}

// scriptStats sums INFO commandstats over the commands that run a script
// or a function: calls and usec (time spent executing them, the commands
// the script runs included) of fcall, fcall_ro, evalsha, evalsha_ro, eval
// and eval_ro; and the calls of each form.
type scriptStats struct {
	calls, usec          int64
	fcall, evalsha, eval int64 // calls, _ro variants included
}

func (a scriptStats) minus(b scriptStats) scriptStats {
	return scriptStats{a.calls - b.calls, a.usec - b.usec, a.fcall - b.fcall, a.evalsha - b.evalsha, a.eval - b.eval}
}

// usecPerCall is commandstats' usec_per_call over the calls counted.
func (a scriptStats) usecPerCall() float64 {
	if a.calls <= 0 {
		return math.NaN()
	}
	return float64(a.usec) / float64(a.calls)
}

// form names the script commands called: "FCALL", "EVALSHA", "EVAL", or
// several joined by "+"; "none" when there were none.
func (a scriptStats) form() string {
	var f []string
	for _, c := range []struct {
		name  string
		calls int64
	}{{"FCALL", a.fcall}, {"EVALSHA", a.evalsha}, {"EVAL", a.eval}} {
		if c.calls > 0 {
			f = append(f, c.name)
		}
	}
	if len(f) == 0 {
		return "none"
	}
	return strings.Join(f, "+")
}

// redisDelta is what the server did between two readings.
type redisDelta struct {
	cpu time.Duration
	// netIn is what the server read from all its clients; sent, what this
	// process wrote to it (the closing INFO command included on both
	// sides).
	netIn, sent int64
	// scripts is what INFO commandstats counted of script calls, from
	// every client (diffed: the bench never resets the server's stats).
	scripts scriptStats
}

// foreign is how many bytes the server read from other clients; extra is
// what is known to come from elsewhere (redis-benchmark).
func (d redisDelta) foreign(extra int64) int64 { return max(d.netIn-d.sent-extra, 0) }

// disturbed reports foreign bytes beyond a trace: more than 1 KiB and more
// than 1% of ours.
func (d redisDelta) disturbed(extra int64) bool {
	f := d.foreign(extra)
	return f > 1024 && f*100 > d.sent+extra
}

var (
	infoOnce sync.Once
	infoRDB  *redis.Client
	infoErr  error
	// infoAll: the server refused INFO with two sections (before Redis
	// 7.0): read the default sections instead.
	infoAll atomic.Bool
)

// infoClient is a client of its own for the readings, so that their INFO
// commands never count as a contender's.
func infoClient() (*redis.Client, error) {
	infoOnce.Do(func() {
		opt, err := redis.ParseURL(redisURL())
		if err != nil {
			infoErr = err
			return
		}
		opt.PoolSize = 2
		countWrites(opt)
		infoRDB = redis.NewClient(opt)
	})
	return infoRDB, infoErr
}

func closeInfoClient() {
	if infoRDB != nil {
		_ = infoRDB.Close()
	}
}

// sampleRedis reads the server's CPU and command count.
func sampleRedis() (redisSample, error) {
	rdb, err := infoClient()
	if err != nil {
		return redisSample{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var text string
	if !infoAll.Load() {
		text, err = rdb.Info(ctx, "cpu", "stats", "commandstats").Result()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			infoAll.Store(true)
		}
	}
	if infoAll.Load() {
		text, err = rdb.Info(ctx, "all").Result()
	}
	if err != nil {
		return redisSample{}, fmt.Errorf("INFO: %w", err)
	}
	s, err := parseInfo(text)
	s.sent = sentBytes.Load()
	return s, err
}

// parseInfo reads used_cpu_user, used_cpu_sys and total_net_input_bytes
// from INFO's text, and the script commands' commandstats
// ("cmdstat_fcall:calls=3,usec=30,usec_per_call=10.00,...").
func parseInfo(text string) (redisSample, error) {
	var (
		s         redisSample
		user, sys = math.NaN(), math.NaN()
		haveIn    bool
	)
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "used_cpu_user":
			user, err = strconv.ParseFloat(v, 64)
		case "used_cpu_sys":
			sys, err = strconv.ParseFloat(v, 64)
		case "total_net_input_bytes":
			s.netIn, err = strconv.ParseInt(v, 10, 64)
			haveIn = err == nil
		case "cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_evalsha_ro", "cmdstat_eval", "cmdstat_eval_ro":
			var calls, usec int64
			calls, usec, err = parseCmdstat(v)
			s.scripts.calls += calls
			s.scripts.usec += usec
			switch strings.TrimSuffix(strings.TrimPrefix(k, "cmdstat_"), "_ro") {
			case "fcall":
				s.scripts.fcall += calls
			case "evalsha":
				s.scripts.evalsha += calls
			default:
				s.scripts.eval += calls
			}
		}
		if err != nil {
			return redisSample{}, fmt.Errorf("INFO %s: %w", k, err)
		}
	}
	if math.IsNaN(user) || math.IsNaN(sys) || !haveIn {
		return redisSample{}, errors.New("INFO: no used_cpu_user, used_cpu_sys or total_net_input_bytes")
	}
	s.cpu = time.Duration(math.Round((user + sys) * 1e9))
	return s, nil
}

// parseCmdstat reads calls and usec from a commandstats value.
func parseCmdstat(v string) (calls, usec int64, err error) {
	var haveCalls, haveUsec bool
	for _, f := range strings.Split(v, ",") {
		name, val, _ := strings.Cut(f, "=")
		switch name {
		case "calls":
			calls, err = strconv.ParseInt(val, 10, 64)
			haveCalls = err == nil
		case "usec":
			usec, err = strconv.ParseInt(val, 10, 64)
			haveUsec = err == nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if !haveCalls || !haveUsec {
		return 0, 0, fmt.Errorf("no calls or usec in %q", v)
	}
	return calls, usec, nil
}

// redisWindow takes the opening reading of a window; the function it
// returns takes the closing one and returns what the server did in
// between.
func redisWindow() func() (redisDelta, error) {
	before, err := sampleRedis()
	return func() (redisDelta, error) {
		if err != nil {
			return redisDelta{}, err
		}
		after, err := sampleRedis()
		if err != nil {
			return redisDelta{}, err
		}
		return redisDelta{cpu: after.cpu - before.cpu, netIn: after.netIn - before.netIn, sent: after.sent - before.sent,
			scripts: after.scripts.minus(before.scripts)}, nil
	}
}

// redisIdle is cpu, the server's CPU time per second of wall time while
// this process sends it nothing (its timers, and anyone else's traffic),
// over d, and the bytes other clients sent it meanwhile.
func redisIdle(d time.Duration) (cpu time.Duration, foreign int64, err error) {
	win := redisWindow()
	t0 := time.Now()
	time.Sleep(d)
	rd, err := win()
	if err != nil {
		return 0, 0, err
	}
	return time.Duration(float64(rd.cpu) / time.Since(t0).Seconds()), rd.foreign(0), nil
}

func TestParseInfo(t *testing.T) {
	text := "# CPU\r\nused_cpu_sys:37.219765\r\nused_cpu_user:238.916365\r\nused_cpu_sys_children:0.000000\r\n" +
		"used_cpu_user_main_thread:238.908160\r\n\r\n# Stats\r\ntotal_commands_processed:1762855\r\ntotal_net_input_bytes:132821704\r\n" +
		"\r\n# Commandstats\r\ncmdstat_get:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall:calls=300,usec=3000,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_evalsha:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=1,usec=100,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n"
	s, err := parseInfo(text)
	if err != nil {
		t.Fatal(err)
	}
	if want := 276136130 * time.Microsecond; s.cpu != want || s.netIn != 132821704 {
		t.Errorf("parseInfo = %v, %d; want %v, 132821704", s.cpu, s.netIn, want)
	}
	if want := (scriptStats{calls: 401, usec: 4000, fcall: 300, evalsha: 100, eval: 1}); s.scripts != want {
		t.Errorf("parseInfo scripts = %+v, want %+v", s.scripts, want)
	}
	if f := s.scripts.form(); f != "FCALL+EVALSHA+EVAL" {
		t.Errorf("form = %q", f)
	}
	if _, _, err := parseCmdstat("calls=1"); err == nil {
		t.Error("parseCmdstat without usec: no error")
	}
	if _, err := parseInfo("# CPU\r\nused_cpu_sys:1.0\r\n"); err == nil {
		t.Error("parseInfo without used_cpu_user: no error")
	}
	d := redisDelta{cpu: time.Second, netIn: 100_000 + 500, sent: 100_000}
	if f := d.foreign(0); f != 500 || d.disturbed(0) {
		t.Errorf("foreign = %d, disturbed = %v; want 500, false", f, d.disturbed(0))
	}
	d.netIn = 100_000 + 5000
	if !d.disturbed(0) {
		t.Error("5000 foreign bytes in 100000: not disturbed")
	}
	if d.disturbed(5000) {
		t.Error("5000 foreign bytes, all expected: disturbed")
	}
	st := stats{ops: 4000, redis: redisDelta{cpu: 40 * time.Millisecond}}
	if got := st.redisCPUPerOp(); math.Abs(got-10) > 1e-9 {
		t.Errorf("redisCPUPerOp = %v µs, want 10", got)
	}
}
