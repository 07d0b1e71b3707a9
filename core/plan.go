package core

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// maxLayers bounds the Limits of one key decided together (AllowLayers),
// so that Reset can name every key a caller may have.
const maxLayers = 8

// plan is a validated set of 1 to maxLayers Limits of one key, decided
// together, with the script arguments they share built once, so that the
// hot path neither validates nor boxes integers again.
type plan struct {
	limits []Limit // the layers'
	all    []Limit // a layer subset's whole set, with mask
	mask   uint8
	layers []layer
	script *evalScript // the EVAL form of run: the one algorithm's, or all
	single *evalScript // the EVAL form of one, for a plan of one layer
	nkeys  int         // KEYS per caller key
	ids    bool        // a layer names permits (Concurrency)
	args   []any       // run's ARGV head: the layers
	head   []any       // one's ARGV head, for a plan of one layer: the Limit
	one    []any       // head, then a request of n = 1, consumed
	// cal holds the ARGV head of a plan with a calendar layer, rebuilt
	// when the client's clock leaves its window.
	cal atomic.Pointer[calendarArgs]
}

type layer struct {
	limit Limit
	p     params
	row   *algorithm
	index int // its number in the state's keys (see stateKeys)
}

type calendarArgs struct {
	w          []*calendarWindows // per layer, nil where not a calendar
	args, head []any
}

// newPlan validates limits; index[i] is layer i's number in the keys.
func newPlan(limits []Limit, index []int) (*plan, error) {
	pl := &plan{limits: slices.Clone(limits), layers: make([]layer, len(limits))}
	script, cal := 0, false
	for i, lim := range limits {
		p, err := lim.params()
		if err != nil {
			if len(limits) > 1 || index[0] > 0 {
				return nil, fmt.Errorf("layer %d: %w", index[i], err)
			}
			return nil, err
		}
		row := lim.row()
		pl.layers[i] = layer{limit: lim, p: p, row: row, index: index[i]}
		pl.nkeys += len(row.suffixes)
		pl.ids = pl.ids || row.ids
		cal = cal || lim.Calendar != NoCalendar
		if i == 0 {
			script = row.script
		} else if row.script != script {
			script = 0
		}
	}
	pl.script = evalScripts[script]
	if len(limits) == 1 {
		pl.single = evalOne[script]
	}
	if cal {
		pl.cal.Store(pl.calendar(time.Now()))
		return pl, nil
	}
	pl.args, pl.head = pl.heads(nil)
	if pl.head != nil && !pl.ids {
		pl.one = append(pl.head[:len(pl.head):len(pl.head)], 1*8+modeConsume)
	}
	return pl, nil
}

// heads are the ARGV heads of run and of one (nil for several layers);
// w gives the calendar layers' windows.
func (pl *plan) heads(w []*calendarWindows) (run, one []any) {
	run = []any{len(pl.layers)}
	for i, ly := range pl.layers {
		var limit []int64
		if w != nil && w[i] != nil {
			limit = w[i].args
		} else {
			limit = ly.row.args(ly.p)
		}
		s := spec(ly.row.script, limit)
		run = append(run, s)
		if len(pl.layers) == 1 {
			one = []any{s}
		}
	}
	return run, one
}

// spec is a Limit as one ARGV string, "<script> <param> ...": the library
// parses each spec once and keeps it (limit in scripts/prelude.lua), so a
// call carries one argument per Limit and Redis converts no numbers for it.
func spec(script int, limit []int64) string {
	b := strconv.AppendInt(make([]byte, 0, 64), int64(script), 10)
	for _, v := range limit {
		b = strconv.AppendInt(append(b, ' '), v, 10)
	}
	return string(b)
}

func (pl *plan) calendar(now time.Time) *calendarArgs {
	c := &calendarArgs{w: make([]*calendarWindows, len(pl.layers))}
	for i, ly := range pl.layers {
		if ly.limit.Calendar != NoCalendar {
			c.w[i] = newCalendarWindows(ly.limit, now)
		}
	}
	c.args, c.head = pl.heads(c.w)
	return c
}

// argv is the plan's ARGV heads now, of run and of one.
func (pl *plan) argv(now time.Time) (run, one []any) {
	if pl.args != nil {
		return pl.args, pl.head
	}
	c := pl.cal.Load()
	for _, w := range c.w {
		if w != nil && !w.holds(now) {
			c = pl.calendar(now)
			pl.cal.Store(c)
			break
		}
	}
	return c.args, c.head
}

// capacity is layer 0's: what a cost is checked against first.
func (pl *plan) capacity() int64 { return pl.layers[0].p.capacity }

// mostCharged is the largest charge any layer takes (see
// params.mostCharged): a larger one leaves every layer as deep in debt.
func (pl *plan) mostCharged() int64 {
	var most int64
	for _, ly := range pl.layers {
		most = max(most, ly.p.mostCharged(ly.row))
	}
	return most
}

// keys appends the state keys of tag under every layer.
func (pl *plan) keys(dst []string, prefix, tag string) []string {
	for _, ly := range pl.layers {
		dst = stateKeys(dst, prefix, tag, ly.row, ly.index)
	}
	return dst
}

// plans caches the plans of single Limits (Allow and the like) and of
// layer sets, a few of each, so the hot path finds its plan with one
// atomic load and one comparison.
type plans struct {
	one    [8]atomic.Pointer[plan]
	layers [8]atomic.Pointer[plan]
}

var layer0 = []int{0}

func (c *plans) of(limit Limit) (*plan, error) {
	h := (uint64(limit.Rate)*0x9E3779B97F4A7C15 ^ uint64(limit.Period)>>10 ^ uint64(limit.Burst)<<7 ^
		uint64(limit.Algorithm) ^ uint64(limit.Calendar)<<3) * 0x9E3779B97F4A7C15
	slot := &c.one[h>>61]
	if pl := slot.Load(); pl != nil && pl.limits[0] == limit {
		return pl, nil
	}
	pl, err := newPlan([]Limit{limit}, layer0)
	if err != nil {
		return nil, err
	}
	slot.Store(pl)
	return pl, nil
}

// ofLayers is the plan of the layers of limits in mask (bit i: layer i),
// each keeping its number in the keys.
func (c *plans) ofLayers(limits []Limit, mask uint8) (*plan, error) {
	if len(limits) == 0 || len(limits) > maxLayers {
		return nil, fmt.Errorf("%w: AllowLayers takes 1 to %d Limits, got %d", ErrInvalidLimit, maxLayers, len(limits))
	}
	h := uint64(len(limits)) ^ uint64(mask)<<8
	for _, l := range limits {
		h = (h ^ uint64(l.Rate) ^ uint64(l.Period)>>10 ^ uint64(l.Algorithm)<<5) * 0x9E3779B97F4A7C15
	}
	slot := &c.layers[h>>61]
	if pl := slot.Load(); pl != nil && pl.mask == mask && slices.Equal(pl.all, limits) {
		return pl, nil
	}
	var sub []Limit
	var index []int
	for i, l := range limits {
		if mask&(1<<i) != 0 {
			sub, index = append(sub, l), append(index, i)
		}
	}
	pl, err := newPlan(sub, index)
	if err != nil {
		return nil, err
	}
	pl.all, pl.mask = slices.Clone(limits), mask
	slot.Store(pl)
	return pl, nil
}
