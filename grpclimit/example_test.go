package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/httplimit"
)

// exampleLimiter is a Limiter on an in-process Redis whose clock stands
// still, so the examples print the same on every run; in production rdb
// is a client for your Redis, made with ContextTimeoutEnabled.
func exampleLimiter() (*core.Limiter, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	// A patient timeout: the first call loads the script into miniredis'
	// Lua, slow under -race on a busy machine.
	limiter, err := core.New(rdb, core.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	return limiter, func() { _ = rdb.Close(); mr.Close() }
}

// exampleServer serves the standard health service with opts on an
// in-memory listener, and returns a client of it.
func exampleServer(serverOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) (healthpb.HealthClient, func()) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(serverOpts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	dialOpts = append(dialOpts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient("passthrough:///bufconn", dialOpts...)
	if err != nil {
		panic(err)
	}
	return healthpb.NewHealthClient(cc), func() { _ = cc.Close(); srv.Stop() }
}

// Limit each API key to 2 calls a minute. (The default key, the peer's
// IP, needs a TCP connection: an in-memory one has no address.)
func Example() {
	limiter, done := exampleLimiter()
	defer done()

	policy, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limit:   core.PerMinute(2),
		Key:     grpclimit.KeyByMetadata("x-api-key"),
	})
	if err != nil {
		panic(err)
	}
	client, stop := exampleServer([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(policy)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(policy)),
	})
	defer stop()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "key-of-alice")
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		st := status.Convert(err)
		if err == nil {
			fmt.Println(st.Code(), "remaining", header.Get("x-ratelimit-remaining"))
			continue
		}
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println(st.Code(), "remaining", trailer.Get("x-ratelimit-remaining"), "retry in", info.GetRetryDelay().AsDuration())
			}
		}
	}
	// Output:
	// OK remaining [1]
	// OK remaining [0]
	// ResourceExhausted remaining [0] retry in 30s
}

// Keep the calls of every process to an upstream within its quota of 2 a
// minute: a call that cannot get a unit before its deadline is not made,
// and its RetryInfo says when one would be there.
func ExampleUnaryClientInterceptor() {
	limiter, done := exampleLimiter()
	defer done()

	client, stop := exampleServer(nil,
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(limiter, "upstream:health", core.PerMinute(2))))
	defer stop()

	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		st := status.Convert(err)
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println(st.Code(), "retry in", info.GetRetryDelay().AsDuration())
			}
		}
		if err == nil {
			fmt.Println(st.Code())
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted retry in 30s
}
