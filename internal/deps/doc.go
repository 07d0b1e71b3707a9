// Package deps holds the test that keeps each package's dependencies to
// what its users expect to download and link: core needs only go-redis, an
// adapter only core and its own framework.
package deps
