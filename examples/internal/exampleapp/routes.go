package exampleapp

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// The limits of GET /slow?ms= and GET /spend?units=.
const (
	// SlowDefault is what GET /slow sleeps without ms.
	SlowDefault = 500 * time.Millisecond
	// SlowMax is the most GET /slow sleeps.
	SlowMax = 10 * time.Second
	// MaxUnits is the most units GET /spend reports.
	MaxUnits = 1_000_000
)

var (
	errSlow  = errors.New("ms must be a whole number of milliseconds from 0 to " + strconv.Itoa(int(SlowMax/time.Millisecond)))
	errUnits = errors.New("units must be a whole number from 1 to " + strconv.Itoa(MaxUnits))
)

// Slow is what GET /slow does: it sleeps ms milliseconds (its query value;
// SlowDefault when empty, at most SlowMax), or until ctx ends, when the
// client left. Its error, for an ms that is not valid, is a short text to
// answer with 400; the handler answers ok otherwise.
func Slow(ctx context.Context, ms string) error {
	d := SlowDefault
	if ms != "" {
		n, err := strconv.ParseUint(ms, 10, 32)
		if err != nil || time.Duration(n)*time.Millisecond > SlowMax {
			return errSlow
		}
		d = time.Duration(n) * time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// Units parses GET /spend's units, the units the request reports it used:
// a whole number from 1 to MaxUnits. Its error is a short text to answer
// with 400.
func Units(units string) (int, error) {
	n, err := strconv.ParseUint(units, 10, 32)
	if err != nil || n < 1 || n > MaxUnits {
		return 0, errUnits
	}
	return int(n), nil
}
