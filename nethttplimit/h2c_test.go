package nethttplimit

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// TestHeaderKeyIsOneKeyOverEveryProtocol backs KeyByHeader's "so that "K"
// and " K\t" are one key whatever the protocol" (README "Keys": "one key
// over either") on a real server: HTTP/1.1 strips a field value's leading
// and trailing whitespace on the wire, HTTP/2 (here h2c) hands it to the
// handler as sent. Under 2 per minute, 18 requests whose API key is "K"
// padded six ways get exactly 2 through on either protocol.
func TestHeaderKeyIsOneKeyOverEveryProtocol(t *testing.T) {
	variants := []string{"K", "K ", " K", "K\t", "K  ", "\tK"}
	for _, proto := range []struct {
		name  string
		major int
		set   func(*http.Protocols)
	}{
		{"HTTP/1.1", 1, func(p *http.Protocols) { p.SetHTTP1(true) }},
		{"h2c", 2, func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }},
	} {
		t.Run(proto.name, func(t *testing.T) {
			policy := newPolicy(t, httplimit.Config{Limit: core.PerMinute(2), Key: httplimit.KeyByHeader("X-API-Key")})
			var served, padded, wrongProto atomic.Int32
			srv := httptest.NewUnstartedServer(New(policy)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				served.Add(1)
				if v := r.Header.Get("X-API-Key"); v != "K" {
					padded.Add(1)
				}
				if r.ProtoMajor != proto.major {
					wrongProto.Add(1)
				}
			})))
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetHTTP1(true)
			srv.Config.Protocols.SetUnencryptedHTTP2(true)
			srv.Start()
			defer srv.Close()
			tr := &http.Transport{Protocols: new(http.Protocols)}
			proto.set(tr.Protocols)
			client := &http.Client{Transport: tr}
			defer tr.CloseIdleConnections()

			var admitted int
			for range 3 {
				for _, v := range variants {
					req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
					if err != nil {
						t.Fatal(err)
					}
					req.Header["X-Api-Key"] = []string{v}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						admitted++
					}
				}
			}
			if admitted != 2 || served.Load() != 2 {
				t.Errorf("%d of 18 padded variants of one key admitted (%d served), want exactly 2", admitted, served.Load())
			}
			if wrongProto.Load() > 0 {
				t.Fatalf("%d requests did not arrive over %s", wrongProto.Load(), proto.name)
			}
			t.Logf("%s: %d of 18 admitted; %d of the served requests reached the handler still padded", proto.name, admitted, padded.Load())
		})
	}
}
