// Package security holds the attack tests of redlimit: what a client who
// controls a request's cost, key or headers can do to the limit and to
// Redis. They start their own redis-server on a free loopback port; without
// it they are skipped with a message, except under CI=true, where they
// fail.
package security
