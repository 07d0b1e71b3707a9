// Command hammer is the load generator of issue 34's checks from outside:
// c connections send GET requests to a rate-limited URL for d, and it
// prints how many were served, against the ceiling burst + rate × elapsed.
// With -pause it also pauses a Redis of your own (CLIENT PAUSE every
// period), to measure a slow Redis rather than a busy host. Never point
// -pause at a shared Redis.
//
//	go run ./internal/hammer -url http://127.0.0.1:8080/ -c 64 -d 10s -rate 1000 -burst 1000
//	go run ./internal/hammer ... -pause 127.0.0.1:6390 -pause-ms 120 -every 300ms
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/", "the rate-limited URL")
	conns := flag.Int("c", 64, "connections")
	d := flag.Duration("d", 10*time.Second, "duration")
	rate := flag.Float64("rate", 1000, "the limit's rate per second")
	burst := flag.Float64("burst", 1000, "the limit's burst")
	pause := flag.String("pause", "", "address of a Redis of your own to pause (CLIENT PAUSE)")
	pauseMS := flag.Int("pause-ms", 120, "ms of each pause")
	every := flag.Duration("every", 300*time.Millisecond, "one pause every")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *d)
	defer cancel()
	if *pause != "" {
		go pauser(ctx, *pause, *pauseMS, *every)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var counts [600]atomic.Int64
	var errs atomic.Int64
	var first, last atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sent := time.Since(start).Nanoseconds()
				first.CompareAndSwap(0, sent)
				resp, err := client.Get(*url)
				if err != nil {
					errs.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					last.Store(max(last.Load(), time.Since(start).Nanoseconds()))
				}
				counts[min(resp.StatusCode, 599)].Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Duration(last.Load() - first.Load())
	served := counts[http.StatusOK].Load()
	ceiling := *burst + *rate*elapsed.Seconds()
	fmt.Printf("served %d, refused 429 %d, 503 %d, errors %d, elapsed %v, ceiling %.0f, ratio %.4f\n",
		served, counts[429].Load(), counts[503].Load(), errs.Load(), elapsed.Round(time.Millisecond), ceiling, float64(served)/ceiling)
	if float64(served) > ceiling {
		os.Exit(1)
	}
}

// pauser pauses the Redis at addr for ms every period until ctx ends.
func pauser(ctx context.Context, addr string, ms int, period time.Duration) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		_ = rdb.Do(ctx, "CLIENT", "PAUSE", ms, "ALL").Err()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
