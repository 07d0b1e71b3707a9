// Command rlsload drives a rate limit service (envoy.service.ratelimit.v3,
// the protocol Envoy speaks to envoyproxy/ratelimit and to redlimit serve)
// with go-control-plane's client, as many Envoys would: a number of
// concurrent streams, each sending one ShouldRateLimit after another, and
// prints what came back. bench/envoy.sh runs it against both services on
// one Redis.
//
//	go run ./cmd/rlsload -addr 127.0.0.1:8081 -streams 16 -duration 5s
//	go run ./cmd/rlsload -addr 127.0.0.1:8081 -streams 1 -n 2000 -descriptors 3
//
// Request i of a stream carries -descriptors descriptors, the j-th one
// (k<j>, v<x>), where x runs over -keys values (each stream starting at its
// own offset), so the configuration it needs is keys k0, k1, ... without a
// value (bench/envoy/envoy.yaml); -entries "k=v,k2=v2" sends that one
// descriptor instead. -hits sets the request's hits_addend. The
// output is one JSON object: requests and decisions (requests x
// descriptors) made, how many came back OK, OVER_LIMIT or failed, the
// decisions per second, and latency quantiles.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type options struct {
	addr, domain, entries string
	streams, conns, d     int
	keys, hits            int
	n                     int64
	duration, timeout     time.Duration
	warmup                time.Duration
}

type report struct {
	Addr        string  `json:"addr"`
	Streams     int     `json:"streams"`
	Descriptors int     `json:"descriptors"`
	Requests    int64   `json:"requests"`
	Decisions   int64   `json:"decisions"`
	OK          int64   `json:"ok"`
	OverLimit   int64   `json:"over_limit"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"decisions_per_second"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8081", "the service's gRPC address")
	flag.StringVar(&o.domain, "domain", "bench", "the request's domain")
	flag.StringVar(&o.entries, "entries", "", `one descriptor to send, "key=value,key=value" (default: k0=v<x>, k1=v<x>, ...)`)
	flag.IntVar(&o.streams, "streams", 1, "concurrent streams, each one request at a time")
	flag.IntVar(&o.conns, "conns", 1, "gRPC connections the streams share, round robin")
	flag.IntVar(&o.d, "descriptors", 1, "descriptors per request")
	flag.IntVar(&o.keys, "keys", 1000, "values each descriptor's key runs over")
	flag.IntVar(&o.hits, "hits", 0, "the request's hits_addend (0: unset, which counts 1)")
	flag.Int64Var(&o.n, "n", 0, "requests in all (0: run for -duration)")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "how long to run when -n is 0")
	flag.DurationVar(&o.warmup, "warmup", 0, "requests sent before measuring, for this long")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Second, "each call's deadline")
	flag.Parse()
	if o.streams < 1 || o.conns < 1 || o.d < 1 || o.keys < 1 {
		fmt.Fprintln(os.Stderr, "rlsload: -streams, -conns, -descriptors and -keys must be at least 1")
		os.Exit(2)
	}
	r, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func run(o options) (report, error) {
	clients := make([]rlsv3.RateLimitServiceClient, o.conns)
	for i := range clients {
		cc, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return report{}, err
		}
		defer func() { _ = cc.Close() }()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	if o.warmup > 0 {
		w := o
		w.n, w.duration = 0, o.warmup
		load(w, clients, new(counts))
	}
	c := new(counts)
	start := time.Now()
	lat := load(o, clients, c)
	secs := time.Since(start).Seconds()
	slices.Sort(lat)
	r := report{
		Addr: o.addr, Streams: o.streams, Descriptors: o.d,
		Requests: c.requests.Load(), OK: c.ok.Load(), OverLimit: c.over.Load(), Errors: c.errs.Load(),
		Seconds: secs, P50ms: quantile(lat, 0.50), P99ms: quantile(lat, 0.99),
	}
	if e := c.first.Load(); e != nil {
		r.FirstError = (*e).Error()
	}
	r.Decisions = r.Requests * int64(o.d)
	r.PerSecond = float64(r.Decisions-c.errs.Load()*int64(o.d)) / secs
	if r.Errors == r.Requests && r.Requests > 0 {
		return r, errors.New("every request failed: " + r.FirstError)
	}
	return r, nil
}

type counts struct {
	requests, ok, over, errs atomic.Int64
	first                    atomic.Pointer[error]
}

// load runs the streams until n requests in all have been sent, or for
// the duration, and returns each request's latency in ms.
func load(o options, clients []rlsv3.RateLimitServiceClient, c *counts) []float64 {
	deadline := time.Now().Add(o.duration)
	var next atomic.Int64
	lats := make([][]float64, o.streams)
	var wg sync.WaitGroup
	for s := range o.streams {
		wg.Go(func() {
			cl := clients[s%len(clients)]
			x := s * 7919 % o.keys
			for {
				if o.n > 0 && next.Add(1) > o.n || o.n == 0 && time.Now().After(deadline) {
					return
				}
				req := request(o, x)
				x = (x + 1) % o.keys
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
				resp, err := cl.ShouldRateLimit(ctx, req)
				cancel()
				lats[s] = append(lats[s], float64(time.Since(t0).Microseconds())/1000)
				c.requests.Add(1)
				switch {
				case err != nil:
					c.errs.Add(1)
					c.first.CompareAndSwap(nil, &err)
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					c.ok.Add(1)
				default:
					c.over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	var all []float64
	for _, l := range lats {
		all = append(all, l...)
	}
	return all
}

func request(o options, x int) *rlsv3.RateLimitRequest {
	if o.entries != "" {
		d := &rlv3.RateLimitDescriptor{}
		for kv := range strings.SplitSeq(o.entries, ",") {
			k, v, _ := strings.Cut(kv, "=")
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		return &rlsv3.RateLimitRequest{Domain: o.domain, Descriptors: []*rlv3.RateLimitDescriptor{d}, HitsAddend: uint32(o.hits)}
	}
	v := "v" + strconv.Itoa(x)
	ds := make([]*rlv3.RateLimitDescriptor, o.d)
	for j := range ds {
		ds[j] = &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k" + strconv.Itoa(j), Value: v}}}
	}
	return &rlsv3.RateLimitRequest{Domain: o.domain, Descriptors: ds, HitsAddend: uint32(o.hits)}
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}
