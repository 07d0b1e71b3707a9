package redlimittest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
	"github.com/redlimit/redlimit/redlimittest"
)

// newLoginHandler is the application's own code: a login endpoint that
// allows 3 failed attempts per minute per client IP, and refuses with 503
// while Redis cannot answer.
func newLoginHandler(limiter *core.Limiter) (http.Handler, error) {
	policy, err := httplimit.New(httplimit.Config{
		Limiter:    limiter,
		Name:       "login",
		Limit:      core.PerMinute(3),
		CountIf:    func(status int) bool { return status >= 400 }, // a good login gives its unit back
		FailClosed: true,
	})
	if err != nil {
		return nil, err
	}
	return nethttplimit.New(policy)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "secret" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		_, _ = fmt.Fprintln(w, "welcome")
	})), nil
}

// How an application tests its limits: the test's Redis is in process,
// and its clock moves only when the test says so, so a minute passes at
// once. In a test, t is the *testing.T and the results are compared with
// t.Errorf; here they are printed.
func Example() {
	t := &exampleT{} // in a test: the *testing.T
	defer t.cleanup()

	redis := redlimittest.Start(t)
	handler, err := newLoginHandler(redis.NewLimiter())
	if err != nil {
		t.Fatalf("%v", err)
	}
	login := func(password string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("POST", "/login?password="+password, nil))
		if s := rec.Header().Get("Retry-After"); s != "" {
			fmt.Println(password, rec.Code, "Retry-After", s)
			return
		}
		fmt.Println(password, rec.Code)
	}

	login("guess1")
	login("guess2")
	login("guess3")
	login("secret") // the fourth attempt: refused, whatever its password
	redis.Advance(20 * time.Second)
	login("secret") // a unit refilled (3 per minute), and given back
	login("secret")
	redis.Down()
	login("secret") // the fail policy: closed
	redis.Up()
	login("secret")
	// Output:
	// guess1 401
	// guess2 401
	// guess3 401
	// secret 429 Retry-After 20
	// secret 200
	// secret 200
	// secret 503 Retry-After 1
	// secret 200
}

// exampleT is what redlimittest asks of a testing.TB: an example has no
// *testing.T to give it.
type exampleT struct {
	testing.TB // nil: only the methods below are called
	cleanups   []func()
}

func (*exampleT) Helper()                      {}
func (*exampleT) Logf(string, ...any)          {}
func (*exampleT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (t *exampleT) Cleanup(f func())           { t.cleanups = append(t.cleanups, f) }

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
