package core

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// maxRules bounds the Rules of one decision, so that Reset can name every
// state a key may have and a call's keys fit its buffers.
const maxRules = 8

// plan is a validated set of 1 to maxRules Limits, decided together, with
// the script arguments they share built once, so that the hot path neither
// validates nor boxes integers again.
type plan struct {
	limits []Limit // the layers'
	index  []int   // their numbers among their keys' Rules
	rule   []int   // their numbers among the decision's Rules
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
	index int // its number among its key's Rules, in the state's keys (see stateKeys)
	rule  int // its number among the decision's Rules, for errors
}

type calendarArgs struct {
	w          []*calendarWindows // per layer, nil where not a calendar
	args, head []any
}

// newPlan validates limits; index[i] is layer i's number in the keys,
// rule[i] its Rule's in the decision; stagger: its FixedWindows over a
// Period are staggered (WithStaggeredWindows).
func newPlan(limits []Limit, index, rule []int, stagger bool) (*plan, error) {
	pl := &plan{limits: slices.Clone(limits), index: slices.Clone(index), rule: slices.Clone(rule), layers: make([]layer, len(limits))}
	script, cal := 0, false
	for i, lim := range limits {
		p, err := lim.params()
		if err != nil {
			if len(limits) > 1 || rule[0] > 0 {
				return nil, fmt.Errorf("rule %d: %w", rule[i], err)
			}
			return nil, err
		}
		row := lim.row()
		if stagger && row == &algorithms[FixedWindow] {
			row = &staggeredWindow
		}
		pl.layers[i] = layer{limit: lim, p: p, row: row, index: index[i], rule: rule[i]}
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

// keys appends the state keys of every layer: of tag, or of tags[i] for
// layer i when tags is given.
func (pl *plan) keys(dst []string, prefix, tag string, tags []string) []string {
	for i, ly := range pl.layers {
		if tags != nil {
			tag = tags[i]
		}
		dst = stateKeys(dst, prefix, tag, ly.row, ly.index)
	}
	return dst
}

// plans caches the plans of single Limits and of Rule sets, a few of each, so the hot path finds its plan with one
// atomic load and one comparison.
type plans struct {
	one     [8]atomic.Pointer[plan]
	layers  [8]atomic.Pointer[plan]
	stagger bool // WithStaggeredWindows
}

var layer0 = []int{0}

func (c *plans) of(limit Limit) (*plan, error) {
	h := (uint64(limit.Rate)*0x9E3779B97F4A7C15 ^ uint64(limit.Period)>>10 ^ uint64(limit.Burst)<<7 ^
		uint64(limit.Algorithm) ^ uint64(limit.Calendar)<<3) * 0x9E3779B97F4A7C15
	slot := &c.one[h>>61]
	old := slot.Load()
	if old != nil && old.limits[0] == limit {
		return old, nil
	}
	pl, err := newPlan([]Limit{limit}, layer0, layer0, c.stagger)
	if err != nil {
		return nil, err
	}
	return keep(slot, old, pl, func(cur *plan) bool { return cur.limits[0] == limit }), nil
}

// keep stores pl in slot unless another caller stored a plan of the same
// limits since old was read; then it is theirs that every caller uses:
// a batch groups decisions by plan, so concurrent first decisions under
// one Limit must not make a group each (TestPlansConverge).
func keep(slot *atomic.Pointer[plan], old, pl *plan, same func(*plan) bool) *plan {
	if slot.CompareAndSwap(old, pl) {
		return pl
	}
	if cur := slot.Load(); cur != nil && same(cur) {
		return cur
	}
	return pl
}

// ofRules is the plan of limits, layer i being number index[i] among its
// key's Rules and number rule[i] among the decision's.
func (c *plans) ofRules(limits []Limit, index, rule []int) (*plan, error) {
	h := uint64(len(limits))
	for i, l := range limits {
		h = (h ^ uint64(l.Rate) ^ uint64(l.Period)>>10 ^ uint64(l.Algorithm)<<5 ^ uint64(index[i])<<13 ^ uint64(rule[i])<<17) * 0x9E3779B97F4A7C15
	}
	slot := &c.layers[h>>61]
	same := func(pl *plan) bool {
		return slices.Equal(pl.limits, limits) && slices.Equal(pl.index, index) && slices.Equal(pl.rule, rule)
	}
	old := slot.Load()
	if old != nil && same(old) {
		return old, nil
	}
	pl, err := newPlan(limits, index, rule, c.stagger)
	if err != nil {
		return nil, err
	}
	return keep(slot, old, pl, same), nil
}
