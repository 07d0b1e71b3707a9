// Package adapt holds what httplimit gives its framework adapters and no
// user needs. httplimit sets it at init; the adapters type it, since this
// package cannot name httplimit's types.
package adapt

var withKey any

// SetWithKey sets what WithKey calls: P is *httplimit.Policy, K
// httplimit.KeyFunc.
func SetWithKey[P, K any](f func(P, K) P) { withKey = f }

// WithKey returns a copy of policy that keys requests with key: for an
// adapter whose framework has a key hook of its own (Fiber's KeyGenerator,
// Echo's IdentifierExtractor). key must be an httplimit.KeyFunc, not a
// func literal of its shape.
func WithKey[P, K any](policy P, key K) P { return withKey.(func(P, K) P)(policy, key) }
