// Package reliability holds the fault-injection tests of redlimit: a slow,
// paused, killed and restarted Redis, the circuit breaker and the local
// fallback, SCRIPT FLUSH, connection pool exhaustion, Redis Cluster with a
// manual failover, Sentinel, hostile input, fuzzing's big brother (many
// distinct keys), and several OS processes sharing one key.
//
// It has no code of its own: everything is in its _test.go files. Tests
// that kill, pause or restart Redis start their own redis-server on a free
// loopback port and never touch the shared one named by REDIS_URL. Without
// redis-server (or REDIS_URL, REDIS_CLUSTER_ADDRS) those tests are skipped
// with a message, except under CI=true, where they fail.
package reliability
