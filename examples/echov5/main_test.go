package main

import (
	"testing"

	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

func TestRun(t *testing.T) { exampletest.Smoke(t, run) }
