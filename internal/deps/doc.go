// Package deps holds the tests that keep each package's dependencies to
// what its users expect to download and link: core needs only go-redis and
// knows nothing of HTTP; an adapter needs only core, httplimit and its own
// framework, and its module requires no other framework.
package deps
