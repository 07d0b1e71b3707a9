package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

func (l *Limiter) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ended(ctx); ctxErr != nil && !errors.Is(err, ctxErr) {
		// go-redis reports a deadline on the socket as an i/o timeout.
		return fmt.Errorf("core: redis: %w (%v)", ctxErr, err)
	}
	return fmt.Errorf("core: redis: %w", err)
}

// redisFault is the one classifier of the errors core returns: it reports
// whether err means Redis failed (it did not answer within the timeout,
// refused the connection, answered with a reply the scripts never send or
// with an error reply that says it cannot serve now, or the circuit is
// open), rather than the call being wrong or the caller giving up. The
// breaker counts, the local fallback answers, and the error wraps
// ErrUnavailable (see classified) exactly when it reports true, so
// httplimit, grpclimit and users ask it through errors.Is(err,
// ErrUnavailable). In order:
//
//   - nil: false;
//   - an error that wraps ErrUnavailable (the circuit, or classified
//     already): true;
//   - the caller's mistakes (ErrEmptyKey, ErrInvalidCost, ErrInvalidLimit,
//     ErrClosed) and ErrWaitExceedsDeadline (a refusal): false;
//   - any error once the caller's ctx has ended (its cancel or deadline,
//     not the Limiter's timeout): false;
//   - an error reply: true only when it says the server cannot serve any
//     key now (see unavailableReply); any other (a script's own error, as
//     a Redis clock a calendar window away; WRONGTYPE; a value redlimit did
//     not write) is the request's, and says nothing of the other keys;
//   - anything else: true.
func redisFault(ctx context.Context, err error) bool {
	var reply redis.Error
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnavailable):
		return true
	case errors.Is(err, ErrInvalidCost), errors.Is(err, ErrInvalidLimit), errors.Is(err, ErrEmptyKey),
		errors.Is(err, ErrClosed), errors.Is(err, ErrWaitExceedsDeadline):
		return false
	case ctx.Err() != nil:
		// The caller's context ended, not our timeout.
		return false
	case errors.As(err, &reply):
		return unavailableReply(reply.Error())
	}
	return true
}

// classified is err as core returns it: wrapping ErrUnavailable when
// redisFault says it is Redis', so that the classification travels with
// it. ctx is the caller's (not bounded by the Limiter's timeout).
func classified(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !redisFault(ctx, err) {
		return err
	}
	return unavailable{err}
}

// unavailable is a Redis fault: its text is the fault's own ("core:
// redis: dial tcp ...: connection refused"), and it matches both
// ErrUnavailable and what it wraps (context.DeadlineExceeded for the
// Limiter's timeout, a redis.Error).
type unavailable struct{ err error }

func (e unavailable) Error() string        { return e.err.Error() }
func (e unavailable) Unwrap() error        { return e.err }
func (e unavailable) Is(target error) bool { return target == ErrUnavailable }

// unavailableReplies begin the error replies that say the server cannot
// serve any key now: loading its data, busy with a script, a replica or a
// Cluster without its master, unable to persist, out of memory or of
// clients, or refusing this client (authentication, permissions).
var unavailableReplies = []string{"LOADING ", "BUSY ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ",
	"NOREPLICAS ", "MISCONF ", "OOM ", "max number of clients", "NOAUTH ", "WRONGPASS ", "NOPERM "}

func unavailableReply(reply string) bool {
	reply = strings.TrimPrefix(reply, "ERR ")
	// Redis 6 wraps a script's error reply: "Error running script (call to
	// f_...): @user_script:1: @user_script: 1: -OOM command not allowed...".
	if rest, ok := strings.CutPrefix(reply, "Error running script"); ok {
		if i := strings.LastIndex(rest, ": -"); i >= 0 {
			reply = rest[i+len(": -"):]
		}
	}
	for _, p := range unavailableReplies {
		if strings.HasPrefix(reply, p) {
			return true
		}
	}
	return false
}

// unsent is the error of a call that never left: its caller had gone.
type unsent struct{ error }

func (e unsent) Unwrap() error { return e.error }

// mayHaveRun reports whether a call that failed with err may have run in
// Redis, so that a retry of its give-back could give back twice. Only an
// error known to come before the call left says it did not: the caller
// gone, the circuit open, the Limiter closed, the arguments refused, a
// refused connection, or a reply that the server cannot serve now.
func mayHaveRun(err error) bool {
	var op *net.OpError
	var reply redis.Error
	var gone unsent
	switch {
	case errors.As(err, &gone), errors.Is(err, ErrCircuitOpen), errors.Is(err, ErrClosed),
		errors.Is(err, ErrInvalidCost), errors.Is(err, ErrInvalidLimit), errors.Is(err, ErrEmptyKey):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	case errors.As(err, &reply):
		return !unavailableReply(reply.Error())
	}
	return true
}
