// Package givebackattack attacks the buckets' give-back (Refund, Settle
// below the take, a refusal in a later slot) from outside package core, as
// a client that tries to get more admitted than the Limit allows by giving
// units back (issue 35, item 1). Each test runs on miniredis with a clock
// it moves, and compares the key with an exact model of the bucket in
// which the given-back takes never happened: the key must never stand
// above it.
package givebackattack
