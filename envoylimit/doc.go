// Package envoylimit serves Envoy's rate limit service protocol.
package envoylimit
