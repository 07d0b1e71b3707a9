// Package givebackattack2 is a second round of attacks on the buckets'
// give-backs (Refund, Settle below the take, a refusal in a later slot),
// from outside package core through its public API only: forged receipt
// parts, receipts taken to another Limiter of the same prefix, Redis
// clock steps back after a key expired, and the unhappy path (Redis down,
// paused beyond the timeout, a reply lost after the script ran). Each test
// compares a key with its twin, a key that saw the same history but for
// the units given back: the key must never stand above it.
package givebackattack2
